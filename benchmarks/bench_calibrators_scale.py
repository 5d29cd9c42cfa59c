"""Temperature scaling and structured matrix scaling (SMS) as the data grow: selfcal against
probmetrics 1.3 (the authors' library) and scikit-learn's ``CalibratedClassifierCV(method=
"temperature")`` on the same logits, at the same optimum.

Sizes: 10^3 x 10, 10^4 x 100 and 10^5 x 1000 for temperature scaling; SMS stops at 10^5 x 100
(at 10^5 x 1000 it has 10^6 parameters and each L-BFGS iteration costs 10^11 multiply-adds,
minutes each on these CPUs: it does not fit in a benchmark run, ours or probmetrics'). Each fit
through the public ``fit`` (probabilities for the peers that take them, computed outside the
timed call); the smaller sizes take the median of interleaved rounds after a warm-up, the
largest one timed call each. "Same optimum": every row's NLL on the fitting logits (for
temperature scaling the fitted ``T`` too) -- equal to the printed digits when the solvers
agree; SMS minimises a penalised NLL, so its plain NLL may differ in the last digits, and
probmetrics stops at a gradient norm of 1e-5 on float32 features.

Run: ``python benchmarks/bench_calibrators_scale.py [--threads 2] [--repeats 3]``; writes
``benchmarks/results/calibrators_scale.md``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from _timing import interleaved_times, write_report
from bench_calibrators import LogitsClassifier, softmax, synthetic

import selfcal.metrics as M
from selfcal.posthoc import build_calibrator

RESULTS = Path(__file__).parent / "results" / "calibrators_scale.md"
SIZES = {
    "ts": ((1_000, 10), (10_000, 100), (100_000, 1_000)),
    "sms": ((1_000, 10), (10_000, 100), (100_000, 100)),
}
PROBMETRICS = {"ts": "temp-scaling", "sms": "sms"}
Fit = Callable[[], Callable[[], np.ndarray]]
"""A fit that returns its fitted ``predict_proba`` on the fitting logits."""


def rows(name: str, z: np.ndarray, y: np.ndarray) -> dict[str, Fit]:
    from probmetrics.calibrators import get_calibrator

    p = softmax(z).astype(np.float32) if name == "sms" else softmax(z)

    def ours() -> Callable[[], np.ndarray]:
        cal = build_calibrator(name).fit(logits=z, labels=y)
        return lambda: np.asarray(cal.predict_proba(logits=z))

    def probmetrics() -> Callable[[], np.ndarray]:
        cal = get_calibrator(PROBMETRICS[name]).fit(p, y)
        return lambda: np.asarray(cal.predict_proba(p), dtype=np.float64)

    out: dict[str, Fit] = {
        f"selfcal `{name}`": ours,
        f"probmetrics `{PROBMETRICS[name]}`": probmetrics,
    }
    if name == "ts":
        from sklearn.calibration import CalibratedClassifierCV
        from sklearn.frozen import FrozenEstimator

        frozen = FrozenEstimator(LogitsClassifier().fit(z, y))

        def sklearn() -> Callable[[], np.ndarray]:
            cal = CalibratedClassifierCV(frozen, method="temperature").fit(z, y)
            return lambda: cal.predict_proba(z)

        out["scikit-learn `CalibratedClassifierCV(method='temperature')`"] = sklearn
    return out


def quiet(fn: Fit) -> Fit:
    def call() -> Callable[[], np.ndarray]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn()

    return call


def table(name: str, repeats: int) -> list[str]:
    lines = [
        f"### `{name}`",
        "",
        "| N x C | row | median s | row / selfcal | NLL on the fitting logits | rounds |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for n, c in SIZES[name]:
        z, y = synthetic(n + c, n, c)
        fits = {k: quiet(v) for k, v in rows(name, z, y).items()}
        largest = n * c >= 10**7
        if largest:
            times, predictors = {}, {}
            for key, fit in fits.items():
                start = time.perf_counter()
                predictors[key] = fit()
                times[key] = [time.perf_counter() - start]
        else:
            times = interleaved_times(fits, repeats)
            predictors = {key: fit() for key, fit in fits.items()}
        base = statistics.median(times[f"selfcal `{name}`"])
        for key, t in times.items():
            q = np.clip(predictors[key](), 1e-300, 1.0)
            nll = float(M.nll(probs=q / q.sum(1, keepdims=True), labels=y))
            lines.append(
                f"| {n:,} x {c:,} | {key} | {statistics.median(t):.3f} | "
                f"{statistics.median(t) / base:.2f}x | {nll:.6f} | {len(t)} |"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    command = (
        f"python benchmarks/bench_calibrators_scale.py --threads {args.threads} "
        f"--repeats {args.repeats}"
    )
    lines = [
        "# Temperature scaling and SMS as the data grow",
        "",
        f"torch {torch.__version__}, {args.threads} thread(s), "
        f"{platform.processor() or platform.machine()}; `row / selfcal` = the row's median "
        f"time over selfcal's. Command: `{command}`",
        "",
    ]
    for name in ("ts", "sms"):
        lines += table(name, args.repeats) + [""]
    write_report("\n".join(lines), RESULTS)


if __name__ == "__main__":
    main()
