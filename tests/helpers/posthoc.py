"""Shared synthetic data for the post-hoc calibrator tests."""

from __future__ import annotations

import numpy as np

BINARY_ONLY = ("platt", "quadratic")
"""Calibrators for two classes only."""


def groupless_names() -> list[str]:
    """The registered calibrators that do not use groups: the registry-wide contract tests
    fit them on scores and labels alone; those that use groups (``uses_groups``) follow the
    same contract with groups in ``tests/posthoc/test_group_contract.py``."""
    from selfcal.posthoc import build_calibrator, calibrator_names

    return [n for n in calibrator_names() if not build_calibrator(n).uses_groups]


def group_names() -> list[str]:
    """The registered calibrators that use groups (``uses_groups``)."""
    from selfcal.posthoc import build_calibrator, calibrator_names

    return [n for n in calibrator_names() if build_calibrator(n).uses_groups]


def demo_groups(n: int) -> np.ndarray:
    """Three groups ``"a"``, ``"b"``, ``"c"`` dealt round robin over ``n`` rows: what the
    registry-wide tests give a calibrator that uses groups."""
    return np.array(["a", "b", "c"])[np.arange(n) % 3]


def group_kwargs(calibrator: object, n: int) -> dict[str, np.ndarray]:
    """``{"groups": demo_groups(n)}`` for a calibrator whose predictions need groups, else
    ``{}``."""
    needs = getattr(calibrator, "needs_groups", None)
    uses = getattr(calibrator, "uses_groups", False)
    return {"groups": demo_groups(n)} if uses or (needs is not None and needs()) else {}


def make_logits(seed: int, n: int = 400, c: int = 5, scale: float = 3.0, margin: float = 2.0):
    """Overconfident logits: noise times ``scale`` plus ``margin`` on a class that is the true
    label 70% of the time. Returns float64 ``(n, c)`` logits and int64 labels."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    target = np.where(rng.random(n) < 0.7, y, rng.integers(0, c, n))
    z = scale * rng.normal(size=(n, c))
    z[np.arange(n), target] += margin * scale
    return z, y


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def log_softmax(u: np.ndarray) -> np.ndarray:
    m = u.max(1, keepdims=True)
    return u - m - np.log(np.exp(u - m).sum(1, keepdims=True))


def ts_beta(s: np.ndarray, y: np.ndarray) -> float:
    """Temperature scaling's ``beta = 1/T`` by scipy: the root of the NLL's derivative
    ``mean_i (E_p[s_i] - s_{i y_i})`` (increasing in ``beta``) in ``[e^-10, e^10]``."""
    from scipy.optimize import brentq

    rows = np.arange(len(y))

    def slope(beta: float) -> float:
        return float(np.mean((np.exp(log_softmax(beta * s)) * s).sum(1) - s[rows, y]))

    return brentq(slope, np.exp(-10), np.exp(10), xtol=1e-300, rtol=4 * np.finfo(float).eps)


def structured_objective(
    x: np.ndarray, y: np.ndarray, diagonal_l2: float, bias_l2: float, off_diagonal_l2=None
):
    """The structured scaling objective on ``x = beta s``, written here with its gradient:
    ``mean NLL of softmax(x + x Delta^T + b) + diagonal_l2 C/N sum_k Delta_kk^2
    + off_diagonal_l2 C(C-1)/N sum_{j != k} Delta_jk^2 + bias_l2 C/N sum_k b_k^2``.
    ``off_diagonal_l2=None`` is vector scaling: ``Delta = diag(v)``, parameters ``[v, b]``;
    else matrix scaling, parameters ``[Delta (row-major), b]``."""
    n, c = x.shape
    onehot = np.eye(c)[y]
    diag, bias = diagonal_l2 * c / n, bias_l2 * c / n
    vector = off_diagonal_l2 is None
    if vector:
        penalty = diag * np.ones((c, c))  # only the diagonal is used
    else:
        penalty = np.full((c, c), off_diagonal_l2 * c * (c - 1) / n)
        np.fill_diagonal(penalty, diag)

    def f(theta: np.ndarray) -> tuple[float, np.ndarray]:
        b = theta[-c:]
        delta = np.diag(theta[:c]) if vector else theta[:-c].reshape(c, c)
        logp = log_softmax(x + x @ delta.T + b)
        r = np.exp(logp) - onehot
        value = -np.mean(logp[np.arange(n), y]) + np.sum(penalty * delta**2) + bias * b @ b
        g_delta = r.T @ x / n + 2 * penalty * delta
        g_b = r.mean(0) + 2 * bias * b
        return value, np.r_[np.diag(g_delta) if vector else g_delta.ravel(), g_b]

    return f


def bfgs_minimum(loss_and_grad, theta0: np.ndarray) -> np.ndarray:
    """scipy's BFGS to the float64 limit on an objective written in numpy."""
    from scipy.optimize import minimize

    res = minimize(
        loss_and_grad, theta0, jac=True, method="BFGS", options={"gtol": 1e-11, "maxiter": 20_000}
    )
    return res.x


def structured_reference(
    s: np.ndarray,
    y: np.ndarray,
    diagonal_l2: float = 1.0,
    bias_l2: float = 1.0,
    off_diagonal_l2=None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(weight, bias)`` of structured vector (``off_diagonal_l2=None``) or matrix scaling of
    the scores ``s``, computed here: ``beta`` by :func:`ts_beta`, then BFGS on
    :func:`structured_objective` from ``Delta = 0, b = 0``; ``weight = beta (1 + v)`` (vector)
    or ``beta (I + Delta)`` (matrix)."""
    n, c = s.shape
    beta = ts_beta(s, y)
    f = structured_objective(beta * s, y, diagonal_l2, bias_l2, off_diagonal_l2)
    size = c if off_diagonal_l2 is None else c * c
    theta = bfgs_minimum(f, np.zeros(size + c))
    if off_diagonal_l2 is None:
        return beta * (1 + theta[:c]), theta[c:]
    return beta * (np.eye(c) + theta[:size].reshape(c, c)), theta[size:]


def vote_fractions(seed: int, n: int = 400, c: int = 4, trees: int = 20):
    """Random-forest-like probabilities: the fractions of ``trees`` votes, drawn from the
    softmax of :func:`make_logits` at a fifth of its scale -- so many entries are exactly 0,
    the true class's among them. Returns float64 ``(n, c)`` probabilities and labels."""
    z, y = make_logits(seed, n, c)
    rng = np.random.default_rng(seed + 1000)
    votes = np.stack([rng.multinomial(trees, q) for q in softmax(z / 5.0)])
    return votes / trees, y
