"""The abstention rules of :mod:`selfcal.abstention`, certified on many re-splits of one
population at once, and each certified threshold read on the population itself.

**The population.** ``N`` rows with a fixed confidence ``c_i`` and correctness; its distinct
confidences ``v_1 > ... > v_M`` (the levels) with, at each level, ``A_m`` rows answered at
threshold ``v_m`` (``c >= v_m``) and ``E_m`` of them wrong. The empirical distribution of the
rows is the true distribution of the experiment, so a threshold's exact risk is read off
these sums: selective risk ``E_m / A_m``, coverage ``A_m / N``, joint risk
``P(answered and wrong) = E_m / N``.

**A re-split.** ``"iid"``: ``n`` certifying rows drawn i.i.d. (with replacement) from the
population -- exactly the draw Learn-then-Test's promise is about, and the risk read is the
population's (no test-set noise). ``"split"``: the rows split in halves without replacement,
the first certifies, the second is the test set whose answered rows' error rate is the risk
read (the issue's protocol: the test half's own sampling noise adds to every rule's rate).

**Vectorised.** A re-split's certifying rows are counts per level; ``n_t`` and ``e_t`` at
every level are cumulative sums of those counts (a row of an ``(R, M)`` array), a candidate
threshold is a level with at least one certifying row, and each rule is a comparison along
the row: the LTT binomial test ``P(Binomial(n_t, eps) <= e_t) <= level`` is ``e_t <=
k(n_t)`` with ``k(n)`` the largest such count, tabulated once per ``(n, eps, level)`` with
the same :func:`scipy.stats.binom.cdf` the rule uses. The thresholds equal
:func:`selfcal.abstention.certify_threshold`'s on every re-split (a test holds them equal).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import binom

from selfcal.abstention import _procedures as proc
from selfcal.abstention.certificate import ACCURACY_TOLERANCE

MAPIE_GRID = np.linspace(0, 0.99, 100)
"""MAPIE 1.6's default thresholds of ``MultiClassificationLTTController``."""
KINDS = ("iid", "split")
"""The re-split kinds (module doc)."""


@dataclass(frozen=True)
class Population:
    """A population's levels (decreasing), each row's level, and at each level the rows
    answered and wrong at that threshold (cumulative, ``A`` and ``E`` of the module doc)."""

    levels: np.ndarray
    level_of_row: np.ndarray
    wrong: np.ndarray
    answered: np.ndarray
    errors: np.ndarray

    @property
    def n_rows(self) -> int:
        return int(self.level_of_row.shape[0])


def population(confidence: np.ndarray, correct: np.ndarray) -> Population:
    """The :class:`Population` of ``confidence`` ``(N,)`` float64 and ``correct`` ``(N,)``
    bool; ties are one level (as :func:`selfcal.metrics.selective.tie_groups`)."""
    neg, level_of_row = np.unique(-np.asarray(confidence, dtype=np.float64), return_inverse=True)
    wrong = ~np.asarray(correct, dtype=bool)
    m = neg.shape[0]
    answered = np.cumsum(np.bincount(level_of_row, minlength=m))
    errors = np.cumsum(np.bincount(level_of_row, weights=wrong, minlength=m)).round()
    return Population(-neg, level_of_row, wrong, answered, errors.astype(np.int64))


@dataclass(frozen=True)
class Draws:
    """``R`` re-splits: certifying counts per level ``n``, ``e`` (cumulative, ``(R, M)``),
    which levels hold a certifying row, the certifying rows per re-split, and for ``"split"``
    the test half's cumulative answered / wrong counts and its size."""

    n: np.ndarray
    e: np.ndarray
    present: np.ndarray
    n_rows: int
    test_n: np.ndarray | None = None
    test_e: np.ndarray | None = None
    test_rows: int = 0


def _per_level(pop: Population, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Counts and errors per level of each re-split's ``rows`` ``(R, n)``: ``(R, M)`` each."""
    r, m = rows.shape[0], pop.levels.shape[0]
    flat = (np.arange(r)[:, None] * m + pop.level_of_row[rows]).ravel()
    counts = np.bincount(flat, minlength=r * m).reshape(r, m)
    wrong = np.bincount(flat, weights=pop.wrong[rows].ravel(), minlength=r * m).reshape(r, m)
    return counts, wrong.round().astype(np.int64)


def draw(pop: Population, kind: str, seeds: np.ndarray) -> Draws:
    """The re-splits of ``kind`` (module doc), one per seed (a re-split's rows depend on its
    seed only, so every calibrator of one set sees the same rows: the comparisons are paired).
    Both kinds certify on ``n = N // 2`` rows."""
    half = pop.n_rows // 2
    if kind == "iid":
        rows = np.stack(
            [np.random.default_rng(int(s)).integers(0, pop.n_rows, half) for s in seeds]
        )
        counts, wrong = _per_level(pop, rows)
        return Draws(np.cumsum(counts, 1), np.cumsum(wrong, 1), counts > 0, half)
    if kind != "split":
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    perms = np.stack([np.random.default_rng(int(s)).permutation(pop.n_rows) for s in seeds])
    counts, wrong = _per_level(pop, perms[:, :half])
    t_counts, t_wrong = _per_level(pop, perms[:, half:])
    return Draws(
        np.cumsum(counts, 1),
        np.cumsum(wrong, 1),
        counts > 0,
        half,
        np.cumsum(t_counts, 1),
        np.cumsum(t_wrong, 1),
        pop.n_rows - half,
    )


def _last(ok: np.ndarray) -> np.ndarray:
    """Per row, the last column where ``ok`` holds (the lowest threshold), else -1."""
    m = ok.shape[1]
    return np.where(ok.any(1), m - 1 - np.argmax(ok[:, ::-1], axis=1), -1)


def empirical(d: Draws, eps: float) -> np.ndarray:
    """The empirical rule's level per re-split (-1: abstain on everything)."""
    accuracy = 1 - d.e / np.maximum(d.n, 1)
    return _last(d.present & (d.n > 0) & (accuracy >= (1 - eps) - ACCURACY_TOLERANCE))


def crc(d: Draws, eps: float) -> np.ndarray:
    """Conformal risk control's level per re-split: the lowest with ``(e + 1) / (n + 1) <= eps``
    (``n`` the certifying rows)."""
    return _last(d.present & (d.n > 0) & ((d.e + 1) / (d.n_rows + 1) <= eps))


def max_errors(n_max: int, eps: float, level: float) -> np.ndarray:
    """``k[n]`` for ``n = 0 .. n_max``: the most errors among ``n`` answered rows whose binomial
    p-value ``binom.cdf(k, n, eps)`` is at most ``level`` (-1: none, and always at ``n = 0``,
    whose p-value is 1)."""
    n = np.arange(n_max + 1, dtype=np.float64)
    guess = binom.ppf(level, n, eps)
    window = guess[:, None] + np.arange(-3, 3)[None, :]
    ok = (window >= 0) & (binom.cdf(window, n[:, None], eps) <= level)
    k = np.where(ok.any(1), np.max(np.where(ok, window, -1), axis=1), -1).astype(np.int64)
    past = binom.cdf(k + 1, n, eps)
    if not np.all((past > level) | (k + 1 > n)):  # the window must hold the last such count
        raise ValueError("max_errors: the binomial quantile window missed the last count")
    k[0] = -1
    return k


def ltt(d: Draws, eps: float, delta: float) -> np.ndarray:
    """Learn-then-Test's level per re-split: the multi-start fixed sequence of
    :func:`selfcal.abstention._procedures.fixed_sequence` on the exact binomial p-values.
    A level without a certifying row repeats the counts of the one above it, so it fails
    exactly when that one does; a sequence that stops at column ``s`` rejects every
    candidate above it, the lowest being the last present column before ``s``."""
    starts, level = proc.sequence_starts(d.n_rows, eps, delta)
    k = max_errors(d.n_rows, eps, level)
    fails = d.e > k[d.n]
    r, m = fails.shape
    cols = np.arange(m)
    next_fail = np.minimum.accumulate(np.where(fails, cols, m)[:, ::-1], axis=1)[:, ::-1]
    next_fail = np.concatenate([next_fail, np.full((r, 1), m)], axis=1)
    last_present = np.maximum.accumulate(np.where(d.present, cols, -1), axis=1)
    best = np.full(r, -1)
    for start in starts:
        s = (d.n < start).sum(1)
        stop = next_fail[np.arange(r), s]
        found = (s < m) & (stop > s)
        lowest = last_present[np.arange(r), np.clip(stop - 1, 0, m - 1)]
        best = np.where(found, np.maximum(best, lowest), best)
    return best


def grid_columns(pop: Population, grid: np.ndarray) -> np.ndarray:
    """For each grid threshold (decreasing order), the last level ``>= g`` (-1: none)."""
    return (pop.levels[None, :] >= grid[:, None]).sum(1) - 1


def ltt_grid(pop: Population, d: Draws, eps: float, delta: float) -> np.ndarray:
    """Learn-then-Test in MAPIE's regime: :data:`MAPIE_GRID`, Holm's procedure at ``delta``,
    the Hoeffding-Bentkus p-value (:func:`selfcal.abstention._procedures.p_values`); the
    lowest rejected grid threshold answering a certifying row, as the level it answers like
    (-1: none). Needs no monotonicity of the error rate in the confidence."""
    grid = np.sort(MAPIE_GRID)[::-1]
    cols = grid_columns(pop, grid)
    safe = np.clip(cols, 0, None)
    n = np.where(cols[None, :] >= 0, d.n[:, safe], 0)
    e = np.where(cols[None, :] >= 0, d.e[:, safe], 0)
    p = proc.p_values(n.ravel(), e.ravel(), eps, "hoeffding_bentkus").reshape(n.shape)
    g = grid.shape[0]
    order = np.argsort(p, axis=1, kind="stable")
    fails = np.take_along_axis(p, order, 1) > delta / (g - np.arange(g))[None, :]
    stop = np.where(fails.any(1), np.argmax(fails, axis=1), g)
    rank = np.argsort(order, axis=1)
    rejected = rank < stop[:, None]
    best = _last(rejected & (n > 0))
    return np.where(best >= 0, cols[np.clip(best, 0, None)], -1)


def read(pop: Population, d: Draws, level: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """At each re-split's level (-1: nothing answered): the selective risk, the coverage and
    the joint risk ``P(answered and wrong)`` -- the population's exact values for ``"iid"``,
    the test half's for ``"split"``. With nothing answered the risks are 0."""
    safe = np.clip(level, 0, None)
    if d.test_n is None:
        answered = np.where(level >= 0, pop.answered[safe], 0).astype(np.float64)
        errors = np.where(level >= 0, pop.errors[safe], 0).astype(np.float64)
        size = float(pop.n_rows)
    else:
        assert d.test_e is not None
        rows = np.arange(level.shape[0])
        answered = np.where(level >= 0, d.test_n[rows, safe], 0).astype(np.float64)
        errors = np.where(level >= 0, d.test_e[rows, safe], 0).astype(np.float64)
        size = float(d.test_rows)
    risk = errors / np.maximum(answered, 1)
    return risk, answered / size, errors / size


def thresholds(pop: Population, level: np.ndarray) -> np.ndarray:
    """The confidence of each level (NaN where nothing is certified)."""
    return np.where(level >= 0, pop.levels[np.clip(level, 0, None)], np.nan)
