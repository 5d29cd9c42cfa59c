"""Beta calibration against the ``betacal`` package (the authors'), against an independent
bounded minimisation of the same constrained log-loss, and the pinned difference where
``betacal``'s refit leaves the constraints."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.posthoc import make_logits, softmax

from selfcal.posthoc import BetaCalibration


def binary_scores(seed: int, n: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """Scores away from 0 and 1 (where ``betacal`` clips) with labels from a beta-calibration
    map of random shape."""
    rng = np.random.default_rng(seed)
    s = rng.uniform(0.02, 0.98, n)
    a, b, c = rng.uniform(0.3, 3.0), rng.uniform(0.3, 3.0), rng.normal()
    truth = 1 / (1 + np.exp(-(a * np.log(s) - b * np.log1p(-s) + c)))
    return s, (rng.random(n) < truth).astype(int)


def constrained_log_loss_minimum(s: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``(a, b, c)`` by scipy's L-BFGS-B with bounds ``a, b >= 0`` on the mean log-loss of
    ``sigmoid(a log s - b log(1 - s) + c)`` against the targets ``y`` (0/1 or smoothed),
    written here in numpy."""
    from scipy.optimize import minimize

    x = np.stack([np.log(s), -np.log1p(-s), np.ones_like(s)], 1)

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        u = x @ theta
        value = np.mean(np.logaddexp(0, u) - y * u)
        return value, x.T @ (1 / (1 + np.exp(-u)) - y) / len(y)

    res = minimize(
        loss,
        np.array([1.0, 1.0, 0.0]),
        jac=True,
        method="L-BFGS-B",
        bounds=[(0, None), (0, None), (None, None)],
        options={"gtol": 1e-12, "ftol": 1e-16, "maxiter": 10_000},
    )
    return res.x


def platt_targets(y: np.ndarray) -> np.ndarray:
    """Platt's (1999) targets, written here: ``(N+ + 1)/(N+ + 2)`` and ``1/(N- + 2)``."""
    n_pos, n_neg = y.sum(), len(y) - y.sum()
    return np.where(y > 0, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))


@pytest.mark.parametrize("seed", range(8))
def test_equals_bounded_minimisation(seed):
    """``smooth_targets=False``: the constrained maximum-likelihood fit to the 0/1 labels."""
    s, y = binary_scores(seed)
    cal = BetaCalibration(smooth_targets=False).fit(probs=s, labels=y)
    ref = constrained_log_loss_minimum(s, y)
    np.testing.assert_allclose([cal.a_[0], cal.b_[0], cal.c_[0]], ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_default_equals_bounded_minimisation_with_smoothed_targets(seed):
    """The default fit is the same constrained minimisation against Platt's targets -- and
    differs from the fit to the 0/1 labels."""
    s, y = binary_scores(seed, n=150)
    cal = BetaCalibration().fit(probs=s, labels=y)
    ref = constrained_log_loss_minimum(s, platt_targets(y))
    np.testing.assert_allclose([cal.a_[0], cal.b_[0], cal.c_[0]], ref, rtol=1e-5, atol=1e-6)
    plain = constrained_log_loss_minimum(s, y.astype(float))
    assert np.abs(ref - plain).max() > 1e-3


def test_default_one_vs_rest_smooths_each_maps_targets():
    """For ``C > 2`` each class's map gets the smoothed targets of its own one-vs-rest
    labels (``N+`` = that class's count)."""
    z, y = make_logits(9, 300, 3)
    p = softmax(z)
    cal = BetaCalibration().fit(probs=p, labels=y)
    for j in range(3):
        ref = constrained_log_loss_minimum(p[:, j], platt_targets((y == j).astype(int)))
        np.testing.assert_allclose([cal.a_[j], cal.b_[j], cal.c_[j]], ref, rtol=1e-5, atol=1e-6)


@pytest.mark.reference
@pytest.mark.parametrize("seed", range(8))
def test_matches_betacal_abm(seed, monkeypatch):
    """``betacal.BetaCalibration("abm")`` fits the same map through scikit-learn's
    ``LogisticRegression(C=99999999999)``, whose default ``tol=1e-4`` leaves its
    coefficients ~3e-3 from the optimum; with the solver's tolerance tightened (nothing else
    changed) it agrees with ours to 1e-5. Its ``map_`` is ``[a, b, m]`` with
    ``c = b log(1 - m) - a log m``; ``c`` itself is the regression's intercept."""
    betacal = pytest.importorskip("betacal")
    from sklearn.linear_model import LogisticRegression

    def precise(**kwargs: float) -> LogisticRegression:
        return LogisticRegression(tol=1e-12, max_iter=100_000, **kwargs)

    monkeypatch.setattr(betacal.beta_calibration, "LogisticRegression", precise)
    s, y = binary_scores(100 + seed)
    ref = betacal.BetaCalibration("abm").fit(s, y)
    a, b, m = ref.calibrator_.map_
    cal = BetaCalibration(smooth_targets=False).fit(probs=s, labels=y)  # betacal fits 0/1
    assert cal.a_[0] == pytest.approx(a, rel=1e-5, abs=1e-7)
    assert cal.b_[0] == pytest.approx(b, rel=1e-5, abs=1e-7)
    assert cal.c_[0] == pytest.approx(ref.calibrator_.lr_.intercept_[0], rel=1e-5, abs=1e-7)
    assert 0 < m < 1  # (betacal solves c = b log(1 - m) - a log m for m only to ~1e-5)
    grid = np.linspace(0.01, 0.99, 99)
    np.testing.assert_allclose(cal.predict_proba(probs=grid)[:, 1], ref.predict(grid), atol=1e-6)


@pytest.mark.reference
def test_pinned_difference_betacal_keeps_a_negative_b():
    """Scores that rank the classes backwards: the unconstrained fit has ``a, b < 0``;
    ``betacal`` drops ``log s`` (``a = 0``) and keeps the refitted ``b < 0`` -- a decreasing
    map. The constrained optimum is ``a = b = 0``: the constant base rate."""
    betacal = pytest.importorskip("betacal")
    rng = np.random.default_rng(0)
    s = rng.uniform(0.05, 0.95, 500)
    y = (rng.random(500) < 1 - s).astype(int)
    ref = betacal.BetaCalibration("abm").fit(s, y)
    assert ref.calibrator_.map_[0] == 0 and ref.calibrator_.map_[1] < 0
    cal = BetaCalibration(smooth_targets=False).fit(probs=s, labels=y)
    assert cal.a_[0] == 0 and cal.b_[0] == 0
    np.testing.assert_allclose(cal.predict_proba(probs=s)[:, 1], y.mean(), rtol=1e-12)


def test_binary_map_formula_and_monotonicity():
    z, y = make_logits(1, 300, 2)
    cal = BetaCalibration().fit(logits=z, labels=y)
    p1 = softmax(z)[:, 1]
    u = cal.a_[0] * np.log(p1) - cal.b_[0] * np.log(1 - p1) + cal.c_[0]
    np.testing.assert_allclose(cal.predict_proba(logits=z)[:, 1], 1 / (1 + np.exp(-u)), atol=1e-12)
    assert cal.a_[0] >= 0 and cal.b_[0] >= 0
    grid = np.linspace(0.001, 0.999, 500)
    assert np.all(np.diff(cal.predict_proba(probs=grid)[:, 1]) >= 0)


def test_one_vs_rest_is_renormalised_binary_fits():
    z, y = make_logits(2, 400, 4)
    p = softmax(z)
    cal = BetaCalibration().fit(logits=z, labels=y)
    cols = []
    for j in range(4):
        binary = BetaCalibration().fit(probs=p[:, j], labels=(y == j).astype(int))
        assert cal.a_[j] == pytest.approx(binary.a_[0], rel=1e-8, abs=1e-10)
        cols.append(binary.predict_proba(probs=p[:, j])[:, 1])
    expected = np.stack(cols, 1)
    np.testing.assert_allclose(
        cal.predict_proba(logits=z), expected / expected.sum(1, keepdims=True), atol=1e-9
    )


def test_log_one_minus_is_exact_near_one():
    """``log(1 - p)`` for ``p`` within float64 rounding of 1 comes from the other classes'
    probabilities, not from ``1 - p``: the fit on logits whose top probability rounds to 1
    stays finite and equals the fit on the exact features."""
    from selfcal.posthoc._modules import log_one_minus

    z = torch.tensor([[40.0, 0.0, -3.0], [0.0, 1.0, 2.0]], dtype=torch.float64)
    got = log_one_minus(torch.log_softmax(z, 1))
    p = torch.softmax(z, 1)
    exact = torch.stack(
        [
            torch.log(p.sum(1) - p[:, j])
            if j
            else torch.logsumexp(torch.log_softmax(z, 1)[:, 1:], 1)
            for j in range(3)
        ],
        1,
    )
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got[0, 0], exact[0, 0], rtol=1e-12, atol=0)
    torch.testing.assert_close(got[1], torch.log1p(-p[1]), rtol=1e-12, atol=1e-15)
