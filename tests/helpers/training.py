"""Small data sets and parameter comparisons for the training-loop tests."""

from __future__ import annotations

import torch
from torch import nn

from selfcal.training import TrainConfig


def xor_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """XOR of the quadrant signs with a margin of 0.1 around both axes (separable)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 2, generator=g) * 2 - 1
    x = x + 0.1 * torch.sign(x)
    return x, (x[:, 0] * x[:, 1] > 0).long()


def blobs(n: int, seed: int, classes: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian blobs with unit variance around well-separated centres."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    centres = 3.0 * torch.randn(classes, 2, generator=g)
    return centres[y] + torch.randn(n, 2, generator=g), y


def parameters(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def identical(a: nn.Module | list, b: nn.Module | list) -> bool:
    a = parameters(a) if isinstance(a, nn.Module) else a
    b = parameters(b) if isinstance(b, nn.Module) else b
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def papers_recipe(epochs: int, **options: object) -> TrainConfig:
    """The papers' SGD recipe (lr 0.1, momentum 0.9, weight decay 5e-4, batch 128, clipping at
    2) for ``epochs`` epochs, with ``options`` on top (``seed=...``, ``milestones=...``)."""
    recipe: dict[str, object] = {
        "optimizer": "sgd",
        "lr": 0.1,
        "momentum": 0.9,
        "weight_decay": 5e-4,
        "batch_size": 128,
        "grad_clip": 2.0,
    }
    return TrainConfig(epochs=epochs, **{**recipe, **options})
