"""KDE-ECE against a numpy/scipy transcription of Zhang et al.'s procedure."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.signal
import torch
from helpers.smooth import random_logits

from selfcal.metrics.smooth import kde_ece
from selfcal.predictions import Predictions


def zhang_kde_ece(p, y, order=1):
    """numpy/scipy transcription of Zhang et al.'s ``ece_kde_binary`` (top-label) with
    KDEpy FFTKDE's evaluation (linear binning + convolution, unit-variance triweight)."""
    conf, correct = p.max(1), (p.argmax(1) == y).astype(float)
    x_int = np.linspace(-0.6, 1.6, num=2**14)
    n = len(conf)
    bw = np.std(conf[correct == 1]) * (n * 2) ** -0.2

    def mirror(d):
        return np.concatenate([-d[d < 0.5], d, 2 - d[d >= 0.5]])

    def fftkde(data):
        dx = (x_int.max() - x_int.min()) / (len(x_int) - 1)
        binned = np.zeros(len(x_int))
        for v in data:
            t = (v - x_int[0]) / dx
            k = int(np.floor(t))
            binned[k] += (1 - (t - k)) / len(data)
            binned[k + 1] += (t - k) / len(data)
        half = int(np.floor(3 * bw / dx))
        u = np.linspace(-dx * half, dx * half, 2 * half + 1) / (3 * bw)
        kern = np.where(u**2 < 1, (1 - u**2) ** 3, 0.0) * 35 / 32 / (3 * bw)
        dens = scipy.signal.convolve(binned, kern, mode="same")
        dens[x_int <= 0] = 0
        dens[x_int >= 1] = 0
        return dens * 2

    pp1, pp2 = fftkde(mirror(conf[correct == 1])), fftkde(mirror(conf))
    perc = correct.mean()
    integral = np.zeros(len(x_int))
    for i, x in enumerate(x_int):
        if max(pp1[i], pp2[i]) > 1e-6:
            accu = min(perc * pp1[i] / pp2[i], 1.0) if pp2[i] > 0 else 1.0
            integral[i] = abs(x - accu) ** order * pp2[i]
        elif i > 1:
            integral[i] = integral[i - 1]
    ind = (x_int >= 0) & (x_int <= 1)
    return np.trapezoid(integral[ind], x_int[ind]) / np.trapezoid(pp2[ind], x_int[ind])


@pytest.mark.reference
@pytest.mark.parametrize("seed", range(3))
def test_kde_ece_matches_zhang_procedure(seed):
    rng = np.random.default_rng(10 + seed)
    z, y = random_logits(rng, [400, 150, 800][seed], [10, 2, 5][seed])
    pred = Predictions.from_logits(z, y)
    want = zhang_kde_ece(pred.probs.numpy(), y)
    assert float(kde_ece.core(pred)) == pytest.approx(want, abs=1e-9)


def test_kde_ece_needs_a_bandwidth_without_correct_predictions():
    z = np.array([[2.0, 0.0], [3.0, 0.0], [1.0, 0.0]])
    with pytest.raises(ValueError, match="bandwidth"):
        kde_ece(logits=z, labels=[1, 1, 1])
    assert 0 <= kde_ece(logits=z, labels=[1, 1, 1], bandwidth=0.05) <= 1


def test_rejects_a_nonpositive_bandwidth():
    z, y = np.array([[2.0, 0.0], [3.0, 0.0], [1.0, 0.0]]), [0, 0, 1]
    for bad in (0.0, -0.1):
        with pytest.raises(ValueError, match="bandwidth"):
            kde_ece(logits=z, labels=y, bandwidth=bad)


def test_a_bandwidth_below_the_grid_step_is_refused_where_the_reference_exceeds_one():
    """Where our convention differs: confidences ``0.7 + 1e-6 randn`` give a default bandwidth
    far below the grid step; Zhang et al.'s procedure then returns a value above 1 (its carried
    integrand), selfcal refuses with the cause."""
    rng = np.random.default_rng(3)
    c = 0.7 + 1e-6 * rng.standard_normal(100)
    probs = np.stack([1 - c, c], axis=1)
    y = (rng.random(100) < 0.7).astype(int)
    assert zhang_kde_ece(probs, y) > 1
    with pytest.raises(ValueError, match="below the estimator's grid step"):
        kde_ece(probs=probs, labels=y)
    with pytest.raises(ValueError, match="bandwidth=1e-05 is below"):
        kde_ece(probs=probs, labels=y, bandwidth=1e-5)
    assert 0 <= kde_ece(probs=probs, labels=y, bandwidth=0.05) <= 1


def test_a_bandwidth_of_a_few_grid_steps_is_refused_where_the_reference_exceeds_one():
    """Above the grid step, but by 1.3 steps (a hypothesis case of ``test_never_silent``: seven
    correct confidences within 1.2e-3 of 1): the density falls to zero within a step, the
    reference's carried integrand gives 1.36, selfcal refuses (and a resample gets NaN)."""
    k = np.linspace(4.6, 15, 27)
    c = np.array([0.8536, 0.9878, 0.9946, 0.9953, 0.9976, 0.99878, 0.99881, 0.99978, 0.99993])
    c = np.concatenate([c, 1 - 10.0**-k])
    correct = np.isin(np.arange(36), [6, 23, 25, 27, 30, 32, 33])
    probs, y = np.stack([c, 1 - c], axis=1), np.where(correct, 0, 1)
    assert zhang_kde_ece(probs, y) > 1
    with pytest.raises(ValueError, match=r"above its bound 1: the bandwidth .* spans 1\.3 grid"):
        kde_ece(probs=probs, labels=y)
    assert 0 <= kde_ece(probs=probs, labels=y, bandwidth=0.05) <= 1
    weights = torch.ones(2, 36, dtype=torch.float64)
    assert torch.isnan(kde_ece.core(Predictions.from_probs(probs, y), weights)).all()
