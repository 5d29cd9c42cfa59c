"""Ensemble temperature scaling against a literal transcription of the authors' code
(``util_calibration.py`` of github.com/zhang64-llnl/Mix-n-Match-Calibration) and against its
formulas."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.posthoc import make_logits, softmax

from selfcal.exceptions import DegenerateCalibration
from selfcal.posthoc import EnsembleTemperatureScaling


# -------------------------------------------------- the authors' functions, transcribed
def mse_t(t, *args):
    logit, label = args
    logit = logit / t
    n = np.sum(np.exp(logit), 1)
    p = np.exp(logit) / n[:, None]
    return np.mean((p - label) ** 2)


def ll_t(t, *args):
    logit, label = args
    logit = logit / t
    n = np.sum(np.exp(logit), 1)
    p = np.clip(np.exp(logit) / n[:, None], 1e-20, 1 - 1e-20)
    return -np.sum(label * np.log(p)) / p.shape[0]


def mse_w(w, *args):
    p0, p1, p2, label = args
    p = w[0] * p0 + w[1] * p1 + w[2] * p2
    p = p / np.sum(p, 1)[:, None]
    return np.mean((p - label) ** 2)


def ll_w(w, *args):
    p0, p1, p2, label = args
    p = w[0] * p0 + w[1] * p1 + w[2] * p2
    return -np.sum(label * np.log(p)) / p.shape[0]


def temperature_scaling(logit, label, loss):
    from scipy import optimize

    bnds = ((0.05, 5.0),)
    f = ll_t if loss == "ce" else mse_t
    return optimize.minimize(
        f, 1.0, args=(logit, label), method="L-BFGS-B", bounds=bnds, tol=1e-12
    ).x


def ensemble_scaling(logit, label, loss, t, n_class):
    from scipy import optimize

    p1 = np.exp(logit) / np.sum(np.exp(logit), 1)[:, None]
    logit = logit / t
    p0 = np.exp(logit) / np.sum(np.exp(logit), 1)[:, None]
    p2 = np.ones_like(p0) / n_class
    bnds_w = ((0.0, 1.0), (0.0, 1.0), (0.0, 1.0))
    constraints = {"type": "eq", "fun": lambda x: np.sum(x) - 1}
    f = ll_w if loss == "ce" else mse_w
    return optimize.minimize(
        f,
        (1.0, 0.0, 0.0),
        args=(p0, p1, p2, label),
        method="SLSQP",
        constraints=constraints,
        bounds=bnds_w,
        tol=1e-12,
    ).x


def authors_ets(logit, label, logit_eval, n_class, loss):
    """``ets_calibrate`` with ``loss`` in both stages (their function fixes ``'mse'``)."""
    t = temperature_scaling(logit, label, loss)
    w = ensemble_scaling(logit, label, loss, t, n_class)
    p1 = np.exp(logit_eval) / np.sum(np.exp(logit_eval), 1)[:, None]
    logit_eval = logit_eval / t
    p0 = np.exp(logit_eval) / np.sum(np.exp(logit_eval), 1)[:, None]
    p2 = np.ones_like(p0) / n_class
    return w[0] * p0 + w[1] * p1 + w[2] * p2, float(t[0]), w


# ----------------------------------------------------------------------------- tests
@pytest.mark.reference
@pytest.mark.parametrize("loss", ["mse", "ce"])
@pytest.mark.parametrize(
    ("seed", "c", "scale"), [(0, 3, 3.0), (1, 10, 2.0), (2, 5, 0.5), (3, 4, 6.0)]
)
@pytest.mark.filterwarnings("ignore::selfcal.exceptions.DegenerateCalibration")
def test_matches_the_authors_code(loss, seed, c, scale):
    """Same temperature and weights as their L-BFGS-B / SLSQP fits (to their solvers'
    precision), hence the same probabilities. (At scale 6 both stop at the authors' bound
    ``T = 5``, which ours warns: see ``test_temperature_stays_in_the_authors_bounds``.)"""
    z, y = make_logits(seed, 500, c, scale=scale)
    zt, _ = make_logits(seed + 50, 100, c, scale=scale)
    onehot = np.eye(c)[y]
    ref_p, ref_t, ref_w = authors_ets(z, onehot, zt, c, loss)
    cal = EnsembleTemperatureScaling(loss=loss).fit(logits=z, labels=y)
    assert cal.temperature_ == pytest.approx(ref_t, rel=1e-5)
    np.testing.assert_allclose(cal.weights_, ref_w, atol=1e-5)
    np.testing.assert_allclose(cal.predict_proba(logits=zt), ref_p, atol=1e-6)


@pytest.mark.parametrize("loss", ["mse", "ce"])
def test_weights_are_optimal_on_the_simplex(loss):
    """KKT conditions of the weight problem, with the gradient written out here: on the
    simplex, every weight's partial derivative is at least the common multiplier, with
    equality where the weight is positive."""
    z, y = make_logits(7, 600, 6, scale=4.0)
    cal = EnsembleTemperatureScaling(loss=loss).fit(logits=z, labels=y)
    w, t = cal.weights_, cal.temperature_
    assert np.all(w >= 0) and w.sum() == pytest.approx(1, abs=1e-14)
    comps = np.stack([softmax(z / t), softmax(z), np.full(z.shape, 1 / 6)])
    p = np.tensordot(w, comps, 1)
    onehot = np.eye(6)[y]
    if loss == "mse":
        grad = np.array([np.mean(2 * (p - onehot) * q) for q in comps])
    else:
        py = p[np.arange(len(y)), y]
        grad = np.array([-np.mean(q[np.arange(len(y)), y] / py) for q in comps])
    nu = grad[w > 1e-9].mean()
    np.testing.assert_allclose(grad[w > 1e-9], nu, atol=1e-9)
    assert np.all(grad[w <= 1e-9] >= nu - 1e-9)


def test_map_formula_and_argmax():
    z, y = make_logits(3, 300, 5)
    cal = EnsembleTemperatureScaling().fit(logits=z, labels=y)
    w, t = cal.weights_, cal.temperature_
    zt, _ = make_logits(4, 80, 5)
    expected = w[0] * softmax(zt / t) + w[1] * softmax(zt) + w[2] / 5
    out = cal.predict_proba(logits=zt)
    np.testing.assert_allclose(out, expected, atol=1e-15)
    assert (out.argmax(1) == zt.argmax(1)).all()
    assert 0.05 <= t <= 5.0


def test_temperature_stays_in_the_authors_bounds():
    """Pure noise wants ``T -> infinity``: the fit returns the authors' upper bound and warns
    that the minimum may lie beyond it."""
    z, y = make_logits(5, 300, 4, scale=10.0, margin=0.0)
    with pytest.warns(DegenerateCalibration, match="lowest at T = 5, at an end of the authors'"):
        cal = EnsembleTemperatureScaling(loss="ce").fit(logits=z, labels=y)
    assert cal.temperature_ == 5.0


@pytest.mark.parametrize("loss", ["mse", "ce"])
def test_all_correct_returns_the_scores_unchanged(loss):
    """Every validation prediction correct: ``T = 1`` and weights ``(0, 1, 0)`` -- the
    scores unchanged -- with a warning."""
    z, y = make_logits(6, 300, 4, margin=6.0)
    keep = z.argmax(1) == y
    z, y = z[keep], y[keep]
    with pytest.warns(DegenerateCalibration, match="validation predictions are correct"):
        cal = EnsembleTemperatureScaling(loss=loss).fit(logits=z, labels=y)
    assert cal.temperature_ == 1.0
    np.testing.assert_array_equal(cal.weights_, [0.0, 1.0, 0.0])
    np.testing.assert_allclose(cal.predict_proba(logits=z), softmax(z), rtol=0, atol=1e-15)


def test_bad_loss_raises():
    z, y = make_logits(0, 20, 3)
    with pytest.raises(ValueError, match="loss must be one of"):
        EnsembleTemperatureScaling(loss="brier").fit(logits=z, labels=y)
