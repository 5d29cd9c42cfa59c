"""What every smooth metric promises (:mod:`selfcal.metrics.smooth`): range, permutation
invariance, numpy/torch results, bootstrap weights equal to repeated rows, gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.smooth import grad_inputs, random_logits

from selfcal.metrics.smooth import dece, kde_ece, sece, smooth_ece
from selfcal.predictions import Predictions

METRICS = [sece, dece, kde_ece, smooth_ece]


def test_every_smooth_metric_is_differentiable_and_declares_its_bins():
    assert all(f.differentiable and not f.higher_is_better for f in METRICS)
    assert [f.takes_bins for f in METRICS] == [False, True, False, False]


@pytest.mark.parametrize("f", METRICS, ids=lambda f: f.__name__)
def test_properties_range_permutation_numpy_torch(f):
    rng = np.random.default_rng(7)
    for c in (2, 10):
        z, y = random_logits(rng, 500, c)
        value = f(logits=z, labels=y)
        assert isinstance(value, float) and 0.0 <= value <= 1.0
        perm = rng.permutation(500)
        assert f(logits=z[perm], labels=y[perm]) == pytest.approx(value, abs=1e-9)
        torch_value = f(logits=torch.from_numpy(z), labels=torch.from_numpy(y))
        assert isinstance(torch_value, torch.Tensor) and torch_value.dtype == torch.float64
        assert float(torch_value) == pytest.approx(value, abs=1e-12)


@pytest.mark.parametrize("f", METRICS, ids=lambda f: f.__name__)
def test_bootstrap_weights_equal_repeated_rows(f):
    rng = np.random.default_rng(8)
    z, y = random_logits(rng, 120, 6)
    pred = Predictions.from_logits(z, y)
    weights = torch.from_numpy(rng.integers(0, 4, (4, 120))).double()
    batched = f.core(pred, weights)
    assert batched.shape == (4,)
    for b in range(4):
        rows = torch.repeat_interleave(torch.arange(120), weights[b].long())
        direct = f.core(pred.subset(rows))
        assert float(batched[b]) == pytest.approx(float(direct), abs=1e-9)


@pytest.mark.parametrize("f", [sece, dece], ids=lambda f: f.__name__)
def test_gradcheck(f):
    z, y = grad_inputs()
    opts = {"bandwidth": 0.1} if f is sece else {}
    assert torch.autograd.gradcheck(
        lambda s: f.core(Predictions.from_logits(s, y), **opts), (z,), atol=1e-6
    )


@pytest.mark.parametrize("f", METRICS, ids=lambda f: f.__name__)
def test_gradients_finite(f):
    z, y = grad_inputs(n=300, c=5, seed=3)
    value = f.core(Predictions.from_logits(z, y))
    (grad,) = torch.autograd.grad(value, z)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0
