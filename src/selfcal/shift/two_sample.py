"""The two two-sample tests behind :func:`selfcal.shift.check_splits`: one on the label
frequencies, one on the top-label confidence, each with its result dataclass.

**Label frequencies** (:func:`label_frequency_test`). The data are the ``2 x C`` table of
class counts ``a_c`` (validation, ``n_v`` rows) and ``b_c`` (test, ``n_t`` rows), ``K_c = a_c +
b_c``, ``N = n_v + n_t``. The statistic is the total variation distance between the two label
frequency vectors,

    TV = 1/2 sum_c |a_c / n_v - b_c / n_t| = S / (2 n_v n_t),   S = sum_c |K_c n_t - b_c N|,

an effect size in ``[0, 1]`` (0: the same frequencies; 1: no class in common). Under the null
hypothesis that the ``N`` rows are exchangeable -- the split a random partition of them -- the
test counts given both margins follow the multivariate hypergeometric distribution (``n_t``
draws without replacement from an urn of ``K_c`` balls of colour ``c``): the exact permutation
distribution of the table. ``R`` tables are drawn from it with
:meth:`numpy.random.Generator.multivariate_hypergeometric` (the ``"marginals"`` method, ``O(C)``
per table whatever ``N``), and

    p = (1 + #{r : S*_r >= S}) / (R + 1),

the Monte Carlo permutation p-value that is valid at any ``R`` (``P(p <= u) <= u`` under the
null; Phipson & Smyth 2010). ``S`` is an integer, so the comparison ``S* >= S`` has no float
ties to break. Classes absent from both splits are left out of the urn: they add 0 to every
``S``, so the p-value is the same with or without them (the test is over the classes that
occur). With one class present every table is the observed one and ``p = 1``; with two classes
the test is the permutation test of the difference of two proportions (the conditional
distribution of Fisher's exact test, ordered by ``|a/n_v - b/n_t|``).

**Top confidence** (:func:`top_confidence_test`). The two-sample Kolmogorov--Smirnov statistic
``D = sup_x |F_v(x) - F_t(x)|`` between the empirical distributions of ``max_k p_k`` of the
given (uncalibrated) scores, and its two-sided p-value from :func:`scipy.stats.ks_2samp`: the
exact null distribution when both splits have at most :data:`KS_EXACT_ROWS` rows, the
asymptotic (Kolmogorov) one above. Ties: ``D`` is computed exactly with ties (both empirical
distribution functions are evaluated at every pooled value, right-continuous), but the null
distribution is the one for continuous data; tied values (saturated confidences of 1.0, bf16
logits) can only make ``D``'s true permutation distribution smaller, so the p-value is then
conservative -- the level still holds, with less power. The result counts the tied rows.
The confidence is the top-label one of :class:`~selfcal.predictions.Predictions` (float64).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy.stats import ks_2samp

MAX_DRAW_ELEMENTS = 1 << 22
"""Permutation tables are drawn in chunks of at most this many counts (bounded memory)."""
KS_EXACT_ROWS = 10_000
"""Both splits at most this size: the KS p-value is exact; larger: asymptotic (scipy's own
``method="auto"`` rule, made explicit so the result can say which it used)."""


@dataclass(frozen=True)
class ClassDifference:
    """One class's share of the validation and of the test labels."""

    label: int
    val_share: float
    test_share: float

    @property
    def difference(self) -> float:
        """``test_share - val_share``."""
        return self.test_share - self.val_share

    def __repr__(self) -> str:
        return f"class {self.label}: {self.val_share:.1%} -> {self.test_share:.1%}"


@dataclass(frozen=True)
class LabelTest:
    """The permutation test of equal label frequencies (module docstring): the total variation
    distance, its p-value from ``resamples`` permutation tables, of which ``exceedances`` had a
    statistic at least as large, and each split's per-class counts."""

    total_variation: float
    p_value: float
    resamples: int
    exceedances: int
    val_counts: tuple[int, ...]
    test_counts: tuple[int, ...]

    @property
    def p_floor(self) -> float:
        """The smallest p-value ``resamples`` permutations can give, ``1 / (R + 1)``."""
        return 1.0 / (self.resamples + 1)

    def largest_differences(self, k: int = 3) -> tuple[ClassDifference, ...]:
        """The ``k`` classes whose shares differ most between the splits, largest first (ties
        by class index); classes with no difference are left out."""
        val, test = np.array(self.val_counts), np.array(self.test_counts)
        val_share, test_share = val / val.sum(), test / test.sum()
        gap = np.abs(test_share - val_share)
        order = np.argsort(-gap, kind="stable")[:k]
        return tuple(
            ClassDifference(int(c), float(val_share[c]), float(test_share[c]))
            for c in order
            if gap[c] > 0
        )

    def __repr__(self) -> str:
        return (
            f"LabelTest(total_variation={self.total_variation:.4g}, p_value={self.p_value:.4g}, "
            f"resamples={self.resamples}, classes={len(self.val_counts)})"
        )


@dataclass(frozen=True)
class ConfidenceTest:
    """The Kolmogorov--Smirnov test of equal top-confidence distributions (module docstring):
    ``ks`` is ``D``, ``method`` ``"exact"`` or ``"asymp"`` (the p-value's null distribution),
    ``tied_rows`` the pooled rows that repeat an earlier row's confidence (rows less distinct
    values; 0: no ties, the p-value is the one for continuous data; more: it is
    conservative), and each split's mean confidence."""

    ks: float
    p_value: float
    method: str
    tied_rows: int
    val_mean: float
    test_mean: float

    def __repr__(self) -> str:
        return (
            f"ConfidenceTest(ks={self.ks:.4g}, p_value={self.p_value:.4g}, "
            f"method={self.method!r}, tied_rows={self.tied_rows})"
        )


def class_counts(labels: np.ndarray, n_classes: int) -> np.ndarray:
    """``(C,)`` int64 count of each class in ``labels``."""
    return np.bincount(labels, minlength=n_classes).astype(np.int64)


def label_frequency_test(
    val_labels: np.ndarray,
    test_labels: np.ndarray,
    n_classes: int,
    *,
    resamples: int,
    seed: int,
) -> LabelTest:
    """The permutation test of equal label frequencies of two non-empty splits of int64
    labels in ``[0, n_classes)``, checked by the caller (module docstring)."""
    val, test = class_counts(val_labels, n_classes), class_counts(test_labels, n_classes)
    totals = val + test
    present = totals > 0
    observed = int(scaled_distance(totals[present], test[present], len(val_labels)))
    null = permutation_distances(
        totals[present], len(val_labels), len(test_labels), resamples, seed
    )
    exceedances = int(np.count_nonzero(null >= observed))
    return LabelTest(
        total_variation=observed / (2 * len(val_labels) * len(test_labels)),
        p_value=(1 + exceedances) / (resamples + 1),
        resamples=resamples,
        exceedances=exceedances,
        val_counts=tuple(int(x) for x in val),
        test_counts=tuple(int(x) for x in test),
    )


def scaled_distance(totals: np.ndarray, test: np.ndarray, n_val: int) -> np.ndarray:
    """``S = sum_c |K_c n_t - b_c N|`` (``2 n_v n_t TV``, an exact integer) of test counts
    ``test`` (``(C,)`` or ``(R, C)``) given the class totals ``K``."""
    n_test = int(totals.sum()) - n_val
    return np.abs(totals * n_test - test * (n_val + n_test)).sum(axis=-1)


def permutation_distances(
    totals: np.ndarray, n_val: int, n_test: int, resamples: int, seed: int
) -> np.ndarray:
    """``(R,)`` statistics ``S*`` of ``R`` tables drawn from the permutation distribution
    (multivariate hypergeometric test counts), in chunks of :data:`MAX_DRAW_ELEMENTS`; the same
    ``seed`` gives the same draws."""
    rng = np.random.default_rng(seed)
    chunk = max(1, MAX_DRAW_ELEMENTS // len(totals))
    out = np.empty(resamples, dtype=np.int64)
    for start in range(0, resamples, chunk):
        size = min(chunk, resamples - start)
        drawn = rng.multivariate_hypergeometric(totals, n_test, size=size)
        out[start : start + size] = scaled_distance(totals, drawn, n_val)
    return out


def top_confidence_test(val_confidence: np.ndarray, test_confidence: np.ndarray) -> ConfidenceTest:
    """The two-sided Kolmogorov--Smirnov test of two non-empty float64 confidence samples
    (module docstring); scipy's exact-to-asymptotic fallback, where it happens, is recorded
    in ``method``."""
    method = "exact" if max(len(val_confidence), len(test_confidence)) <= KS_EXACT_ROWS else "asymp"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = ks_2samp(val_confidence, test_confidence, method=method)
    if any("Switching to" in str(w.message) for w in caught):
        method = "asymp"
    pooled = np.concatenate([val_confidence, test_confidence])
    return ConfidenceTest(
        ks=float(result.statistic),
        p_value=float(result.pvalue),
        method=method,
        tied_rows=int(len(pooled) - len(np.unique(pooled))),
        val_mean=float(val_confidence.mean()),
        test_mean=float(test_confidence.mean()),
    )
