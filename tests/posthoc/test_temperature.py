from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from posthoc_helpers import make_logits, softmax

from selfcal.posthoc import TemperatureScaling
from selfcal.posthoc.temperature import grid_temperatures

CASES = [(seed, n, c) for seed, (n, c) in enumerate(
    [(50, 2), (80, 3), (120, 10), (300, 4), (500, 7)] * 5)]


def mean_nll(z: np.ndarray, y: np.ndarray, beta: float) -> float:
    a = beta * z
    m = a.max(1, keepdims=True)
    lse = np.log(np.exp(a - m).sum(1)) + m[:, 0]
    return float(np.mean(lse - a[np.arange(len(y)), y]))


def brute_force_temperature(z: np.ndarray, y: np.ndarray) -> float:
    """Dense grid over log(beta) in [-10, 10], then golden-section refinement in float64."""
    grid = np.linspace(-10, 10, 401)  # NLL is convex in beta: unimodal
    values = [mean_nll(z, y, math.exp(u)) for u in grid]
    k = int(np.argmin(values))
    a, b = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    ratio = (math.sqrt(5) - 1) / 2
    while b - a > 1e-12:
        c, d = b - ratio * (b - a), a + ratio * (b - a)
        if mean_nll(z, y, math.exp(c)) < mean_nll(z, y, math.exp(d)):
            b = d
        else:
            a = c
    return math.exp(-(a + b) / 2)


@pytest.mark.parametrize(("seed", "n", "c"), CASES)
def test_nll_matches_brute_force(seed, n, c):
    rng = np.random.default_rng(1000 + seed)
    scale, margin = float(rng.uniform(0.3, 5)), float(rng.uniform(0, 3))
    z, y = make_logits(seed, n, c, scale=scale, margin=margin)
    t = TemperatureScaling().fit(logits=z, labels=y).temperature_
    assert t == pytest.approx(brute_force_temperature(z, y), rel=1e-6)


@pytest.mark.reference
@pytest.mark.parametrize(("seed", "n", "c"), CASES)
def test_nll_matches_sklearn_temperature(seed, n, c):
    from sklearn.calibration import _TemperatureScaling

    rng = np.random.default_rng(2000 + seed)
    scale, margin = float(rng.uniform(0.3, 5)), float(rng.uniform(0, 3))
    z, y = make_logits(seed, n, c, scale=scale, margin=margin)
    t = TemperatureScaling().fit(logits=z, labels=y).temperature_
    ref = _TemperatureScaling().fit(z, y)
    assert t == pytest.approx(1.0 / float(ref.beta_), rel=1e-4)
    np.testing.assert_allclose(
        TemperatureScaling().fit(logits=z, labels=y).predict_proba(logits=z), ref.predict(z),
        atol=1e-6,
    )


@pytest.mark.reference
def test_matches_calibrated_classifier_cv_temperature():
    from sklearn.base import BaseEstimator, ClassifierMixin
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.frozen import FrozenEstimator

    class Fixed(ClassifierMixin, BaseEstimator):
        def fit(self, x, y):
            self.classes_ = np.unique(y)
            return self

        def decision_function(self, x):
            return x

        def predict(self, x):
            return x.argmax(1)

    z, y = make_logits(7, 600, 6)
    cal = CalibratedClassifierCV(FrozenEstimator(Fixed().fit(z, y)), method="temperature")
    cal.fit(z, y)
    ours = TemperatureScaling().fit(logits=z, labels=y)
    np.testing.assert_allclose(ours.predict_proba(logits=z), cal.predict_proba(z), atol=1e-6)


def test_minimum_outside_bounds_goes_to_bound():
    # every sample correct with a margin: NLL decreases for ever as T -> 0
    z = np.array([[5.0, 0.0], [0.0, 5.0], [4.0, 1.0]])
    y = np.array([0, 1, 0])
    t = TemperatureScaling().fit(logits=z, labels=y).temperature_
    assert t == pytest.approx(math.exp(-10), rel=1e-8)


def test_constant_logits_keep_unit_temperature():
    z = np.zeros((10, 3))
    assert TemperatureScaling().fit(logits=z, labels=np.arange(10) % 3).temperature_ == 1.0


def test_large_input_uses_warm_start_and_matches_brute_force():
    z, y = make_logits(3, 20_000, 3)
    t = TemperatureScaling().fit(logits=z, labels=y).temperature_
    assert t == pytest.approx(brute_force_temperature(z, y), rel=1e-6)
    b = 1 / t  # first-order optimality on the full data
    p = softmax(b * z)
    assert abs(np.mean((p * z).sum(1) - z[np.arange(len(y)), y])) < 1e-10


# ------------------------------------------------------------------------ grid mode
def reference_ece(logits: torch.Tensor, labels: torch.Tensor, n_bins: int = 15) -> float:
    """Transcription of the [FLC] ECELoss (bins (lower, upper])."""
    conf, pred = torch.softmax(logits, 1).max(1)
    acc = pred.eq(labels)
    bounds = torch.linspace(0, 1, n_bins + 1, dtype=torch.float64)
    ece = torch.zeros(1, dtype=torch.float64)
    for lower, upper in itertools.pairwise(bounds):
        in_bin = conf.gt(lower.item()) * conf.le(upper.item())
        prop = in_bin.double().mean()
        if prop.item() > 0:
            ece += torch.abs(conf[in_bin].mean() - acc[in_bin].double().mean()) * prop
    return ece.item()


def reference_grid_search(logits, labels, cross_validate="ece"):
    """Transcription of the [FLC]/[MC] ``set_temperature`` loop."""
    nll_val, ece_val = 10**7, 10**7
    t_opt_nll = t_opt_ece = 1.0
    t = 0.1
    for _ in range(100):
        scaled = logits / t
        after_nll = torch.nn.functional.cross_entropy(scaled, labels).item()
        after_ece = reference_ece(scaled, labels)
        if nll_val > after_nll:
            t_opt_nll, nll_val = t, after_nll
        if ece_val > after_ece:
            t_opt_ece, ece_val = t, after_ece
        t += 0.1
    return t_opt_ece if cross_validate == "ece" else t_opt_nll


def test_grid_values_carry_float_drift():
    grid = grid_temperatures()
    assert len(grid) == 100 and grid[0] == 0.1
    assert grid[2] == 0.1 + 0.1 + 0.1 != 0.3
    assert grid[-1] == pytest.approx(10.0, abs=1e-12)


@pytest.mark.parametrize("criterion", ["ece", "nll"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grid_reproduces_reference_loop(criterion, seed):
    z, y = make_logits(seed, 500, 10, scale=2.0)
    ours = TemperatureScaling(method="grid", criterion=criterion).fit(logits=z, labels=y)
    ref = reference_grid_search(torch.from_numpy(z), torch.from_numpy(y), criterion)
    assert ours.temperature_ == ref  # the same float, drift included


# ------------------------------------------------------------------------ properties
@settings(max_examples=25, deadline=None)
@given(
    arrays(np.float64, st.tuples(st.integers(2, 30), st.integers(2, 6)),
           elements=st.integers(-80, 80).map(lambda v: v / 8)),
    st.integers(0, 2**31 - 1),
)
def test_temperature_never_changes_argmax(z, seed):
    top2 = np.sort(z, 1)[:, -2:]
    assume(np.all(top2[:, 1] > top2[:, 0]))  # a unique maximum in every row
    y = np.random.default_rng(seed).integers(0, z.shape[1], z.shape[0])
    for method in ("nll", "grid"):
        p = TemperatureScaling(method=method).fit(logits=z, labels=y).predict_proba(logits=z)
        np.testing.assert_array_equal(p.argmax(1), z.argmax(1))
        assert np.all((p >= 0) & (p <= 1))
        np.testing.assert_allclose(p.sum(1), 1, atol=1e-12)


def test_probs_input_uses_log_probs():
    z, y = make_logits(4, 300, 4)
    p = softmax(z)
    a = TemperatureScaling().fit(logits=np.log(p), labels=y)
    b = TemperatureScaling().fit(probs=p, labels=y)
    assert a.temperature_ == pytest.approx(b.temperature_, rel=1e-12)
    np.testing.assert_allclose(b.predict_proba(probs=p), softmax(z / b.temperature_), atol=1e-12)


def test_bad_hyperparameters_raise_in_fit():
    z, y = make_logits(0, 20, 3)
    est = TemperatureScaling(method="lbfgs")  # stored, not validated, at construction
    with pytest.raises(ValueError, match="method"):
        est.fit(logits=z, labels=y)
    with pytest.raises(ValueError, match="criterion"):
        TemperatureScaling(criterion="brier").fit(logits=z, labels=y)
