"""Dirichlet calibration: the exact penalised NLL minimised independently, its reduction to
matrix scaling on log-probabilities, and the ODIR conventions of the authors' package pinned."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.posthoc import make_logits, softmax

from selfcal.posthoc import DirichletCalibration, MatrixScaling


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


def minimise(f, start: np.ndarray) -> np.ndarray:
    from scipy.optimize import minimize

    return minimize(f, start, jac=True, method="BFGS", options={"gtol": 1e-11, "maxiter": 20_000}).x


def start_weights(k: int) -> np.ndarray:
    return np.hstack([np.eye(k), np.zeros((k, 1))]).ravel()


@pytest.mark.parametrize(("lam", "mu"), [(1.0, 1.0), (0.3, 5.0), (10.0, 0.1)])
@pytest.mark.parametrize(("seed", "n", "k"), [(0, 400, 3), (1, 600, 5), (2, 300, 4)])
def test_equals_the_papers_penalised_nll_minimised_independently(lam, mu, seed, n, k):
    """``mean NLL + lam / (k(k-1)) sum_{i != j} W_ij^2 + mu / k sum_j b_j^2`` on ``log p``:
    the authors' objective with ``reg_norm=True`` and ``ref_row=False``."""
    z, y = make_logits(seed, n, k)
    cal = DirichletCalibration(off_diagonal_l2=lam, bias_l2=mu).fit(logits=z, labels=y)
    f = dirichletcal_objective(log_softmax_np(z), y, lam, mu, reg_norm=True, ref_row=False)
    ref = minimise(f, start_weights(k)).reshape(k, k + 1)
    np.testing.assert_allclose(cal.weight_, ref[:, :-1], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(cal.bias_, ref[:, -1], rtol=1e-6, atol=1e-7)
    expected = softmax(log_softmax_np(z) @ ref[:, :-1].T + ref[:, -1])
    np.testing.assert_allclose(cal.predict_proba(logits=z), expected, atol=1e-9)


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


def test_pinned_difference_reference_row_changes_the_regularised_fit():
    """``dirichletcal``'s default ``ref_row=True`` fixes the last class's row at 0 before the
    penalty. Unregularised that is only a gauge (the probabilities are the same); with ODIR
    the penalty then depends on which class is last, and the fit differs from ours."""
    z, y = make_logits(7, 400, 4)
    x = log_softmax_np(z)
    free = DirichletCalibration(0.0, 0.0).fit(logits=z, labels=y).predict_proba(logits=z)
    raw = minimise(dirichletcal_objective(x, y, 0.0, 0.0, True, True), start_weights(4))
    w = raw.reshape(4, 5) - raw.reshape(4, 5)[-1]
    np.testing.assert_allclose(free, softmax(x @ w[:, :-1].T + w[:, -1]), atol=1e-7)
    ours = DirichletCalibration(3.0, 3.0).fit(logits=z, labels=y).predict_proba(logits=z)
    raw = minimise(dirichletcal_objective(x, y, 3.0, 3.0, True, True), start_weights(4))
    w = raw.reshape(4, 5) - raw.reshape(4, 5)[-1]
    theirs = softmax(x @ w[:, :-1].T + w[:, -1])
    assert np.abs(ours - theirs).max() > 1e-3


def test_strong_penalty_leaves_a_diagonal_map():
    z, y = make_logits(8, 400, 4)
    cal = DirichletCalibration(off_diagonal_l2=1e7, bias_l2=1e7).fit(logits=z, labels=y)
    off = ~np.eye(4, dtype=bool)
    assert np.abs(cal.weight_[off]).max() < 1e-4 and np.abs(cal.bias_).max() < 1e-4
    assert (np.diag(cal.weight_) > 0).all()
