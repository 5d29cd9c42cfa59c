"""Selective prediction (:mod:`selfcal.metrics.selective`): AURC as the expectation over
tie-breaking, accuracy at coverage, coverage at accuracy, the risk-coverage curve."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import selfcal.metrics as M
from selfcal import Predictions


def brute_force_aurc(conf, correct):
    """Average AURC over every tie-breaking order (small inputs only)."""
    order = np.argsort(-conf, kind="stable")
    groups = [list(g) for _, g in itertools.groupby(order, key=lambda i: conf[i])]
    totals = []
    for perms in itertools.product(*[itertools.permutations(g) for g in groups]):
        seq = [i for p in perms for i in p]
        errs = np.cumsum(1 - correct[seq])
        totals.append(np.mean(errs / np.arange(1, len(seq) + 1)))
    return np.mean(totals)


@settings(max_examples=80, deadline=None)
@given(
    arrays(np.float64, st.integers(1, 7), elements=st.sampled_from([0.4, 0.5, 0.7, 0.9, 1.0])),
    st.data(),
)
def test_aurc_is_expectation_over_tie_breaking(conf, data):
    correct = data.draw(arrays(np.float64, len(conf), elements=st.sampled_from([0.0, 1.0])))
    probs = np.stack([conf, 1 - conf], 1)
    probs[conf == 0.4] = np.stack([1 - conf, conf], 1)[conf == 0.4]
    pred = Predictions.from_probs(probs, labels=np.zeros(len(conf), int))
    labels = np.where(correct == 1, pred.predicted.numpy(), 1 - pred.predicted.numpy())
    pred = Predictions.from_probs(probs, labels=labels)
    assert M.aurc(pred) == pytest.approx(
        brute_force_aurc(pred.confidence.numpy(), correct), abs=1e-12
    )


def test_selective_accuracy_and_coverage():
    conf = np.array([0.99, 0.95, 0.9, 0.8, 0.7, 0.6])
    correct = np.array([1, 1, 1, 0, 1, 0])
    probs = np.stack([conf, 1 - conf], 1)
    labels = 1 - correct
    assert M.accuracy_at_coverage(probs=probs, labels=labels, coverage=0.5) == 1.0
    assert M.accuracy_at_coverage(probs=probs, labels=labels, coverage=5 / 6) == pytest.approx(0.8)
    assert M.coverage_at_accuracy(probs=probs, labels=labels, target=1.0) == pytest.approx(0.5)
    assert M.coverage_at_accuracy(probs=probs, labels=labels, target=0.8) == pytest.approx(5 / 6)
    curve = M.risk_coverage_curve(probs=probs, labels=labels)
    np.testing.assert_allclose(curve.coverage.numpy(), np.arange(1, 7) / 6)
    np.testing.assert_allclose(curve.risk.numpy()[-1], 2 / 6)
    with pytest.raises(ValueError, match="coverage"):
        M.accuracy_at_coverage(probs=probs, labels=labels, coverage=1.5)
