"""Shared fixtures and small data sets for the training-loop tests."""

from __future__ import annotations

import pytest
import torch
from torch import nn


@pytest.fixture(autouse=True)
def single_thread():
    """Tiny tensors: one intra-op thread is faster and avoids contention on shared CPUs."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


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


@pytest.fixture
def make_blobs():
    return blobs


@pytest.fixture
def make_xor():
    return xor_data


@pytest.fixture
def same_params():
    """``same_params(a, b)``: bit-identical parameters (modules or lists of tensors)."""
    return identical
