"""Post-hoc calibration at real class counts: selfcal against probmetrics 1.3 (the authors'
library) and scikit-learn's ``CalibratedClassifierCV(method="temperature")`` on the same
logits -- time, peak memory, and the test NLL each fit reaches ("same optimum").

* **5,000 x 100, one thread**: the CIFAR-100 prediction sets of ``--sets`` (default
  ``$SELFCAL_PREDICTIONS``; third-party ResNet, VGG, MobileNetV2, ShuffleNetV2 and RepVGG
  models, float32 logits). Every fit on each set's 5,000 validation rows, in interleaved
  rounds after a warm-up; per set the median time, and each row's time over selfcal's SMS;
  over the sets, the median and range of those ratios, and of the test NLL's difference from
  selfcal's SMS (5,000 test rows).
* **25,000 x 1,000 and 50,000 x 1,000, two threads**: synthetic ImageNet-shaped logits
  (:func:`imagenet_shaped`: labels drawn from ``softmax(z / 1.5)``, so temperature scaling is
  the true map), twice as many rows made and halved into validation and test. Each fit runs
  in a fresh process, one timed call after a small warm-up fit; its peak memory is the
  process's peak resident set during the fit minus its resident set before it (the data made;
  ``/proc/self/clear_refs``), also as a multiple of one float64 copy of the validation logits.

probmetrics' calibrators take probabilities: they get the softmax of the logits, computed
outside the timed call, as scikit-learn gets the logits. These machines are shared and noisy:
read the times as ratios within a run.

Run: ``python benchmarks/bench_calibrators_scale.py [--sets DIR]`` (about 15 minutes on two
cores); writes ``benchmarks/results/calibrators_scale.md``. ``--sizes 25000`` runs one large
size only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from _timing import interleaved_times, write_report
from bench_calibrators import LogitsClassifier

import selfcal
import selfcal.metrics as M
from selfcal.posthoc import AutoCalibration, build_calibrator

RESULTS = Path(__file__).parent / "results" / "calibrators_scale.md"
OURS = ("ts", "svs", "sms", "auto")
PROBMETRICS = {"ts": "temp-scaling", "svs": "svs", "sms": "sms"}
ROWS = (
    [f"selfcal {n}" for n in OURS] + [f"probmetrics {n}" for n in PROBMETRICS] + ["scikit-learn ts"]
)
Fit = Callable[[], Callable[[np.ndarray], np.ndarray]]
"""A fit that returns its fitted map: logits -> probabilities."""


def imagenet_shaped(seed: int, n: int, c: int = 1000) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` float32 logits over ``c`` classes shaped like an ImageNet classifier's: ``N(0, 1)``
    noise plus a margin of 12.3 on one class per row, labels drawn from ``softmax(z / 1.5)``
    (an over-confident model that temperature scaling calibrates exactly; top-1 accuracy about
    72%)."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, c, generator=g)
    z[torch.arange(n), torch.randint(0, c, (n,), generator=g)] += 12.3
    y = torch.multinomial(torch.softmax(z / 1.5, 1), 1, generator=g).squeeze(1)
    return z, y


def fits(z: np.ndarray, y: np.ndarray) -> dict[str, Fit]:
    """Every row's fit on logits ``z``, labels ``y``."""
    from probmetrics.calibrators import get_calibrator
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.frozen import FrozenEstimator

    p = torch.softmax(torch.as_tensor(z), 1).numpy()

    def ours(name: str) -> Fit:
        def fit() -> Callable[[np.ndarray], np.ndarray]:
            cal = AutoCalibration() if name == "auto" else build_calibrator(name)
            cal.fit(logits=z, labels=y)
            return lambda zt: np.asarray(cal.predict_proba(logits=zt))

        return fit

    def theirs(name: str) -> Fit:
        def fit() -> Callable[[np.ndarray], np.ndarray]:
            cal = get_calibrator(name).fit(p, y)
            return lambda zt: np.asarray(
                cal.predict_proba(torch.softmax(torch.as_tensor(zt), 1).numpy()), np.float64
            )

        return fit

    def sklearn() -> Callable[[np.ndarray], np.ndarray]:
        frozen = FrozenEstimator(LogitsClassifier().fit(z, y))
        cal = CalibratedClassifierCV(frozen, method="temperature").fit(z, y)
        return cal.predict_proba

    out = {f"selfcal {n}": ours(n) for n in OURS}
    out |= {f"probmetrics {n}": theirs(pm) for n, pm in PROBMETRICS.items()}
    out["scikit-learn ts"] = sklearn
    return out


def test_nll(predict: Callable[[np.ndarray], np.ndarray], z: np.ndarray, y: np.ndarray) -> float:
    q = np.clip(predict(z), 1e-300, 1.0)
    return float(M.nll(probs=q / q.sum(1, keepdims=True), labels=y))


def quiet(fn: Fit) -> Fit:
    def call() -> Callable[[np.ndarray], np.ndarray]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn()

    return call


# ----------------------------------------------------------------------------- 5,000 x 100
def cifar100(root: Path, repeats: int) -> list[str]:
    from selfcal.io import find_prediction_sets, load_prediction_set

    sets = [p for p in find_prediction_sets(root) if p.name.endswith("cifar100")]
    ratios: dict[str, list[float]] = {row: [] for row in ROWS}
    gaps: dict[str, list[float]] = {row: [] for row in ROWS}
    seconds: dict[str, list[float]] = {row: [] for row in ROWS}
    for path in sets:
        data = load_prediction_set(path)
        rows = {k: quiet(v) for k, v in fits(data.val, data.val_labels).items()}
        times = interleaved_times(rows, repeats)
        base = statistics.median(times["selfcal sms"])
        reference = test_nll(rows["selfcal sms"](), data.test, data.test_labels)
        for row, t in times.items():
            seconds[row].append(statistics.median(t))
            ratios[row].append(statistics.median(t) / base)
            gaps[row].append(test_nll(rows[row](), data.test, data.test_labels) - reference)
    lines = [
        f"### 5,000 x 100: the {len(sets)} CIFAR-100 prediction sets, one thread",
        "",
        "| row | median s | time / selfcal SMS's: median [min, max] over sets | "
        "test NLL − selfcal SMS's: median [min, max] |",
        "|---|---:|---|---|",
    ]
    for row in ROWS:
        r, g = ratios[row], gaps[row]
        lines.append(
            f"| {row} | {statistics.median(seconds[row]):.3f} | {statistics.median(r):.2f}x "
            f"[{min(r):.2f}, {max(r):.2f}] | {statistics.median(g):+.6f} "
            f"[{min(g):+.6f}, {max(g):+.6f}] |"
        )
    return lines


# ----------------------------------------------------------------------------- 1,000 classes
def status(field: str) -> float:
    """``VmRSS`` / ``VmHWM`` of this process, MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")  # pragma: no cover


def one_fit(row: str, n: int, threads: int) -> dict[str, float]:
    """In this (fresh) process: ``row`` fitted on ``n`` ImageNet-shaped rows."""
    torch.set_num_threads(threads)
    z, y = imagenet_shaped(0, 2 * n)
    zv, yv, zt, yt = (t.numpy().copy() for t in (z[:n], y[:n], z[n:], y[n:]))
    del z, y
    small, small_y = imagenet_shaped(1, 2000, 50)
    quiet(fits(small.numpy(), small_y.numpy())[row])()  # imports, first-call costs
    fit = quiet(fits(zv, yv)[row])
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak resident set
    before = status("VmRSS")
    start = time.perf_counter()
    predict = fit()
    seconds = time.perf_counter() - start
    peak = status("VmHWM") - before
    return {"seconds": seconds, "peak_mib": peak, "nll": test_nll(predict, zt, yt)}


def large(n: int, threads: int) -> list[str]:
    copy = n * 1000 * 8 / 2**20
    lines = [
        f"### {n:,} x 1,000: ImageNet-shaped synthetic logits, {threads} threads",
        "",
        f"One float64 copy of the validation logits: {copy:,.0f} MiB.",
        "",
        "| row | s | time / selfcal SMS's | peak memory above the data (MiB) | "
        "× float64 copies | test NLL |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    found = {}
    for row in ROWS:
        command = [sys.executable, __file__, "--row", row, "--n", str(n), "--threads", str(threads)]
        out = subprocess.run(command, capture_output=True, text=True, check=True)
        found[row] = json.loads(out.stdout.strip().splitlines()[-1])
    base = found["selfcal sms"]["seconds"]
    for row, r in found.items():
        lines.append(
            f"| {row} | {r['seconds']:.1f} | {r['seconds'] / base:.2f}x | {r['peak_mib']:.0f} | "
            f"{r['peak_mib'] / copy:.2f} | {r['nll']:.6f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", type=Path, default=os.environ.get("SELFCAL_PREDICTIONS"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sizes", type=int, nargs="*", default=[25_000, 50_000])
    parser.add_argument("--row", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row:
        print(json.dumps(one_fit(args.row, args.n, args.threads)))
        return
    from threadpoolctl import threadpool_limits

    command = "python benchmarks/bench_calibrators_scale.py" + (
        f" --sets {args.sets}" if args.sets else ""
    )
    lines = [
        "# Post-hoc calibration at 100 and 1,000 classes",
        "",
        f"selfcal {selfcal.__version__}, torch {torch.__version__}, "
        f"{platform.processor() or platform.machine()}. Command: `{command}`",
        "",
    ]
    if args.sets:
        torch.set_num_threads(1)
        with threadpool_limits(1):
            lines += cifar100(Path(args.sets), args.repeats) + [""]
    for n in args.sizes:
        lines += large(n, args.threads) + [""]
    write_report("\n".join(lines), RESULTS)


if __name__ == "__main__":
    main()
