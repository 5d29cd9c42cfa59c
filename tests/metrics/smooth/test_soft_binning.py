"""DECE (and its soft bin membership) against the loop transcription of the methods spec."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers.smooth import random_logits, spec_soft_accuracy

from selfcal.metrics.smooth import dece, soft_bin_membership
from selfcal.predictions import Predictions


def spec_dece(p, y, m_bins=15, t_a=100.0, t_b=0.01, eps=1e-6):
    c = p.max(1)
    a = spec_soft_accuracy(p, y, t_a)
    n = len(c)
    cum, b = 0.0, []
    for m in range(m_bins):  # b = cumsum(-[0, 1/M, ..., (M-1)/M])
        cum -= m / m_bins
        b.append(cum)
    o = np.zeros((n, m_bins))
    for i in range(n):
        logits = [((m + 1) * c[i] + b[m]) / t_b for m in range(m_bins)]
        top = max(logits)
        e = [math.exp(v - top) for v in logits]
        for m in range(m_bins):
            o[i, m] = (e[m] / sum(e) + eps) / (1 + (m_bins + 1) * eps)
    total = 0.0
    for m in range(m_bins):
        mass = sum(o[i, m] for i in range(n))
        conf = sum(o[i, m] * c[i] for i in range(n)) / mass
        acc = sum(o[i, m] * a[i] for i in range(n)) / mass
        total += mass / n * abs(acc - conf)
    return total


def test_soft_bin_membership_rows_and_boundaries():
    c = torch.tensor([0.05, 0.5, 0.99], dtype=torch.float64)
    o = soft_bin_membership(c, 15, 0.01)
    m, eps = 15, 1e-6
    expected_row_sum = (1 + m * eps) / (1 + (m + 1) * eps)  # the documented quirk
    np.testing.assert_allclose(o.sum(1).numpy(), expected_row_sum, rtol=0, atol=1e-12)
    assert o.argmax(1).tolist() == [0, 7, 14]


@pytest.mark.parametrize("seed", range(4))
def test_dece_matches_spec_loop(seed):
    rng = np.random.default_rng(seed)
    z, y = random_logits(rng, 25, [2, 4, 10, 3][seed])
    pred = Predictions.from_logits(z, y)
    assert float(dece.core(pred)) == pytest.approx(spec_dece(pred.probs.numpy(), y), abs=1e-12)
    got = float(dece.core(pred, n_bins=7, t_a=20.0, t_b=0.05))
    want = spec_dece(pred.probs.numpy(), y, 7, 20.0, 0.05)
    assert got == pytest.approx(want, abs=1e-12)


def test_invalid_options():
    z, y = np.zeros((4, 3)), np.zeros(4, dtype=int)
    with pytest.raises(ValueError):
        dece(logits=z, labels=y, n_bins=0)
