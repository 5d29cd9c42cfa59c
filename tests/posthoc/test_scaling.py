from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.posthoc import make_logits, softmax

from selfcal.posthoc import MatrixScaling, PlattScaling, TemperatureScaling, VectorScaling


def nll(p: np.ndarray, y: np.ndarray) -> float:
    return float(-np.mean(np.log(p[np.arange(len(y)), y])))


def test_nested_models_order_training_nll():
    z, y = make_logits(0, 400, 4)
    fits = [c().fit(logits=z, labels=y) for c in (TemperatureScaling, VectorScaling, MatrixScaling)]
    ts, vec, mat = (nll(f.predict_proba(logits=z), y) for f in fits)
    assert mat <= vec + 1e-9 <= ts + 2e-9


def test_vector_scaling_is_stationary():
    z, y = make_logits(1, 300, 3)
    cal = VectorScaling().fit(logits=z, labels=y)
    w = torch.tensor(np.r_[cal.weight_, cal.bias_], requires_grad=True)
    zt, yt = torch.from_numpy(z), torch.from_numpy(y)
    loss = torch.nn.functional.cross_entropy(zt * w[:3] + w[3:], yt)
    (g,) = torch.autograd.grad(loss, w)
    assert float(g.abs().max()) < 1e-7


def test_matrix_scaling_off_diagonal_penalty_shrinks_off_diagonal():
    z, y = make_logits(2, 300, 4)
    free = MatrixScaling().fit(logits=z, labels=y).weight_
    tied = MatrixScaling(off_diagonal_l2=1e3, bias_l2=1e3).fit(logits=z, labels=y)
    off = ~np.eye(4, dtype=bool)
    assert np.abs(tied.weight_[off]).max() < 1e-3 < np.abs(free[off]).max()
    assert np.abs(tied.bias_).max() < 1e-3


def test_matrix_scaling_can_change_argmax():
    z, y = make_logits(3, 400, 3)
    y = (z.argmax(1) + 1) % 3  # labels systematically one class "later"
    p = MatrixScaling().fit(logits=z, labels=y).predict_proba(logits=z)
    assert np.mean(p.argmax(1) == y) > 0.9


def test_matrix_scaling_rejects_negative_penalty():
    z, y = make_logits(0, 20, 3)
    with pytest.raises(ValueError, match="off_diagonal_l2"):
        MatrixScaling(off_diagonal_l2=-1).fit(logits=z, labels=y)


# ---------------------------------------------------------------------------- Platt
def binary_data(seed: int, n: int = 300):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    s = 3.0 * (2 * y - 1) + 2.5 * rng.normal(size=n) + 0.7
    return s, y


def test_platt_default_is_maximum_likelihood():
    s, y = binary_data(0)
    cal = PlattScaling().fit(logits=s, labels=y)
    p = cal.predict_proba(logits=s)[:, 1]
    # first-order optimality of the Bernoulli likelihood in (a, b)
    assert abs(np.mean(p - y)) < 1e-12 and abs(np.mean((p - y) * s)) < 1e-12


def test_platt_one_and_two_columns_agree():
    s, y = binary_data(1)
    a = PlattScaling().fit(logits=s, labels=y)
    b = PlattScaling().fit(logits=np.stack([np.zeros_like(s), s], 1) + 5.0, labels=y)
    assert a.slope_ == pytest.approx(b.slope_, rel=1e-10)
    assert a.intercept_ == pytest.approx(b.intercept_, rel=1e-10)


@pytest.mark.reference
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_platt_vs_sklearn_sigmoid(seed):
    """scikit-learn's sigmoid calibration uses Platt's smoothed targets and writes the map as
    1 / (1 + exp(A f + B)); with smooth_targets=True we agree with it (A = -a, B = -b). The
    default (plain maximum likelihood) differs by an amount of order 1/N that is pinned here."""
    from sklearn.base import BaseEstimator, ClassifierMixin
    from sklearn.calibration import CalibratedClassifierCV, _SigmoidCalibration
    from sklearn.frozen import FrozenEstimator

    class Fixed(ClassifierMixin, BaseEstimator):
        def fit(self, x, y):
            self.classes_ = np.array([0, 1])
            return self

        def decision_function(self, x):
            return x[:, 0]

        def predict(self, x):
            return (x[:, 0] > 0).astype(int)

    s, y = binary_data(seed)
    ref = _SigmoidCalibration().fit(s, y)
    smooth = PlattScaling(smooth_targets=True).fit(logits=s, labels=y)
    assert smooth.slope_ == pytest.approx(-ref.a_, rel=1e-5)
    assert smooth.intercept_ == pytest.approx(-ref.b_, rel=1e-5, abs=1e-6)
    cv = CalibratedClassifierCV(FrozenEstimator(Fixed().fit(s[:, None], y)), method="sigmoid")
    p_ref = cv.fit(s[:, None], y).predict_proba(s[:, None])
    np.testing.assert_allclose(smooth.predict_proba(logits=s), p_ref, atol=1e-6)
    plain = PlattScaling().fit(logits=s, labels=y).predict_proba(logits=s)
    gap = np.abs(plain - p_ref).max()
    assert 1e-3 < gap < 5e-2  # the smoothed-target difference at N = 300 ...
    assert gap == pytest.approx(np.abs(plain - smooth.predict_proba(logits=s)).max(), abs=1e-6)


def test_platt_rejects_multiclass():
    z, y = make_logits(0, 30, 3)
    with pytest.raises(ValueError, match="binary"):
        PlattScaling().fit(logits=z, labels=y)


def test_platt_probs_use_logit():
    s, y = binary_data(4)
    p1 = 1 / (1 + np.exp(-s))
    a = PlattScaling().fit(logits=s, labels=y)
    b = PlattScaling().fit(probs=p1, labels=y)
    assert a.slope_ == pytest.approx(b.slope_, rel=1e-8)
    np.testing.assert_allclose(a.predict_proba(logits=s), b.predict_proba(probs=p1), atol=1e-10)
    assert softmax(np.stack([np.zeros_like(s), s], 1)).shape == (len(s), 2)
