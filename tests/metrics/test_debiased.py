"""Debiased top-label L2 calibration error vs uncertainty-calibration."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from selfcal.metrics.debiased import debiased_ece
from selfcal.predictions import Predictions


def random_probs(rng, n, c, discrete=False):
    z = rng.normal(size=(n, c)) * rng.uniform(0.5, 4.0)
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    if discrete:
        p = np.round(p, 1) + 1e-3
        p /= p.sum(1, keepdims=True)
    return p, rng.integers(0, c, n)


@pytest.mark.reference
def test_matches_uncertainty_calibration_on_random_cases():
    cal = pytest.importorskip("calibration")
    rng = np.random.default_rng(0)
    for k in range(60):
        n, c = int(rng.integers(3, 400)), int(rng.integers(2, 12))
        p, y = random_probs(rng, n, c, discrete=k % 4 == 0)
        want = cal.get_calibration_error(p, y, p=2, debias=True, mode="top-label")
        assert debiased_ece(probs=p, labels=y, binning="auto") == pytest.approx(want, abs=1e-6)
        n_bins = int(rng.integers(1, 30))
        want = cal.lower_bound_scaling_ce(p, y, p=2, debias=True, num_bins=n_bins, mode="top-label")
        got = debiased_ece(probs=p, labels=y, n_bins=n_bins)
        assert got == pytest.approx(want, abs=1e-6)
        want = cal.get_binning_ce(p, y, p=2, debias=True, mode="top-label")
        assert debiased_ece(probs=p, labels=y, binning="discrete") == pytest.approx(want, abs=1e-6)


@pytest.mark.reference
def test_squared_is_their_unclamped_unbiased_square():
    pytest.importorskip("calibration")
    from calibration.utils import bin as cal_bin
    from calibration.utils import get_equal_bins, unbiased_square_ce

    rng = np.random.default_rng(1)
    for _ in range(10):
        p, y = random_probs(rng, 200, 4)
        pred = Predictions.from_probs(p, y)
        conf, correct = pred.confidence.numpy(), pred.correct.numpy()
        data = list(zip(conf, correct))
        want = unbiased_square_ce(cal_bin(data, get_equal_bins(conf, num_bins=15)))
        assert debiased_ece(pred, squared=True) == pytest.approx(want, abs=1e-12)


def test_perfect_plugin_calibration_gives_negative_squared_estimate_and_zero_error():
    probs = np.tile([0.75, 0.25], (8, 1))
    labels = np.array([0, 0, 0, 0, 0, 0, 1, 1])  # accuracy 0.75 = confidence
    sq = debiased_ece(probs=probs, labels=labels, n_bins=1, squared=True)
    assert sq == pytest.approx(-0.75 * 0.25 / 7, abs=1e-15)
    assert debiased_ece(probs=probs, labels=labels, n_bins=1) == 0.0


def test_bootstrap_weights_equal_repeated_rows():
    rng = np.random.default_rng(3)
    p, y = random_probs(rng, 100, 5)
    pred = Predictions.from_probs(p, y)
    weights = torch.from_numpy(rng.integers(0, 3, (5, 100))).double()
    weights[4] = 0
    weights[4, :7] = 1  # a resample smaller than n_bins
    batched = debiased_ece.core(pred, weights)
    for b in range(5):
        rows = torch.repeat_interleave(torch.arange(100), weights[b].long())
        assert float(batched[b]) == pytest.approx(
            float(debiased_ece.core(pred.subset(rows))), abs=1e-12
        )


def test_numpy_torch_and_permutation():
    rng = np.random.default_rng(4)
    p, y = random_probs(rng, 300, 6)
    value = debiased_ece(probs=p, labels=y)
    t = debiased_ece(probs=torch.from_numpy(p), labels=torch.from_numpy(y))
    assert float(t) == pytest.approx(value, abs=1e-15) and 0 <= value <= 1
    perm = rng.permutation(300)
    assert debiased_ece(probs=p[perm], labels=y[perm]) == pytest.approx(value, abs=1e-15)


def test_rejects_unknown_binning():
    with pytest.raises(ValueError, match="binning"):
        debiased_ece(probs=np.full((4, 2), 0.5), labels=[0, 1, 0, 1], binning="width")
