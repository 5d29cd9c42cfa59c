"""The statistics behind the certificates: the candidate table, the p-values of Learn-then-Test,
the family-wise error procedures, the Clopper-Pearson bound and the rows a certificate would
need. Every function is vectorised over the candidate thresholds (one sort, cumulative sums).

Tail probabilities come from :mod:`scipy.stats` (``binom.cdf`` for the binomial tail,
``beta.ppf`` for the Clopper-Pearson bound).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.stats import beta as beta_dist
from scipy.stats import binom

from selfcal.metrics.selective import tie_groups

P_VALUES = ("binomial", "hoeffding_bentkus")
FWER = ("fixed_sequence", "bonferroni", "holm")


def candidates(
    confidence: np.ndarray, correct: np.ndarray, grid: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The candidate thresholds in *decreasing* order with, for each, the rows answered
    (``c >= t``) and the errors among them: ``(thresholds, n, e)``, ``n`` and ``e`` int64 and
    non-decreasing. Without ``grid``: every distinct confidence
    (:func:`selfcal.metrics.selective.tie_groups`: tied rows are answered or refused together);
    with ``grid``: its values (a value above every confidence answers no row)."""
    if grid is None:
        levels, size, errs = tie_groups(
            torch.from_numpy(confidence), torch.from_numpy(correct.astype(np.float64))
        )
        n = np.cumsum(size.numpy()).round().astype(np.int64)
        e = np.cumsum(errs.numpy()).round().astype(np.int64)
        return levels.numpy(), n, e
    order = np.argsort(-confidence, kind="stable")
    wrong_before = np.concatenate([[0], np.cumsum(~correct[order])])
    ascending = confidence[order][::-1]
    thresholds = np.sort(grid)[::-1]
    n = confidence.shape[0] - np.searchsorted(ascending, thresholds, side="left")
    return thresholds, n.astype(np.int64), wrong_before[n].astype(np.int64)


def p_values(n: np.ndarray, e: np.ndarray, eps: float, kind: str) -> np.ndarray:
    """The p-value of ``H_t: R(t) > eps`` at each candidate (1 where no row is answered).

    * ``"binomial"``: ``P(Binomial(n_t, eps) <= e_t)``, exact, valid conditionally on ``n_t``
      (given ``n_t``, the errors among the answered rows of i.i.d. rows are
      ``Binomial(n_t, R(t))``, stochastically at least ``Binomial(n_t, eps)`` under ``H_t``).
    * ``"hoeffding_bentkus"``: Learn-then-Test's HB p-value for a binary loss, as MAPIE 1.6
      computes it (``mapie.risk_control.methods.compute_hoeffding_bentkus_p_value`` with
      ``binary=True``): ``min(exp(-n h1(min(r, eps), eps)), P(Binomial(n, eps) <= ceil(n r)))``
      with ``r = e / n`` in float64 and ``h1(r, a) = r log(r/a) + (1-r) log((1-r)/(1-a))``.
      In exact arithmetic this is the binomial p-value (``ceil(n r) = e`` and the Chernoff
      bound ``exp(-n h1)`` is never below the exact tail); in float64 ``n * (e / n)`` exceeds
      ``e`` by one ulp for some ``(e, n)`` and the ceiling then counts one error more, so the
      p-value is larger there (conservative). MAPIE gives NaN where no row is answered; here
      that p-value is 1 (never rejected).
    """
    p = np.ones(n.shape, dtype=np.float64)
    has = n > 0
    nn, ee = n[has].astype(np.float64), e[has].astype(np.float64)
    if kind == "binomial":
        p[has] = binom.cdf(ee, nn, eps)
        return p
    r = ee / nn
    capped = np.where(r > eps, eps, r)
    with np.errstate(divide="ignore", invalid="ignore"):
        first = np.where(capped != 0, capped * np.log(capped / eps), 0.0)
        h1 = first + (1 - capped) * np.log((1 - capped) / (1 - eps))
    hoeffding = np.exp(-nn * h1)
    bentkus = binom.cdf(np.ceil(nn * r), nn, eps)
    p[has] = np.where(bentkus > hoeffding, hoeffding, bentkus)
    return p


def min_answered(eps: float, delta: float) -> int:
    """``ceil(log(delta) / log(1 - eps))``: the fewest answered rows whose binomial p-value can
    reach ``delta`` (with no error, ``(1 - eps)^n <= delta``); fewer can never be certified."""
    if eps >= 1:
        return 1
    return max(1, math.ceil(math.log(delta) / math.log1p(-eps) - 1e-9))


MAX_STARTS = 3
"""At most this many starts of the fixed sequence (each costs a share of ``delta``)."""
START_RATIO = 4
"""Each start answers this many times the rows of the one before."""


def sequence_starts(n_rows: int, eps: float, delta: float) -> tuple[np.ndarray, float]:
    """The starts of the fixed-sequence test and the level of each: ``J = min(3, max(1,
    floor(log4(N / n0)) + 1))`` starts, ``n0 = min_answered(eps, delta)``, at the answered
    counts ``k_j = n1 4^j`` (``j = 0 .. J-1``, ``n1 = min_answered(eps, delta / J)``), each
    tested at ``delta / J``. A function of ``(N, eps, delta)`` only, never of the rows. (On
    the shared real sets and synthetic data, three starts lost a few percent of the answered
    rows against two and kept a certificate where a single start, stopped by an early error
    among the most confident rows, kept none.)"""
    n0 = min_answered(eps, delta)
    j = 1
    while j < MAX_STARTS and n0 * START_RATIO**j <= n_rows:
        j += 1
    n1 = min_answered(eps, delta / j)
    return n1 * START_RATIO ** np.arange(j, dtype=np.int64), delta / j


def fixed_sequence(
    p: np.ndarray, n: np.ndarray, n_rows: int, eps: float, delta: float
) -> np.ndarray:
    """Rejected hypotheses (bool, candidates in decreasing order) of the multi-start fixed
    sequence (:func:`sequence_starts`): sequence ``j`` starts at the first candidate answering
    at least ``k_j`` rows and walks down the thresholds, rejecting while ``p_t <= delta / J``;
    it stops at the first ``p_t > delta / J``. A hypothesis is rejected when any sequence
    rejects it. Validity: each sequence errs with probability at most ``delta / J`` (the
    package doc's argument), so all together at most ``delta`` (Bonferroni over starts)."""
    starts, level = sequence_starts(n_rows, eps, delta)
    rejected = np.zeros(p.shape, dtype=bool)
    fails = p > level
    # one position per start; the stop is an argmax on the cumulative condition
    for s in np.searchsorted(n, starts, side="left"):
        if s >= p.shape[0]:
            continue
        tail = fails[s:]
        stop = int(np.argmax(tail)) if tail.any() else tail.shape[0]
        rejected[s : s + stop] = True
    return rejected


def bonferroni(p: np.ndarray, delta: float) -> np.ndarray:
    """Rejected hypotheses of Bonferroni's correction: ``p_t <= delta / m`` (``m`` the grid's
    size), MAPIE's ``fwer_method="bonferroni"``."""
    return p <= delta / p.shape[0]


def holm(p: np.ndarray, delta: float) -> np.ndarray:
    """Rejected hypotheses of Holm's step-down procedure (MAPIE's ``"bonferroni_holm"``): with
    ``p_(1) <= ... <= p_(m)``, reject ``p_(1) .. p_(k)`` where ``k`` is the first ``i`` with
    ``p_(i+1) > delta / (m - i)``. Equal p-values are rejected or kept together whatever their
    order, so the set equals MAPIE's sequential one."""
    m = p.shape[0]
    order = np.argsort(p, kind="stable")
    fails = p[order] > delta / (m - np.arange(m))
    k = int(np.argmax(fails)) if fails.any() else m
    rejected = np.zeros(m, dtype=bool)
    rejected[order[:k]] = True
    return rejected


def clopper_pearson(n: int, e: int, delta: float) -> float:
    """The exact ``(1 - delta)`` upper confidence bound of a binomial rate from ``e`` errors in
    ``n`` rows: ``beta.ppf(1 - delta, e + 1, n - e)`` (1 when ``e = n``). ``P(Binomial(n, eps)
    <= e) <= delta`` exactly when this bound is at most ``eps``."""
    if e >= n:
        return 1.0
    return float(beta_dist.ppf(1 - delta, e + 1, n - e))


def rows_needed_ltt(
    n: np.ndarray, e: np.ndarray, n_rows: int, eps: float, delta: float
) -> int | None:
    """An estimate of the certifying rows Learn-then-Test would need: for each candidate with
    empirical risk ``r_t = e_t / n_t < eps``, ``m_t = ceil(log(J/delta) / kl(r_t, eps))``
    answered rows (the Chernoff bound ``P(Binomial(m, eps) <= m r) <= exp(-m kl(r, eps))`` at
    the level ``delta / J`` of the fixed sequence; at ``r = 0`` it is :func:`min_answered`'s
    ``ceil(log(delta/J) / log(1 - eps))``) at the same coverage ``n_t / N``, hence ``ceil(m_t N
    / n_t)`` rows; the smallest over the candidates. ``J`` is the number of starts
    (:func:`sequence_starts`) at the estimate made with ``J = 1``. ``None`` when no
    candidate's risk is below ``eps`` (more rows at this accuracy never suffice); at least ``N +
    1`` (it is asked only when the ``N`` rows given did not suffice)."""
    has = n > 0
    r = np.where(has, e / np.maximum(n, 1), 1.0)
    ok = has & (r < eps)
    if not ok.any():
        return None
    rr, nn = r[ok], n[ok].astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        first = np.where(rr > 0, rr * np.log(rr / eps), 0.0)
    kl = first + (1 - rr) * np.log((1 - rr) / (1 - eps))

    def total(level: float) -> int:
        m = np.ceil(math.log(1 / level) / kl - 1e-9)
        return max(n_rows + 1, int(np.min(np.ceil(m * n_rows / nn - 1e-9))))

    starts, _ = sequence_starts(total(delta), eps, delta)
    return total(delta / starts.shape[0])


def rows_needed_crc(n: np.ndarray, e: np.ndarray, n_rows: int, eps: float) -> int | None:
    """The certifying rows conformal risk control would need to answer the most confident
    candidate: with ``a = e_1 / N`` its errors per row, ``(M a + 1) / (M + 1) <= eps`` holds
    from ``M = ceil((1 - eps) / (eps - a))``; ``None`` when ``a >= eps``."""
    if n.shape[0] == 0 or n[0] == 0:
        return None
    a = e[0] / n_rows
    if a >= eps:
        return None
    return max(n_rows + 1, math.ceil((1 - eps) / (eps - a) - 1e-9))
