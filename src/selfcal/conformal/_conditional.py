"""The exact cutoff of conditional conformal prediction over group indicators (Gibbs, Cherian
& Candès 2023, "Conformal prediction with conditional guarantees"), for
:class:`~selfcal.conformal.conditional.ConditionalConformal`.

Features: ``phi(x) = (1, 1{x in G_1}, ..., 1{x in G_m})``, so a row's features are its
*membership pattern* (which groups it is in). Pinball loss at level ``tau = 1 - alpha``:
``l(r) = max(tau r, (tau - 1) r)``. With the test row's score imputed as ``S``, the
augmented quantile regression is ``min_beta sum_i l(S_i - phi_i beta) + l(S - phi_t beta)``
and its dual is ``max_eta sum_i eta_i S_i + eta_t S`` subject to ``eta in [tau - 1, tau]``
and ``sum_i eta_i phi_i + eta_t phi_t = 0``. The paper's sets are
``{y : eta_t(S(x, y)) < tau}`` (conservative) and ``{y : eta_t(S(x, y)) < U}``,
``U ~ Uniform(tau - 1, tau)`` (randomised); ``eta_t(S)`` is non-decreasing in ``S``.

The cutoff is found without searching over ``S``. Let ``V(c)`` be the optimum of the
*calibration-only* dual ``max sum_i eta_i S_i`` subject to ``eta_i in [tau - 1, tau]`` and
``sum_i eta_i phi_i = -c phi_t`` (concave in ``c``). The augmented dual's optimum is
``max_c (c S + V(c))``, so ``eta_t(S) >= c`` exactly when ``S >= -V'_-(c)``, and
``-V'_-(c) = min {phi_t beta : beta minimises sum_i l(S_i - phi_i beta) - c phi_t beta}``
(the left derivative of a concave value function is the smallest slope of the primal
solutions). :func:`cutoff` computes it with two linear programs (HiGHS dual simplex, through
:func:`scipy.optimize.linprog`):

1. the dual above at ``c`` (``n`` bounded variables, one equality per feature), which gives
   one optimal ``eta``; infeasible means ``eta_t`` never reaches ``c`` (the test row's
   pattern is outside what the calibration rows can balance, e.g. a group with fewer than
   ``ceil(1 / alpha) - 1`` rows, or one with none): the cutoff is ``+inf``;
2. ``min phi_t beta`` over the optimal ``beta``, which complementary slackness with that
   ``eta`` describes exactly (``eta_i < tau`` => ``phi_i beta >= S_i``; ``eta_i > tau - 1`` =>
   ``phi_i beta <= S_i``), so no objective tolerance enters: per pattern only the largest
   lower and the smallest upper bound matter (at most ``2P`` constraints on ``m + 1``
   variables).

The cutoff depends on the test row's pattern and ``c`` only, not on its scores: with ``c =
tau`` (the conservative variant) one pair of programs serves every test row of a pattern.
For a partition (every row in exactly one group) it is the Mondrian threshold, the
``ceil((n_j + 1)(1 - alpha))``-th smallest score of the row's group. With tied scores the
optimal ``beta`` may give several fitted values at the test row: the smallest is taken (split
conformal's choice when ``(n + 1)(1 - alpha)`` is an integer; methods §10.7 says what was
checked), where MAPIE's exact search may return a larger one.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import csr_array

AT_BOUND = 1e-9
"""How close to a bound (``tau - 1`` or ``tau``) a dual variable counts as at it: simplex
leaves non-basic variables exactly at their bounds."""


def features(patterns: np.ndarray) -> np.ndarray:
    """``(P, m + 1)`` float64 ``(1, pattern)`` rows: the intercept and the group indicators."""
    return np.hstack([np.ones((patterns.shape[0], 1)), patterns.astype(np.float64)])


def cutoff(
    scores: np.ndarray,
    row_pattern: np.ndarray,
    patterns: np.ndarray,
    test: np.ndarray,
    tau: float,
    c: float,
) -> float:
    """``-V'_-(c)`` (module doc): the largest score a label of a row with membership
    ``test`` (``(m,)`` 0/1) may have and stay in the set, given the ``(n,)`` calibration
    ``scores``, each row's index ``row_pattern`` into the ``(P, m)`` 0/1 ``patterns``, the
    quantile level ``tau = 1 - alpha`` and ``c`` (``tau`` conservative, ``U`` randomised).
    ``+inf`` when the first program is infeasible, ``-inf`` when the second is unbounded."""
    phi = features(patterns)
    phi_t = features(test[None, :])[0]
    present = np.bincount(row_pattern, minlength=len(patterns)) > 0
    used = (phi[present] != 0).any(0)
    if (phi_t[~used] != 0).any():
        return math.inf  # the test row is in a group no calibration row is in
    phi, phi_t = phi[:, used], phi_t[used]
    eta = _dual(scores, phi[row_pattern], phi_t, tau, c)
    if eta is None:
        return math.inf
    low, high = _slackness_bounds(scores, row_pattern, len(patterns), eta, tau)
    return _smallest_fit(phi, phi_t, low, high)


def _dual(
    scores: np.ndarray, phi_rows: np.ndarray, phi_t: np.ndarray, tau: float, c: float
) -> np.ndarray | None:
    """An optimal ``eta`` of ``max sum eta_i S_i``, ``eta_i in [tau - 1, tau]``,
    ``sum eta_i phi_i = -c phi_t``; ``None`` when infeasible."""
    result = linprog(
        -scores,
        A_eq=csr_array(phi_rows.T),
        b_eq=-c * phi_t,
        bounds=(tau - 1.0, tau),
        method="highs-ds",
    )
    if result.status == 2:
        return None
    if result.status != 0:
        raise RuntimeError(f"conditional conformal: the dual program failed ({result.message})")
    return np.asarray(result.x, dtype=np.float64)


def _slackness_bounds(
    scores: np.ndarray, row_pattern: np.ndarray, n_patterns: int, eta: np.ndarray, tau: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per pattern, the bounds on its fitted value that complementary slackness with ``eta``
    sets: ``low`` the largest score of a row with ``eta_i < tau`` (``-inf`` if none),
    ``high`` the smallest of a row with ``eta_i > tau - 1`` (``+inf`` if none)."""
    below_top = eta < tau - AT_BOUND
    above_bottom = eta > tau - 1.0 + AT_BOUND
    low = np.full(n_patterns, -math.inf)
    high = np.full(n_patterns, math.inf)
    np.maximum.at(low, row_pattern[below_top], scores[below_top])
    np.minimum.at(high, row_pattern[above_bottom], scores[above_bottom])
    return low, high


def _smallest_fit(phi: np.ndarray, phi_t: np.ndarray, low: np.ndarray, high: np.ndarray) -> float:
    """``min phi_t beta`` subject to ``low_p <= phi_p beta <= high_p`` (infinite bounds
    dropped); ``-inf`` when unbounded below."""
    lower, upper = np.isfinite(low), np.isfinite(high)
    a_ub = np.vstack([-phi[lower], phi[upper]])
    b_ub = np.concatenate([-low[lower], high[upper]])
    result = linprog(phi_t, A_ub=a_ub, b_ub=b_ub, bounds=(None, None), method="highs-ds")
    if result.status == 3:
        return -math.inf
    if result.status != 0:
        raise RuntimeError(f"conditional conformal: the cutoff program failed ({result.message})")
    return float(phi_t @ result.x)
