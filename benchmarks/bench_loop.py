"""The training loop's own cost: ``selfcal.training.fit`` against a bare PyTorch loop doing the
same work, on the GPU where there is one (else the CPU).

Both train the same network from the same weights with SGD (lr 0.05, momentum 0.9) on mean
cross-entropy over the same shuffled minibatches; the bare loop sums its losses on the device
and reads the sum once an epoch -- the least a loop that reports its training loss can do.
``fit`` adds its data checks (once), the per-step loss bookkeeping and the epoch's finiteness
checks. A loop that reads the loss (``float(loss)``) or scans the labels (``aminmax``) at every
step makes the host wait for the device at every step, which a GPU notices.

Two networks: a CIFAR ResNet-18 on synthetic 3 x 32 x 32 images (batch 128), where the
network's work dominates, and a 2 x 256 MLP on 64 features (batch 256), where the loop's own
overhead shows. Each is timed ``--repeats`` times, ``fit`` and the bare loop alternating, after
a warm-up of each; the table gives the median epoch time and the median ratio.

    python benchmarks/bench_loop.py                   # ~1 min on a GPU
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from _timing import write_report
from torch import nn

from selfcal.models import build_model
from selfcal.training import TrainConfig, fit

RESULTS = Path(__file__).parent / "results" / "loop.md"
LR, MOMENTUM = 0.05, 0.9


def networks(
    device: torch.device,
) -> dict[str, tuple[Callable[[], nn.Module], torch.Tensor, torch.Tensor, int]]:
    g = torch.Generator().manual_seed(0)
    images = torch.randn(128 * 40, 3, 32, 32, generator=g)
    features = torch.randn(256 * 40, 64, generator=g)
    image_labels = torch.randint(0, 10, (len(images),), generator=g)
    feature_labels = torch.randint(0, 10, (len(features),), generator=g)
    return {
        "ResNet-18, batch 128": (
            lambda: build_model("resnet18", seed=0, n_classes=10),
            images.to(device),
            image_labels.to(device),
            128,
        ),
        "MLP 2 x 256, batch 256": (
            lambda: build_model("mlp", seed=0, n_features=64, n_classes=10, hidden=(256, 256)),
            features.to(device),
            feature_labels.to(device),
            256,
        ),
    }


def selfcal_epochs(
    make: Callable[[], nn.Module],
    x: torch.Tensor,
    y: torch.Tensor,
    batch: int,
    epochs: int,
    device: torch.device,
) -> float:
    model = make().to(device)
    config = TrainConfig(
        epochs=epochs, optimizer="sgd", lr=LR, momentum=MOMENTUM, batch_size=batch,
        device=str(device),
    )  # fmt: skip
    synchronize(device)
    start = time.perf_counter()
    fit(model, (x, y), config=config)
    synchronize(device)
    return (time.perf_counter() - start) / epochs


def bare_epochs(
    make: Callable[[], nn.Module],
    x: torch.Tensor,
    y: torch.Tensor,
    batch: int,
    epochs: int,
    device: torch.device,
) -> float:
    model = make().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    shuffle = torch.Generator().manual_seed(0)
    synchronize(device)
    start = time.perf_counter()
    model.train()
    for _ in range(epochs):
        total = torch.zeros((), device=device)
        for rows in torch.randperm(len(y), generator=shuffle).to(device).split(batch):
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x[rows]), y[rows])
            loss.backward()
            optimizer.step()
            total += loss.detach() * len(rows)
        float(total)  # the epoch's one read
    synchronize(device)
    return (time.perf_counter() - start) / epochs


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name() if device.type == "cuda" else "the CPU"
    lines = [
        "# The training loop's own cost",
        "",
        f"`python benchmarks/bench_loop.py --repeats {args.repeats} --epochs {args.epochs}` on "
        f"{name}, torch {torch.__version__}: median epoch time over {args.repeats} repeats "
        "(after a warm-up), `fit` and the bare loop alternating.",
        "",
        "| network | bare loop (ms / epoch) | `fit` (ms / epoch) | `fit` / bare |",
        "|---|---|---|---|",
    ]
    for label, (make, x, y, batch) in networks(device).items():
        bare_epochs(make, x, y, batch, 1, device)  # warm-up
        selfcal_epochs(make, x, y, batch, 1, device)
        bare, ours, ratios = [], [], []
        for _ in range(args.repeats):
            b = bare_epochs(make, x, y, batch, args.epochs, device)
            s = selfcal_epochs(make, x, y, batch, args.epochs, device)
            bare.append(b)
            ours.append(s)
            ratios.append(s / b)
        bare_ms, ours_ms = 1e3 * statistics.median(bare), 1e3 * statistics.median(ours)
        lines.append(
            f"| {label} | {bare_ms:.1f} | {ours_ms:.1f} | {statistics.median(ratios):.2f} |"
        )
    write_report("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
