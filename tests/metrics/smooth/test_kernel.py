"""SECE (and its soft accuracy) against the loop transcription of the methods spec; the grid
path against the exact path."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers.smooth import grad_inputs, random_logits, spec_soft_accuracy

from selfcal.metrics.smooth import sece, soft_accuracy
from selfcal.metrics.smooth.kernel import (
    SECE_EXACT_MAX_N,
    _sums_blocked,
    _sums_exact,
    sece_method,
)
from selfcal.predictions import Predictions


def spec_sece(p, y, h=0.01, t_a=100.0):
    z = p.max(1)
    pi = spec_soft_accuracy(p, y, t_a)
    total = 0.0
    for i in range(len(z)):
        num = den = 0.0
        for j in range(len(z)):
            k = math.exp(-((z[i] - z[j]) ** 2) / (2 * h * h))
            num += pi[j] * k
            den += k
        total += abs(num / den - z[i])
    return total / len(z)


def test_soft_accuracy_matches_spec_loop():
    rng = np.random.default_rng(0)
    z, y = random_logits(rng, 30, 5)
    p = torch.softmax(torch.from_numpy(z), 1)
    got = soft_accuracy(p, torch.from_numpy(y)).numpy()
    np.testing.assert_allclose(got, spec_soft_accuracy(p.numpy(), y, 100.0), rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_sece_matches_spec_loop(seed):
    rng = np.random.default_rng(seed)
    z, y = random_logits(rng, 25, [2, 4, 10, 3][seed])
    pred = Predictions.from_logits(z, y)
    got = float(sece.core(pred, bandwidth=0.05))
    assert got == pytest.approx(spec_sece(pred.probs.numpy(), y, h=0.05), abs=1e-12)
    got = float(sece.core(pred))
    assert got == pytest.approx(spec_sece(pred.probs.numpy(), y), abs=1e-12)


def test_sece_grid_path_agrees_with_exact_path():
    rng = np.random.default_rng(5)
    for c, scale in [(10, 3.0), (2, 1.0), (100, 6.0)]:
        z, y = random_logits(rng, 3000, c, scale)
        pred = Predictions.from_logits(z, y)
        exact = float(sece.core(pred, method="exact"))
        grid = float(sece.core(pred, method="grid"))
        assert abs(exact - grid) < 1e-5, (exact, grid)
        w = torch.from_numpy(rng.integers(0, 3, (3, 3000))).double()
        np.testing.assert_allclose(
            sece.core(pred, w, method="grid").numpy(),
            sece.core(pred, w, method="exact").numpy(),
            rtol=0,
            atol=1e-5,
        )


def test_sece_grid_path_gradients_finite():
    z, y = grad_inputs(n=3000, c=5, seed=4)
    value = sece.core(Predictions.from_logits(z, y), method="grid")
    (grad,) = torch.autograd.grad(value, z)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_method_choice():
    """Exact up to SECE_EXACT_MAX_N samples; above, exact for spread-out confidences (few
    pairs within 12 h) and the grid for many samples crowded near one value."""
    gen = torch.Generator().manual_seed(0)
    spread = torch.rand(20_000, generator=gen, dtype=torch.float64)
    crowded = 1 - 0.05 * torch.rand(20_000, generator=gen, dtype=torch.float64) ** 3
    assert sece_method(crowded[:SECE_EXACT_MAX_N]) == "exact"
    assert sece_method(spread[:5000]) == "exact"
    assert sece_method(crowded) == "grid"
    assert sece_method(spread[:10], method="grid") == "grid"
    assert sece_method(crowded, method="exact") == "exact"


def test_blocked_exact_path_equals_dense_kernel():
    """Above SECE_EXACT_MAX_N samples the exact path runs in blocks of sorted confidences
    against the band within 12 h; it equals the dense all-pairs sums to round-off, with
    bootstrap weights and gradients."""
    z, y = grad_inputs(n=SECE_EXACT_MAX_N + 700, c=5, seed=6)
    pred = Predictions.from_logits(z, y)
    w = torch.from_numpy(np.random.default_rng(1).integers(0, 3, (3, pred.n_samples))).double()
    conf, acc = pred.confidence, soft_accuracy(pred.probs, pred.labels)
    for mass in (torch.ones(1, pred.n_samples, dtype=torch.float64), w):
        blocked = _sums_blocked(conf, mass * acc, mass, 0.01)
        dense = _sums_exact(conf, mass * acc, mass, 0.01)
        for got, want in zip(blocked, dense):
            np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12)
    value = sece.core(pred, method="exact")
    (grad,) = torch.autograd.grad(value, z)
    (want,) = torch.autograd.grad(dense_sece(z, y), z)
    np.testing.assert_allclose(grad.numpy(), want.numpy(), rtol=1e-9, atol=1e-15)


def dense_sece(z, y):
    """SECE with the dense all-pairs kernel at any size (the definition, O(N^2) memory)."""
    pred = Predictions.from_logits(z, y)
    conf, acc = pred.confidence, soft_accuracy(pred.probs, pred.labels)
    one = torch.ones(1, pred.n_samples, dtype=torch.float64)
    num, den = _sums_exact(conf, one * acc, one, 0.01)
    return ((num / den)[0] - conf).abs().mean()


def test_invalid_options():
    z, y = np.zeros((4, 3)), np.zeros(4, dtype=int)
    with pytest.raises(ValueError):
        sece(logits=z, labels=y, bandwidth=0.0)
    with pytest.raises(ValueError):
        sece(logits=z, labels=y, method="fast")
