"""Speed of top-label ECE / MCE / AdaECE on N = 10^7, C = 10, against peers in the same run.

Reference point: one ``torch.max(probs, dim=1)`` pass over the same array (the least work any
top-label metric must do). Peer: torchmetrics' ``multiclass_calibration_error``. Repeats are
interleaved -- each round times the reference and then every row -- and a row's ratio is the
median over rounds of its time divided by that round's reference time, so slow phases of a
shared machine hit both sides of a ratio alike. The table reports ratios, because absolute
times on a shared machine are noise. Rows marked "torch path" run with ``SELFCAL_KERNELS=0``:
what a user without numba gets.

    python benchmarks/bench_metrics.py            # N = 10^7 (needs ~1.5 GB RAM)
    python benchmarks/bench_metrics.py --n 1000000 --repeats 3
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import warnings
from pathlib import Path

import torch
from _timing import interleaved_times, write_report

import selfcal
from selfcal import Predictions
from selfcal.metrics import adaece, ece, mce


def round_ratio(times: dict[str, list[float]], num: str, den: str) -> str:
    """Median over rounds of ``time(num) / time(den)`` within the round, with the range."""
    r = sorted(a / b for a, b in zip(times[num], times[den], strict=True))
    return f"{statistics.median(r):.2f}x ({r[0]:.2f}-{r[-1]:.2f})"


TORCH_PARTS = (
    "  of which: validate + top-label pass, torch path",
    "  of which: binning and the ECE sum (pre-validated Predictions), torch path",
)
"""The torch path of ``ece(probs=, labels=)`` in its two parts, timed alone."""


def torch_path_profile(times: dict[str, list[float]], ref: str) -> list[str]:
    """Where the torch path's time goes, from :data:`TORCH_PARTS`' medians (ratios to the
    reference within each round)."""

    def median(name: str) -> float:
        return statistics.median(a / b for a, b in zip(times[name], times[ref], strict=True))

    total = median("selfcal ece, torch path (SELFCAL_KERNELS=0)")
    check, binning = (median(name) for name in TORCH_PARTS)
    return [
        "Where the torch path's time goes (what a GPU or a CPU without numba runs), as ratios "
        f"to a `torch.max` pass: of its {total:.2f}x, the validated top-label pass takes "
        f"{check:.2f}x -- three reductions over every score (maximum and argmax, the chunk "
        "minimum: probabilities must be >= 0, and the row sum: they must sum to 1; each chunk "
        "stays in cache), where numba's kernel does the three in one loop -- and the binning "
        f"of the N confidences with the ECE sum {binning:.2f}x (a bucketize and three bin sums "
        f"over N rows); the remaining {total - check - binning:.2f}x is the rest of the call. "
        "The 1.5x target would need the validation dropped or the reductions fused into one "
        "kernel, which plain torch cannot express (numba does; on a GPU it would take a CUDA "
        "or Triton kernel)."
    ]


def kernels_off(fn):
    """``fn`` run on the plain torch path (what a user without numba gets)."""

    def run():
        os.environ["SELFCAL_KERNELS"] = "0"
        try:
            return fn()
        finally:
            del os.environ["SELFCAL_KERNELS"]

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "metrics.md"
    )
    args = parser.parse_args()

    gen = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(args.n, args.classes, generator=gen) * 3, dim=1)
    labels = torch.randint(0, args.classes, (args.n,), generator=gen)

    import torchmetrics.functional as tmf

    def tm(norm: str):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return tmf.calibration_error(
                probs, labels, task="multiclass", num_classes=args.classes, n_bins=15, norm=norm
            )

    pred = Predictions.from_probs(probs, labels)
    rows = {
        "torch.max(dim=1) (reference)": lambda: torch.max(probs, dim=1),
        "selfcal validate + top-label pass": lambda: Predictions.from_probs(probs, labels),
        "selfcal ece": lambda: ece(probs=probs, labels=labels),
        "selfcal mce": lambda: mce(probs=probs, labels=labels),
        "selfcal adaece": lambda: adaece(probs=probs, labels=labels),
        "selfcal ece (pre-validated Predictions)": lambda: ece(pred),
        "selfcal adaece (pre-validated Predictions)": lambda: adaece(pred),
        "selfcal ece, torch path (SELFCAL_KERNELS=0)": kernels_off(
            lambda: ece(probs=probs, labels=labels)
        ),
        TORCH_PARTS[0]: kernels_off(lambda: Predictions.from_probs(probs, labels)),
        TORCH_PARTS[1]: kernels_off(lambda: ece(pred)),
        "selfcal adaece, torch path (SELFCAL_KERNELS=0)": kernels_off(
            lambda: adaece(probs=probs, labels=labels)
        ),
        "torchmetrics ECE (l1)": lambda: tm("l1"),
        "torchmetrics MCE (max)": lambda: tm("max"),
    }
    peers = {
        "selfcal ece": "torchmetrics ECE (l1)",
        "selfcal mce": "torchmetrics MCE (max)",
        "selfcal ece (pre-validated Predictions)": "torchmetrics ECE (l1)",
        "selfcal ece, torch path (SELFCAL_KERNELS=0)": "torchmetrics ECE (l1)",
    }
    ref_name = "torch.max(dim=1) (reference)"
    times = interleaved_times(rows, args.repeats)
    numba = importlib.util.find_spec("numba") is not None
    lines = [
        f"# Top-label binned metrics, N = {args.n:,}, C = {args.classes}, float32 probabilities",
        "",
        f"selfcal {selfcal.__version__}, torch {torch.__version__}, numba "
        f"{'installed' if numba else 'not installed'}, {torch.get_num_threads()} threads, "
        f"{platform.machine()}; {args.repeats} interleaved rounds: median ratio within a "
        "round (lowest-highest).",
        f"Command: `python benchmarks/bench_metrics.py --n {args.n} --repeats {args.repeats}`",
        "",
        "| computation | time / torch.max pass | peer time / this |",
        "|---|---|---|",
    ]
    for name in rows:
        peer = round_ratio(times, peers[name], name) if name in peers else ""
        lines.append(f"| {name} | {round_ratio(times, name, ref_name)} | {peer} |")
    lines += ["", *torch_path_profile(times, ref_name)]
    text = "\n".join(lines) + "\n"
    write_report(text, args.out)


if __name__ == "__main__":
    main()
