"""Property tests (hypothesis) of every metric: range, permutation and row-order invariance,
and the shrinking ECE of calibrated samples."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.metrics import LOGITS_LIKE_PROBABILITIES, problems
from hypothesis import given, settings

import selfcal.metrics as M
from selfcal import Predictions

BINNED = [M.ece, M.mce, M.adaece, M.classwise_ece]


@pytest.mark.filterwarnings(LOGITS_LIKE_PROBABILITIES)
@settings(max_examples=150, deadline=None)
@given(problems())
def test_metrics_in_bounds_and_permutation_invariant(problem):
    z, y = problem
    perm = np.random.default_rng(0).permutation(len(y))
    for f in BINNED + [M.accuracy, M.aurc, M.accuracy_at_coverage, M.coverage_at_accuracy]:
        v = f(logits=z, labels=y)
        assert -1e-12 <= v <= 1 + 1e-12, f.__name__
        assert f(logits=z[perm], labels=y[perm]) == pytest.approx(v, abs=1e-12), f.__name__
    assert 0 <= M.brier(logits=z, labels=y) <= 2 + 1e-12
    assert M.nll(logits=z, labels=y) >= 0
    assert M.mce(logits=z, labels=y) >= M.ece(logits=z, labels=y) - 1e-12


@pytest.mark.parametrize("n", [1_000, 10_000, 100_000])
def test_perfectly_calibrated_sample_has_vanishing_ece(n):
    """Labels drawn from the predicted distribution: ECE shrinks like 1/sqrt(N)."""
    gen = torch.Generator().manual_seed(n)
    z = torch.randn(n, 5, generator=gen, dtype=torch.float64) * 2
    y = torch.multinomial(torch.softmax(z, 1), 1, generator=gen).squeeze(1)
    assert float(M.ece(logits=z, labels=y)) < 2.5 / np.sqrt(n) * np.sqrt(15)
    assert float(M.classwise_ece(logits=z, labels=y)) < 1.5 / np.sqrt(n) * np.sqrt(15)


def test_ece_decreases_with_n_on_calibrated_data():
    values = []
    for n in (500, 5_000, 50_000):
        gen = torch.Generator().manual_seed(1)
        z = torch.randn(n, 3, generator=gen, dtype=torch.float64)
        y = torch.multinomial(torch.softmax(z, 1), 1, generator=gen).squeeze(1)
        values.append(float(M.ece(logits=z, labels=y)))
    assert values[0] > values[1] > values[2]


def test_confidence_from_logits_does_not_depend_on_the_row_order():
    """The case hypothesis found: two rows whose max-softmax differs in the last bit only (the
    maximum sits in another column). Each row's confidence must not depend on its position in
    the batch, or reordering the rows turns them into a tie (AURC) or moves an equal-mass
    edge (AdaECE)."""
    z = np.full((37, 6), -2.0)
    z[0, 0], z[-1, 1] = 0.0, 0.0
    y = np.zeros(37, dtype=int)
    perm = np.random.default_rng(0).permutation(37)
    conf = Predictions.from_logits(z, y).confidence.numpy()
    np.testing.assert_array_equal(
        Predictions.from_logits(z[perm], y[perm]).confidence.numpy(), conf[perm]
    )
    for f in (M.aurc, M.adaece, M.accuracy_at_coverage, M.coverage_at_accuracy):
        assert f(logits=z[perm], labels=y[perm]) == f(logits=z, labels=y), f.__name__
