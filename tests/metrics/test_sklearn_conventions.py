"""How selfcal's binary numbers relate to scikit-learn's (the differences the Conventions page
of the documentation names): ``calibration_curve`` bins the positive-class probability as
selfcal's classwise bins of class 1 do, and drops empty bins; ``brier`` is the multi-class
Brier score, twice ``brier_score_loss`` on a binary problem."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from selfcal import Predictions
from selfcal.metrics import brier
from selfcal.metrics.binning import classwise_bins

pytestmark = pytest.mark.reference
sklearn_calibration = pytest.importorskip("sklearn.calibration")
sklearn_metrics = pytest.importorskip("sklearn.metrics")


def binary(n: int, seed: int, on_edges: bool = False) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if on_edges:  # exactly on some of the 15-bin edges m / 15; most bins stay empty
        p = rng.choice(np.array([0, 2, 5, 9, 14, 15]) / 15, n)
    else:
        p = rng.uniform(size=n)
    return p, (rng.uniform(size=n) < p).astype(int)


@pytest.mark.parametrize("on_edges", [False, True], ids=["continuous", "on-15-bin-edges"])
def test_calibration_curve_is_class_one_of_the_classwise_bins(on_edges):
    p, y = binary(2000, seed=3, on_edges=on_edges)
    prob_true, prob_pred = sklearn_calibration.calibration_curve(y, p, n_bins=15)
    pred = Predictions.from_probs(torch.from_numpy(np.stack([1 - p, p], 1)), torch.from_numpy(y))
    stats = classwise_bins(pred, n_bins=15)
    count = stats.count[1].numpy()
    kept = count > 0  # scikit-learn drops the empty bins
    assert (~kept).any() == on_edges  # the edge case has empty bins; both must agree on them
    np.testing.assert_allclose(stats.accuracy_sum[1].numpy()[kept] / count[kept], prob_true)
    np.testing.assert_allclose(stats.confidence_sum[1].numpy()[kept] / count[kept], prob_pred)


def test_brier_is_twice_scikit_learns_on_a_binary_problem():
    p, y = binary(500, seed=4)
    ours = brier(probs=np.stack([1 - p, p], 1), labels=y)
    theirs = sklearn_metrics.brier_score_loss(y, p)
    assert ours == pytest.approx(2 * theirs, rel=1e-12)
    assert ours != pytest.approx(theirs, rel=1e-3)
