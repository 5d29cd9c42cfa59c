"""Each metric's peak CPU memory above its data: the CPU's counterpart of
``scripts/gpu_check.py``'s GPU memory table.

Every metric runs alone in a fresh process on ``--n`` x ``--classes`` seeded float32 logits
(default 100,000 x 1,000: 381 MiB; one float64 copy of them is 763 MiB). The process builds
the logits, the labels and their validated ``Predictions`` (its top-label pass included), resets
the kernel's record of its peak resident memory (``/proc/self/clear_refs``, Linux), reads its
resident memory, computes the metric (point estimate, no bootstrap) and reads the peak
(``VmHWM``): the difference is the most the metric added to the data at any moment, given also
as a fraction of one float64 copy of the logits.

``--baseline REV`` adds the same runs from the ``src`` folder of another revision of this
repository (``bench_cli.export_src``), so that before and after sit in one table.

    python benchmarks/bench_metric_memory.py                      # ~1.5 min
    python benchmarks/bench_metric_memory.py --baseline fb99afc   # and that revision's (~3 min)
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from _timing import write_report
from bench_cli import export_src

from selfcal.evaluation import METRICS

RESULTS = Path(__file__).parent / "results" / "metric_memory.md"

CHILD = """
import sys, time, warnings
import torch
from selfcal import Predictions
from selfcal.evaluation import point_estimates
torch.set_num_threads(2)
n, c, key = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
g = torch.Generator().manual_seed(0)
z = 3 * torch.randn(n, c, generator=g)
y = torch.randint(c, (n,), generator=g)
pred = Predictions.from_logits(z, y)
def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) restarts from the resident memory now
before = status("VmRSS:")
start = time.perf_counter()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    point_estimates(pred, [key])
print(status("VmHWM:") - before, time.perf_counter() - start)
"""
"""One metric's run: prints the KiB by which its computation's peak resident memory exceeds
the resident memory before it (Linux: the peak is reset through ``/proc/self/clear_refs``), and
its seconds (one run, two torch threads: a rough time, not a benchmark)."""


def added_kib(key: str, n: int, classes: int, src: Path | None) -> tuple[int, float]:
    """What ``key`` adds to the peak memory of a fresh process (run from ``src`` if given), and
    its seconds."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), *filter(None, [env.get("PYTHONPATH")])])
    args = [sys.executable, "-c", CHILD, str(n), str(classes), key]
    done = subprocess.run(args, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{key} failed:\n{done.stderr[-2000:]}")
    kib, seconds = done.stdout.split()[-2:]
    return int(kib), float(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--baseline", help="a git revision to compare with")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    copy_kib = args.n * args.classes * 8 / 1024
    with tempfile.TemporaryDirectory() as tmp:
        sources: dict[str, Path | None] = {"this tree": None}
        if args.baseline is not None:
            src, short = export_src(args.baseline, Path(tmp) / "baseline")
            sources[f"`{args.baseline}` ({short})"] = src
        table = {
            name: {key: added_kib(key, args.n, args.classes, src) for key in METRICS}
            for name, src in sources.items()
        }
    import torch  # only for the versions line

    header = " | ".join(f"{name}: MiB | copies | s" for name in table)
    lines = [
        "# Each metric's peak CPU memory above its data",
        "",
        f"`python benchmarks/bench_metric_memory.py --n {args.n} --classes {args.classes}"
        f"{'' if args.baseline is None else f' --baseline {args.baseline}'}`: torch "
        f"{torch.__version__}, {platform.machine()}. Each metric alone in a fresh process on "
        f"{args.n:,} x {args.classes:,} float32 logits (one float64 copy = "
        f"{copy_kib / 1024:,.0f} MiB): the peak resident memory its point estimate adds "
        "(`VmHWM` after a reset, minus `VmRSS` before), and that as a fraction of one float64 "
        "copy; and its seconds (one run: a rough time).",
        "",
        f"| metric | {header} |",
        "|---|" + "---:|---:|---:|" * len(table),
    ]
    for key in METRICS:
        cells = " | ".join(
            f"{kib / 1024:,.0f} | {kib / copy_kib:.2f} | {seconds:.2f}"
            for kib, seconds in (column[key] for column in table.values())
        )
        lines.append(f"| {key} | {cells} |")
    write_report("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
