"""Wall time of ``selfcal evaluate`` (every metric of its report, with bootstrap intervals) on
10^6 rows.

The issue asks that it "finishes in seconds". Timed in-process through :func:`selfcal.cli.main`
(what the console script runs: load, validate, every metric, default resamples, the table), with
one ``torch.max(dim=1)`` pass over the same logits as a machine-speed yardstick, interleaved;
then each metric's share: :func:`selfcal.evaluation.evaluate` of that metric alone (its point
estimate and bootstrap interval on the default resamples), median of the same repeats.

    python benchmarks/bench_evaluate.py            # N = 10^6, C = 10
    python benchmarks/bench_evaluate.py --n 5000 --out benchmarks/results/evaluate_5000.md
"""

from __future__ import annotations

import argparse
import contextlib
import io
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from _timing import write_report

import selfcal
from selfcal import Predictions
from selfcal.cli import main as cli_main
from selfcal.evaluation import METRICS, default_resamples
from selfcal.evaluation import evaluate as evaluate_metrics

RESULTS = Path(__file__).parent / "results" / "evaluate.md"


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    logits = (rng.normal(size=(args.n, args.classes)) * 3).astype(np.float32)
    labels = rng.integers(0, args.classes, args.n)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "predictions.npz"
        np.savez(path, logits=logits, labels=labels)
        z = torch.from_numpy(logits)

        def evaluate() -> None:
            quiet = io.StringIO()
            with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                code = cli_main(["evaluate", str(path)])
            if code not in (0, None):
                raise SystemExit(f"selfcal evaluate failed with exit code {code}")

        evaluate()  # warm-up (imports)
        runs, refs = [], []
        for _ in range(args.repeats):
            refs.append(timed(lambda: torch.max(z, dim=1)))
            runs.append(timed(evaluate))
        pred = Predictions.from_logits(z, torch.from_numpy(labels))
        shares = {
            key: statistics.median(
                timed(lambda k=key: evaluate_metrics(pred, keys=[k])) for _ in range(args.repeats)
            )
            for key in METRICS
        }
    seconds = statistics.median(runs)
    ratio = statistics.median(r / m for r, m in zip(runs, refs, strict=True))
    text = (
        "\n".join(
            [
                f"# `selfcal evaluate` on {args.n:,} rows x {args.classes} classes "
                "(float32 logits, .npz)",
                "",
                f"selfcal {selfcal.__version__}, torch {torch.__version__}, "
                f"{torch.get_num_threads()} threads, {platform.machine()}; "
                f"median of {args.repeats}.",
                "Command: `python benchmarks/bench_evaluate.py "
                f"--n {args.n} --repeats {args.repeats}"
                f"{'' if args.out == RESULTS else f' --out {args.out}'}`",
                "",
                "| quantity | value |",
                "|---|---|",
                f"| wall time, all {len(METRICS)} metrics + {default_resamples(args.n)} bootstrap "
                f"resamples | {seconds:.1f} s |",
                f"| the same / one torch.max(dim=1) pass over the logits | {ratio:.0f}x |",
                "",
                "Each metric alone, point estimate and bootstrap interval, in-process on the "
                "validated predictions:",
                "",
                "| metric | seconds |",
                "|---|---:|",
                *(f"| {key} | {t:.3f} |" for key, t in shares.items()),
                f"| all {len(shares)} | {sum(shares.values()):.2f} |",
            ]
        )
        + "\n"
    )
    write_report(text, args.out)


if __name__ == "__main__":
    main()
