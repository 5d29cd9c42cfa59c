from __future__ import annotations

import numpy as np
import pytest
from helpers.posthoc import make_logits, softmax
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from selfcal.metrics.binning import bin_index, uniform_edges
from selfcal.posthoc import HistogramBinning, IsotonicCalibration, OneVsRestIsotonic


@pytest.mark.reference
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_top_label_isotonic_equals_sklearn(seed):
    from sklearn.isotonic import IsotonicRegression

    z, y = make_logits(seed, 300, 3)
    zt, _ = make_logits(seed + 10, 500, 3, scale=4.0)
    p, pt = softmax(z), softmax(zt)
    iso = IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1)
    iso.fit(p.max(1), (p.argmax(1) == y).astype(float))
    cal = IsotonicCalibration(mix=0).fit(probs=p, labels=y)  # sklearn's map is un-mixed
    np.testing.assert_allclose(cal.predict_confidence(probs=pt), iso.predict(pt.max(1)), atol=1e-9)
    q = cal.predict_proba(probs=pt)
    np.testing.assert_allclose(q[np.arange(500), pt.argmax(1)], iso.predict(pt.max(1)), atol=1e-9)


def test_isotonic_proba_spreads_rest_proportionally():
    """The un-mixed map (``mix=0``) puts ``f(c)`` on the predicted class and spreads the rest
    in proportion to the other probabilities."""
    z, y = make_logits(3, 200, 4)
    p = softmax(z)
    cal = IsotonicCalibration(mix=0).fit(probs=p, labels=y)
    q = cal.predict_proba(probs=p)
    k = p.argmax(1)
    mask = np.ones_like(p, dtype=bool)
    mask[np.arange(len(k)), k] = False
    ratio = q[mask].reshape(-1, 3) / p[mask].reshape(-1, 3)
    np.testing.assert_allclose(ratio, ratio[:, :1].repeat(3, 1), rtol=1e-9)
    changed = q.argmax(1) != k
    conf = q[np.arange(len(k)), k]
    runner_up = np.where(mask, q, -1).max(1)
    np.testing.assert_array_equal(changed, conf < runner_up)


def test_isotonic_one_hot_row_spreads_uniformly():
    p = np.array([[1.0, 0.0, 0.0], [0.2, 0.5, 0.3], [0.1, 0.1, 0.8]])
    cal = IsotonicCalibration().fit(probs=p, labels=np.array([1, 1, 2]))
    q = cal.predict_proba(probs=p)
    assert q[0, 1] == q[0, 2] == pytest.approx((1 - q[0, 0]) / 2)


@pytest.mark.reference
@pytest.mark.parametrize(("seed", "c"), [(0, 3), (1, 5), (2, 2)])
def test_one_vs_rest_equals_calibrated_classifier_cv(seed, c):
    from sklearn.base import BaseEstimator, ClassifierMixin
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.frozen import FrozenEstimator

    class Fixed(ClassifierMixin, BaseEstimator):
        def fit(self, x, y):
            self.classes_ = np.arange(c)
            return self

        def predict_proba(self, x):
            return x

        def predict(self, x):
            return x.argmax(1)

    z, y = make_logits(seed, 400, c)
    zt, _ = make_logits(seed + 7, 300, c, scale=4.0)
    p, pt = softmax(z), softmax(zt)
    ref = CalibratedClassifierCV(FrozenEstimator(Fixed().fit(p, y)), method="isotonic").fit(p, y)
    ours = OneVsRestIsotonic(mix=0).fit(probs=p, labels=y)  # sklearn's maps are un-mixed
    np.testing.assert_allclose(ours.predict_proba(probs=pt), ref.predict_proba(pt), atol=1e-9)


def test_histogram_binning_matches_direct_computation():
    z, y = make_logits(5, 500, 3)
    p = softmax(z)
    zt, _ = make_logits(6, 200, 3)
    pt = softmax(zt)
    cal = HistogramBinning(n_bins=10, mix=0).fit(probs=p, labels=y)  # the formula, un-mixed
    edges = np.linspace(0, 1, 11)
    theta = np.empty((3, 10))
    for j in range(3):
        idx = np.clip(np.searchsorted(edges[1:-1], p[:, j], side="left"), 0, 9)
        for m in range(10):
            sel = idx == m
            theta[j, m] = (y[sel] == j).mean() if sel.any() else (edges[m] + edges[m + 1]) / 2
    np.testing.assert_allclose(cal.bin_values_, theta, atol=1e-15)
    idx = np.clip(np.searchsorted(edges[1:-1], pt, side="left"), 0, 9)
    raw = theta[np.arange(3)[None, :], idx]
    expected = raw / raw.sum(1, keepdims=True)
    np.testing.assert_allclose(cal.predict_proba(probs=pt), expected, atol=1e-12)
    # the bins are selfcal's binning core
    import torch

    core = bin_index(torch.from_numpy(np.ascontiguousarray(pt[:, 0])), uniform_edges(10))
    np.testing.assert_array_equal(core.numpy(), idx[:, 0])


def test_histogram_rejects_bad_n_bins():
    z, y = make_logits(0, 20, 3)
    with pytest.raises(ValueError, match="n_bins"):
        HistogramBinning(n_bins=0).fit(logits=z, labels=y)


# ------------------------------------------------------------------------ properties
@pytest.mark.filterwarnings("ignore::selfcal.exceptions.DegenerateCalibration")  # tiny draws
@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 6), st.integers(5, 80))
def test_isotonic_map_monotone_and_outputs_valid(seed, c, n):
    z, y = make_logits(seed, n, c)
    assume(len(np.unique(y)) >= 2)  # labels of one class are a ValueError
    p = softmax(z)
    cal = IsotonicCalibration().fit(probs=p, labels=y)
    grid = np.linspace(1 / c, 1, 301)
    f = cal._map(__import__("torch").from_numpy(grid)).numpy()
    assert np.all(np.diff(f) >= 0) and np.all((f >= 0) & (f <= 1))
    others = (OneVsRestIsotonic().fit(probs=p, labels=y), HistogramBinning().fit(probs=p, labels=y))
    for est in (cal, *others):
        q = est.predict_proba(probs=p)
        assert np.all((q >= 0) & (q <= 1))
        np.testing.assert_allclose(q.sum(1), 1, atol=1e-12)
    np.testing.assert_array_equal(cal.predict_confidence(probs=p).shape, (n,))


@pytest.mark.parametrize("cls", [IsotonicCalibration, OneVsRestIsotonic])
def test_without_scikit_learn_the_error_names_the_extra(cls, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "sklearn.isotonic", None)  # its import now fails
    z, y = make_logits(0, 200, 3)
    with pytest.raises(ImportError, match=r"needs scikit-learn: pip install 'selfcal\[full\]'"):
        cls(kind="logits").fit(z, y)
