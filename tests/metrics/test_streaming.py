"""The streaming accumulator equals the one-shot metrics (:mod:`selfcal.metrics.streaming`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.metrics import LOGITS_LIKE_PROBABILITIES, problems
from hypothesis import given, settings
from hypothesis import strategies as st

import selfcal.metrics as M
from selfcal import Predictions
from selfcal.metrics.binning import top_label_bins
from selfcal.metrics.streaming import CalibrationAccumulator


@pytest.mark.filterwarnings(LOGITS_LIKE_PROBABILITIES)
@settings(max_examples=60, deadline=None)
@given(problems(), st.integers(1, 7))
def test_streaming_equals_one_shot(problem, n_batches):
    z, y = problem
    acc = CalibrationAccumulator(n_bins=10, keep_confidences=True)
    for part in np.array_split(np.arange(len(y)), n_batches):
        if len(part):
            acc.update(logits=z[part], labels=y[part])
    got = acc.compute()
    pred = Predictions.from_logits(z, y)
    expected = {
        "accuracy": M.accuracy(pred),
        "nll": M.nll(pred),
        "brier": M.brier(pred),
        "ece": M.ece(pred, n_bins=10),
        "rmsce": M.ece(pred, n_bins=10, norm="l2"),
        "mce": M.mce(pred, n_bins=10),
        "classwise_ece": M.classwise_ece(pred, n_bins=10),
        "adaece": M.adaece(pred, n_bins=10),
        "aurc": M.aurc(pred),
    }
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=1e-12, rel=1e-12), key
    assert torch.equal(acc.bin_stats.count, top_label_bins(pred, 10).count)


def test_streaming_rejects_inconsistent_classes():
    acc = CalibrationAccumulator()
    acc.update(logits=np.zeros((3, 4)), labels=[0, 1, 2])
    with pytest.raises(ValueError, match="5 classes"):
        acc.update(logits=np.zeros((3, 5)), labels=[0, 1, 2])
