"""Dirichlet calibration: the structured objective (temperature scaling, then a ridge-penalised
departure from it) minimised independently, its reduction to matrix scaling on
log-probabilities, and how it differs from the authors' package ``dirichletcal``.

``dirichletcal`` itself cannot be installed here (its sdist's ``install_requires`` does not
parse under current setuptools), so its objective is transcribed below."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.posthoc import bfgs_minimum, make_logits, softmax, structured_reference

from selfcal.posthoc import DirichletCalibration, MatrixScaling, TemperatureScaling


def log_softmax_np(u: np.ndarray) -> np.ndarray:
    m = u.max(1, keepdims=True)
    return u - m - np.log(np.exp(u - m).sum(1, keepdims=True))


def dirichletcal_objective(x, y, lam, mu, reg_norm, ref_row):
    """The loss of ``dirichletcal.calib.multinomial._objective`` (``method='Full'``, ODIR,
    ``reg_mu`` given) on features ``x = log p``, transcribed to numpy with its gradient:
    ``reg_norm`` divides ``lam`` by ``k (k - 1)`` and ``mu`` by ``k``; ``ref_row`` subtracts the
    last row of the raw weights from every row before the softmax *and* the penalty."""
    n, k = x.shape
    onehot = np.eye(k)[y]
    if reg_norm:
        lam, mu = lam / (k * (k - 1)), mu / k
    off = ~np.eye(k, dtype=bool)

    def f(params: np.ndarray) -> tuple[float, np.ndarray]:
        raw = params.reshape(k, k + 1)
        weights = raw - raw[-1] if ref_row else raw
        w, b = weights[:, :-1], weights[:, -1]
        logp = log_softmax_np(x @ w.T + b)
        value = -np.mean(logp[np.arange(n), y]) + lam * np.sum(w[off] ** 2) + mu * np.sum(b**2)
        r = np.exp(logp) - onehot
        g = np.hstack(
            [r.T @ x / n + 2 * lam * np.where(off, w, 0), (r.mean(0) + 2 * mu * b)[:, None]]
        )
        if ref_row:
            g = g.copy()
            g[-1] -= g.sum(0)
        return value, g.ravel()

    return f


def start_weights(k: int) -> np.ndarray:
    return np.hstack([np.eye(k), np.zeros((k, 1))]).ravel()


@pytest.mark.parametrize(
    ("off", "diag", "bias"), [(1.0, 1.0, 1.0), (0.3, 2.0, 5.0), (10.0, 0.1, 0.1)]
)
@pytest.mark.parametrize(("seed", "n", "k"), [(0, 400, 3), (1, 600, 5), (2, 300, 4)])
def test_equals_the_structured_objective_minimised_independently(off, diag, bias, seed, n, k):
    """On ``x = beta log p`` (``beta`` by an independent temperature fit): ``mean NLL of
    softmax(x + x Delta^T + b) + diag k/N sum Delta_jj^2 + off k(k-1)/N sum_{i != j}
    Delta_ij^2 + bias k/N sum b_j^2``, minimised by scipy from ``Delta = 0, b = 0``;
    ``weight_ = beta (I + Delta)``."""
    z, y = make_logits(seed, n, k)
    cal = DirichletCalibration(off_diagonal_l2=off, diagonal_l2=diag, bias_l2=bias)
    cal.fit(logits=z, labels=y)
    log_p = log_softmax_np(z)
    weight, intercept = structured_reference(log_p, y, diag, bias, off_diagonal_l2=off)
    np.testing.assert_allclose(cal.weight_, weight, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(cal.bias_, intercept, rtol=1e-6, atol=1e-7)
    expected = softmax(log_p @ weight.T + intercept)
    # the weights agree to 1e-7, which moves a probability by up to about 1e-8
    np.testing.assert_allclose(cal.predict_proba(logits=z), expected, atol=1e-7)


UNREGULARISED = {"off_diagonal_l2": 0.0, "diagonal_l2": 0.0, "bias_l2": 0.0}


@pytest.mark.parametrize(("seed", "n", "k"), [(0, 400, 3), (1, 600, 5)])
def test_unregularised_fit_equals_the_papers_mle(seed, n, k):
    """Every ``*_l2 = 0``: the unregularised multinomial regression on ``log p`` (the
    authors' objective with ``lam = mu = 0``), minimised by scipy from ``W = I, b = 0``;
    the same probabilities (the weights up to the vector one may add to every row)."""
    z, y = make_logits(seed, n, k)
    cal = DirichletCalibration(**UNREGULARISED).fit(logits=z, labels=y)
    x = log_softmax_np(z)
    f = dirichletcal_objective(x, y, 0.0, 0.0, reg_norm=False, ref_row=False)
    ref = bfgs_minimum(f, start_weights(k)).reshape(k, k + 1)
    np.testing.assert_allclose(
        cal.weight_ - cal.weight_.mean(0), ref[:, :-1] - ref[:, :-1].mean(0), atol=1e-6
    )
    np.testing.assert_allclose(
        cal.predict_proba(logits=z), softmax(x @ ref[:, :-1].T + ref[:, -1]), atol=1e-9
    )


def test_is_matrix_scaling_on_log_probabilities():
    z, y = make_logits(3, 500, 4)
    zt, _ = make_logits(4, 100, 4)
    dirichlet = DirichletCalibration().fit(logits=z, labels=y)
    log_p = torch.log_softmax(torch.from_numpy(z), 1).numpy()
    matrix = MatrixScaling().fit(logits=log_p, labels=y)
    np.testing.assert_array_equal(dirichlet.weight_, matrix.weight_)
    np.testing.assert_array_equal(dirichlet.bias_, matrix.bias_)
    log_pt = torch.log_softmax(torch.from_numpy(zt), 1).numpy()
    np.testing.assert_allclose(
        dirichlet.predict_proba(logits=zt), matrix.predict_proba(logits=log_pt), atol=1e-15
    )
    # and through probabilities: MatrixScaling reads probs as log p
    via_probs = MatrixScaling().fit(probs=softmax(z), labels=y)
    np.testing.assert_allclose(dirichlet.weight_, via_probs.weight_, atol=1e-9)


def test_logits_and_their_probabilities_give_the_same_fit():
    z, y = make_logits(5, 400, 5)
    a = DirichletCalibration().fit(logits=z, labels=y)
    b = DirichletCalibration().fit(probs=softmax(z), labels=y)
    np.testing.assert_allclose(a.weight_, b.weight_, atol=1e-9)
    np.testing.assert_allclose(
        a.predict_proba(logits=z), b.predict_proba(probs=softmax(z)), atol=1e-12
    )


def test_differs_from_matrix_scaling_on_raw_logits():
    z, y = make_logits(6, 400, 4)
    z = z + np.random.default_rng(0).normal(size=(400, 1)) * 5  # row shifts: logits != log p
    a = DirichletCalibration().fit(logits=z, labels=y).predict_proba(logits=z)
    b = MatrixScaling().fit(logits=z, labels=y).predict_proba(logits=z)
    assert np.abs(a - b).max() > 1e-3


def dirichletcal_default(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The probabilities of ``dirichletcal``'s ``FullDirichletCalibrator()`` defaults
    (``reg_lambda=0``, ``ref_row=True``: the unregularised MLE with the last row fixed at 0)
    on ``x = log p``, from the transcribed objective."""
    k = x.shape[1]
    raw = bfgs_minimum(dirichletcal_objective(x, y, 0.0, 0.0, True, True), start_weights(k))
    w = raw.reshape(k, k + 1) - raw.reshape(k, k + 1)[-1]
    return softmax(x @ w[:, :-1].T + w[:, -1])


def test_pinned_difference_default_penalty_against_dirichletcal():
    """``dirichletcal``'s default is the unregularised MLE: on non-separable scores ours with
    every ``*_l2 = 0`` gives the same probabilities. Our default adds the structured ridge
    penalty (strength ``k/N``, ``k(k-1)/N``), which moves the fit by far more than the
    solvers' precision -- towards temperature scaling."""
    z, y = make_logits(7, 400, 4)
    x = log_softmax_np(z)
    theirs = dirichletcal_default(x, y)
    free = DirichletCalibration(**UNREGULARISED).fit(logits=z, labels=y).predict_proba(logits=z)
    np.testing.assert_allclose(free, theirs, atol=1e-7)
    ours = DirichletCalibration().fit(logits=z, labels=y).predict_proba(logits=z)
    assert np.abs(ours - theirs).max() > 1e-3
    ts = softmax(x / TemperatureScaling().fit(logits=z, labels=y).temperature_)
    assert np.abs(ours - ts).max() < np.abs(theirs - ts).max()


def test_strong_penalty_leaves_a_diagonal_map():
    z, y = make_logits(8, 400, 4)
    cal = DirichletCalibration(off_diagonal_l2=1e7, bias_l2=1e7).fit(logits=z, labels=y)
    off = ~np.eye(4, dtype=bool)
    assert np.abs(cal.weight_[off]).max() < 1e-4 and np.abs(cal.bias_).max() < 1e-4
    assert (np.diag(cal.weight_) > 0).all()
