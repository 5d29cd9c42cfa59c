"""Time of one training epoch with every loss of :mod:`selfcal.losses`, relative to cross-entropy.

Setup (MNIST-1D-sized): 4,000 synthetic 40-dim inputs, 10 classes, batch 128, SGD (lr 0.1,
momentum 0.9, weight decay 5e-4), sum-reduced losses, gradient-norm clipping at 2 -- the
papers' protocol on a small problem. Two models: an MLP (40-256-256-10) and a small 1-D CNN
(3 conv layers of 32 channels, kernel 5, then a linear head). Reference: torch's
``nn.CrossEntropyLoss(reduction="sum")`` in the same run.

Each round restarts every loss from the same weights and interleaves the losses step by step
(batch ``i`` of every loss before batch ``i + 1`` of any), so load changes on a shared machine
hit all losses alike; the table gives the median over ``--repeats`` rounds (after a warm-up
round) of each loss's epoch time divided by the reference's in the same round, on
``--threads`` threads (default 1: steadier on a shared machine).

Every setting is timed twice: as is, and with denormal floats flushed to zero
(``torch.set_flush_denormal(True)``, "FTZ"). Losses whose weight vanishes fast on confident
samples (DFL above all: ``(1 - p_y + p_j)^5``) push many per-sample gradients below 1e-38;
x86 CPUs process such subnormal numbers many times slower, which slows the *model's*
backward, not the loss. GPUs have no such penalty.

[GRA] reports BSCE-GRA at 1.09x CE (ResNet-50, CIFAR-10, GPU), where the network dominates; on
these tiny CPU models the loss is a visible share of the step (cross-entropy alone is ~8% of
an MLP step), so the ratios here overstate the cost for real networks.

    python benchmarks/bench_losses.py                 # ~90 s
    python benchmarks/bench_losses.py --repeats 5 --models mlp
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from _timing import write_report
from torch import nn

import selfcal
from selfcal.losses import build_loss

LOSSES: dict[str, dict] = {
    "ce": {},
    "focal": {"gamma": 3.0},
    "focal-gra": {"gamma": 3.0},
    "flsd53": {},
    "flsd53-gra": {},
    "dfl": {},
    "dfl-gra": {},
    "bsce": {},
    "bsce-gra": {},
    "brier": {},
    "mmce": {},
    "ls": {"eps": 0.1},
}
REFERENCE = "torch nn.CrossEntropyLoss(sum)"


def make_model(kind: str, n_features: int, n_classes: int) -> nn.Module:
    if kind == "mlp":
        return nn.Sequential(
            nn.Linear(n_features, 256),
            nn.ReLU(),
            nn.Linear(256, 256),
            nn.ReLU(),
            nn.Linear(256, n_classes),
        )
    return nn.Sequential(
        nn.Unflatten(1, (1, n_features)),
        nn.Conv1d(1, 32, 5, padding=2),
        nn.ReLU(),
        nn.Conv1d(32, 32, 5, padding=2, stride=2),
        nn.ReLU(),
        nn.Conv1d(32, 32, 5, padding=2, stride=2),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(32 * ((n_features + 3) // 4), n_classes),
    )


class Trainer:
    """One model + loss; every round restarts from the same initial weights and a fresh
    optimizer, so all losses time the same epoch from the same state."""

    def __init__(self, model: nn.Module, loss_fn: Callable) -> None:
        self.model, self.loss_fn = model, loss_fn
        self.initial = {k: v.clone() for k, v in model.state_dict().items()}
        self.optimizer: torch.optim.Optimizer | None = None

    def reset(self) -> None:
        self.model.load_state_dict(self.initial)
        self.optimizer = torch.optim.SGD(
            self.model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4
        )

    def step(self, x: torch.Tensor, y: torch.Tensor) -> float:
        """One SGD step; returns its wall time in seconds."""
        start = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        self.loss_fn(self.model(x), y).backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 2.0)
        self.optimizer.step()
        return time.perf_counter() - start


def time_losses(
    kind: str, x: torch.Tensor, y: torch.Tensor, batch: int, repeats: int
) -> tuple[dict[str, float], float]:
    """Median over rounds of (epoch time of a loss) / (epoch time of the reference in the same
    round). The losses are interleaved step by step -- batch ``i`` of every loss runs before
    batch ``i + 1`` of any -- so a load change on a shared machine hits all of them alike."""
    n_classes = int(y.max()) + 1
    losses: dict[str, Callable] = {REFERENCE: nn.CrossEntropyLoss(reduction="sum")}
    losses.update({name: build_loss(name, **kw) for name, kw in LOSSES.items()})
    trainers = {}
    for name, loss_fn in losses.items():
        torch.manual_seed(0)
        trainers[name] = Trainer(make_model(kind, x.shape[1], n_classes), loss_fn)
    batches = list(torch.randperm(len(y), generator=torch.Generator().manual_seed(0)).split(batch))
    ratios: dict[str, list[float]] = {name: [] for name in trainers}
    reference_times = []
    for round_ in range(repeats + 1):
        for trainer in trainers.values():
            trainer.reset()
        epoch = dict.fromkeys(trainers, 0.0)
        for idx in batches:
            xb, yb = x[idx], y[idx]
            for name, trainer in trainers.items():
                epoch[name] += trainer.step(xb, yb)
        if round_ > 0:  # round 0 is the warm-up
            reference_times.append(epoch[REFERENCE])
            for name in trainers:
                ratios[name].append(epoch[name] / epoch[REFERENCE])
    medians = {name: statistics.median(r) for name, r in ratios.items()}
    return medians, statistics.median(reference_times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--features", type=int, default=40)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn"], choices=["mlp", "cnn"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "losses.md")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    gen = torch.Generator().manual_seed(0)
    centers = torch.randn(args.classes, args.features, generator=gen)
    y = torch.randint(0, args.classes, (args.n,), generator=gen)
    x = centers[y] + 2.0 * torch.randn(args.n, args.features, generator=gen)

    settings = [(kind, flush) for kind in args.models for flush in (False, True)]
    results = {}
    for kind, flush in settings:
        torch.set_flush_denormal(flush)
        results[kind, flush] = time_losses(kind, x, y, args.batch, args.repeats)
    torch.set_flush_denormal(False)
    columns = [f"{kind}{', FTZ' if flush else ''}" for kind, flush in settings]
    lines = [
        f"# One training epoch per loss, relative to cross-entropy (N = {args.n:,}, "
        f"{args.features} features, {args.classes} classes, batch {args.batch})",
        "",
        f"selfcal {selfcal.__version__}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s), {platform.machine()}; SGD + clipping, sum "
        f"reduction; median over {args.repeats} rounds (after one warm-up) of the per-round "
        "ratio, losses interleaved step by step. FTZ: `torch.set_flush_denormal(True)`.",
        f"Command: `python benchmarks/bench_losses.py --repeats {args.repeats} "
        f"--models {' '.join(args.models)} --threads {args.threads}`",
        "",
        "| loss | " + " | ".join(f"{c} epoch / CE" for c in columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for name in results[settings[0]][0]:
        ratios = [results[setting][0][name] for setting in settings]
        lines.append(f"| {name} | " + " | ".join(f"{r:.3f}x" for r in ratios) + " |")
    lines += [
        "",
        "Reference (CE) epoch: "
        + ", ".join(f"{c} {results[s][1] * 1e3:.1f} ms" for c, s in zip(columns, settings))
        + ".",
    ]
    text = "\n".join(lines) + "\n"
    write_report(text, args.out)


if __name__ == "__main__":
    main()
