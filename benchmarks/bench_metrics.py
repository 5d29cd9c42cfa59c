"""Speed of top-label ECE / MCE / AdaECE on N = 10^7, C = 10, against peers in the same run.

Reference point: one ``torch.max(probs, dim=1)`` pass over the same array (the least work any
top-label metric must do). Peer: torchmetrics' ``multiclass_calibration_error``. Repeats are
interleaved -- each round times the reference and then every row -- and a row's ratio is the
median over rounds of its time divided by that round's reference time, so slow phases of a
shared machine hit both sides of a ratio alike. The table reports ratios, because absolute
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


def interleaved_ratios(rows: dict, reference: str, repeats: int) -> dict[str, float]:
    """Median over ``repeats`` rounds of ``time(row) / time(reference)`` within the round."""
    for fn in rows.values():  # warm-up
        fn()
    ratios: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(repeats):
        times = {}
        for name, fn in rows.items():
            start = time.perf_counter()
            fn()
            times[name] = time.perf_counter() - start
        for name, t in times.items():
            ratios[name].append(t / times[reference])
    return {name: statistics.median(r) for name, r in ratios.items()}


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
    ref_name = "torch.max(dim=1) (reference)"
    ratio = interleaved_ratios(rows, ref_name, args.repeats)
    tm_ece, tm_mce = ratio["torchmetrics ECE (l1)"], ratio["torchmetrics MCE (max)"]
    lines = [
        f"# Top-label binned metrics, N = {args.n:,}, C = {args.classes}, float32 probabilities",
        "",
        f"selfcal {selfcal.__version__}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, {platform.machine()}; median of {args.repeats} "
        "interleaved rounds.",
        f"Command: `python benchmarks/bench_metrics.py --n {args.n} --repeats {args.repeats}`",
        "",
        "| computation | time / torch.max pass | torchmetrics time / this |",
        "|---|---|---|",
    ]
    for name, r in ratio.items():
        peer = ""
        if name in ("selfcal ece", "selfcal ece (pre-validated Predictions)"):
            peer = f"{tm_ece / r:.2f}x"
        elif name == "selfcal mce":
            peer = f"{tm_mce / r:.2f}x"
        lines.append(f"| {name} | {r:.2f}x | {peer} |")
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
