"""Speed of top-label ECE / MCE / AdaECE on N = 10^7, C = 10, against peers in the same run.

Reference point: one ``torch.max(probs, dim=1)`` pass over the same array (the least work any
top-label metric must do). Peer: torchmetrics' ``multiclass_calibration_error``. Every timing is
the median of ``--repeats`` runs after a warm-up; the table reports ratios, because absolute
times on a shared machine are noise.

    python benchmarks/bench_metrics.py            # N = 10^7 (needs ~1.5 GB RAM)
    python benchmarks/bench_metrics.py --n 1000000 --repeats 3
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
import warnings
from pathlib import Path

import torch

import selfcal
from selfcal import Predictions
from selfcal.metrics import adaece, ece, mce


def median_time(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).parent / "results" / "metrics.md")
    args = parser.parse_args()

    gen = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(args.n, args.classes, generator=gen) * 3, dim=1)
    labels = torch.randint(0, args.classes, (args.n,), generator=gen)

    import torchmetrics.functional as tmf

    def tm(norm: str):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return tmf.calibration_error(probs, labels, task="multiclass",
                                         num_classes=args.classes, n_bins=15, norm=norm)

    pred = Predictions.from_probs(probs, labels)
    rows = {
        "torch.max(dim=1) (reference)": lambda: torch.max(probs, dim=1),
        "selfcal validate + top-label pass": lambda: Predictions.from_probs(probs, labels),
        "selfcal ece": lambda: ece(probs=probs, labels=labels),
        "selfcal mce": lambda: mce(probs=probs, labels=labels),
        "selfcal adaece": lambda: adaece(probs=probs, labels=labels),
        "selfcal ece (pre-validated Predictions)": lambda: ece(pred),
        "selfcal adaece (pre-validated Predictions)": lambda: adaece(pred),
        "torchmetrics ECE (l1)": lambda: tm("l1"),
        "torchmetrics MCE (max)": lambda: tm("max"),
    }
    times = {name: median_time(fn, args.repeats) for name, fn in rows.items()}
    ref = times["torch.max(dim=1) (reference)"]
    tm_ece, tm_mce = times["torchmetrics ECE (l1)"], times["torchmetrics MCE (max)"]
    lines = [
        f"# Top-label binned metrics, N = {args.n:,}, C = {args.classes}, float32 probabilities",
        "",
        f"selfcal {selfcal.__version__}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, {platform.machine()}; median of {args.repeats}.",
        f"Command: `python benchmarks/bench_metrics.py --n {args.n} --repeats {args.repeats}`",
        "",
        "| computation | time / torch.max pass | torchmetrics time / this |",
        "|---|---|---|",
    ]
    for name, t in times.items():
        peer = ""
        if name in ("selfcal ece", "selfcal ece (pre-validated Predictions)"):
            peer = f"{tm_ece / t:.2f}x"
        elif name == "selfcal mce":
            peer = f"{tm_mce / t:.2f}x"
        lines.append(f"| {name} | {t / ref:.2f}x | {peer} |")
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
