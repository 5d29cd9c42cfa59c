"""selfcal.shift.check_splits against independent implementations: scipy's permutation test
(exact enumeration and Monte Carlo), the exact hypergeometric distribution and the chi-square
test of a 2 x 2 table, scipy's KS test, and MAPIE 1.6's permutation exchangeability test. A
Monte Carlo p-value from ``R`` permutations has standard error ``sqrt(p (1 - p) / R)``; two
independent ones differ by at most ``Z`` times ``sqrt(2 p (1 - p) / R)`` but for a ``Z``-sigma
event."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from selfcal.predictions import Predictions
from selfcal.shift import check_splits

pytestmark = pytest.mark.reference

Z = 4.0


def total_variation(x: np.ndarray, y: np.ndarray, n_classes: int, axis: int = -1) -> np.ndarray:
    """TV between the label frequencies of ``x`` and ``y`` along ``axis`` (vectorised, as
    scipy's permutation test calls it)."""
    x, y = np.moveaxis(x, axis, -1), np.moveaxis(y, axis, -1)
    classes = np.arange(n_classes)
    fx = (x[..., None] == classes).mean(-2)
    fy = (y[..., None] == classes).mean(-2)
    return 0.5 * np.abs(fx - fy).sum(-1)


def ks_statistic(x: np.ndarray, y: np.ndarray) -> float:
    return float(stats.ks_2samp(x, y).statistic)


def label_p(yv: np.ndarray, yt: np.ndarray, n_classes: int, resamples: int, seed: int = 0):
    """Our label test's p-value (scores irrelevant to it: uniform logits)."""
    check = check_splits(
        val_logits=np.zeros((len(yv), n_classes)),
        val_labels=yv,
        test_logits=np.zeros((len(yt), n_classes)),
        test_labels=yt,
        resamples=resamples,
        seed=seed,
    )
    return check.label_test.p_value


def mc_sd(p: float, resamples: int, independent_estimates: int = 1) -> float:
    return float(np.sqrt(independent_estimates * p * (1 - p) / resamples))


# --------------------------------------------------------------------------- scipy
def test_label_p_value_matches_scipys_exact_permutation_test() -> None:
    """6 + 6 rows, 3 classes: scipy enumerates all C(12, 6) = 924 splits (exact p); ours
    estimates it from 19,999 multivariate hypergeometric tables."""
    yv = np.array([0, 0, 0, 0, 1, 2])
    yt = np.array([1, 1, 2, 2, 2, 0])
    exact = stats.permutation_test(
        (yv, yt),
        lambda x, y, axis: total_variation(x, y, 3, axis),
        permutation_type="independent",
        alternative="greater",
        n_resamples=np.inf,
        vectorized=True,
    ).pvalue
    ours = label_p(yv, yt, 3, 19_999)
    assert 0.02 < exact < 0.5
    assert abs(ours - exact) < Z * mc_sd(exact, 19_999) + 1 / 20_000


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_label_p_value_matches_scipys_monte_carlo_permutation_test(seed: int) -> None:
    """150 + 100 rows over 6 classes with a mild shift: the two Monte Carlo p-values of the
    same permutation test (same TV statistic) agree within their joint sampling error."""
    rng = np.random.default_rng(seed)
    yv = rng.choice(6, 150, p=[0.25, 0.2, 0.2, 0.15, 0.1, 0.1])
    yt = rng.choice(6, 100, p=[0.15, 0.2, 0.2, 0.15, 0.15, 0.15])
    reference = stats.permutation_test(
        (yv, yt),
        lambda x, y, axis: total_variation(x, y, 6, axis),
        permutation_type="independent",
        alternative="greater",
        n_resamples=9999,
        vectorized=True,
        rng=np.random.default_rng(100 + seed),
    ).pvalue
    ours = label_p(yv, yt, 6, 9999, seed)
    assert abs(ours - reference) < Z * mc_sd(reference, 9999, 2) + 1 / 10_000


def test_two_class_label_p_value_matches_the_exact_hypergeometric_sum() -> None:
    """With two classes the permutation distribution is the hypergeometric law of the test
    count of class 1; the exact p-value is the mass of the tables at least as far from the
    expected count (the statistic is ``|K_1 n_t - b N|``)."""
    rng = np.random.default_rng(3)
    yv, yt = (rng.random(200) < 0.3).astype(int), (rng.random(150) < 0.4).astype(int)
    n_v, n_t = len(yv), len(yt)
    k1, b1, n = int(yv.sum() + yt.sum()), int(yt.sum()), n_v + n_t
    support = np.arange(max(0, k1 - n_v), min(k1, n_t) + 1)
    far = np.abs(k1 * n_t - support * n) >= abs(k1 * n_t - b1 * n)
    exact = float(stats.hypergeom.pmf(support[far], n, k1, n_t).sum())
    ours = label_p(yv, yt, 2, 19_999)
    assert 0.005 < exact < 0.3
    assert abs(ours - exact) < Z * mc_sd(exact, 19_999) + 1 / 20_000


def test_two_class_label_p_value_approaches_the_chi_square_test() -> None:
    """Large counts, 2 x 2: TV is a monotone function of Pearson's chi-square statistic given
    the margins, so the permutation p-value tends to chi2_contingency's (no continuity
    correction). With more classes TV and chi-square are different statistics, whose p-values
    need not agree, so only the 2 x 2 case is compared."""
    rng = np.random.default_rng(4)
    yv, yt = (rng.random(20_000) < 0.30).astype(int), (rng.random(20_000) < 0.31).astype(int)
    table = np.array([np.bincount(yv, minlength=2), np.bincount(yt, minlength=2)])
    asymptotic = stats.chi2_contingency(table, correction=False).pvalue
    ours = label_p(yv, yt, 2, 9999)
    assert 0.005 < asymptotic < 0.3
    assert abs(ours - asymptotic) < Z * mc_sd(asymptotic, 9999) + 0.05 * asymptotic


def test_confidence_test_is_scipys_ks_2samp() -> None:
    rng = np.random.default_rng(5)
    zv, zt = rng.normal(size=(300, 4)), 1.2 * rng.normal(size=(200, 4))
    yv, yt = rng.integers(0, 4, 300), rng.integers(0, 4, 200)
    check = check_splits(val_logits=zv, val_labels=yv, test_logits=zt, test_labels=yt)
    cv = Predictions.from_logits(zv).confidence.numpy()
    ct = Predictions.from_logits(zt).confidence.numpy()
    reference = stats.ks_2samp(cv, ct, method="exact")
    assert check.confidence_test.ks == reference.statistic
    assert check.confidence_test.p_value == reference.pvalue
    assert check.confidence_test.method == "exact"


# --------------------------------------------------------------------------- MAPIE
def mapie_p_value(sequence: np.ndarray, statistic, resamples: int, seed: int) -> float:
    """MAPIE 1.6's ``PValuePermutationTest`` on a given score ``sequence`` with ``statistic``:
    its non-conformity scores are replaced by the sequence (no estimator is fitted), the rest
    -- uniform permutations of the whole sequence, ``p = (1 + #{T* >= T}) / (R + 1)`` -- is
    MAPIE's own."""
    permutations = pytest.importorskip("mapie.exchangeability_testing.permutations")

    class GivenScores(permutations.PValuePermutationTest):
        def _compute_non_conformity_scores(self, X, y):
            return np.asarray(X, dtype=float)

    test = GivenScores(test_level=0.005, random_state=seed, num_permutations=resamples, warn=False)
    test.test_statistic = statistic
    return float(test.run(sequence, np.zeros(len(sequence))).p_values[-1])


def test_label_p_value_agrees_with_mapies_permutation_test() -> None:
    """The concatenated [val; test] label sequence with TV at the fixed split as MAPIE's
    ``test_statistic``: MAPIE permutes the sequence, we draw the tables those permutations
    induce -- the same test, two Monte Carlo estimates."""
    rng = np.random.default_rng(6)
    yv = rng.choice(4, 160, p=[0.4, 0.3, 0.2, 0.1])
    yt = rng.choice(4, 120, p=[0.3, 0.3, 0.25, 0.15])
    sequence = np.concatenate([yv, yt])

    def tv_at_split(s: np.ndarray) -> float:
        return float(total_variation(s[:160], s[160:], 4))

    theirs = mapie_p_value(sequence, tv_at_split, 1999, 0)
    ours = label_p(yv, yt, 4, 1999)
    assert 0.01 < theirs < 0.5
    assert abs(ours - theirs) < Z * mc_sd(theirs, 1999, 2) + 1 / 2000


def test_confidence_p_value_agrees_with_mapies_permutation_test() -> None:
    """The concatenated top-confidence sequence with the KS statistic at the fixed split:
    MAPIE's permutation p-value estimates the exact permutation p-value of D, which without
    ties is the exact null distribution scipy's ``ks_2samp`` computes."""
    rng = np.random.default_rng(7)
    zv, zt = rng.normal(size=(150, 3)), 1.25 * rng.normal(size=(100, 3))
    check = check_splits(
        val_logits=zv,
        val_labels=rng.integers(0, 3, 150),
        test_logits=zt,
        test_labels=rng.integers(0, 3, 100),
    )
    cv = Predictions.from_logits(zv).confidence.numpy()
    ct = Predictions.from_logits(zt).confidence.numpy()
    sequence = np.concatenate([cv, ct])
    theirs = mapie_p_value(sequence, lambda s: ks_statistic(s[:150], s[150:]), 1999, 1)
    ours = check.confidence_test.p_value
    assert check.confidence_test.tied_rows == 0 and 0.01 < ours < 0.5
    assert abs(ours - theirs) < Z * mc_sd(ours, 1999) + 1 / 2000


def test_mapies_default_statistic_tests_something_else() -> None:
    """MAPIE's default statistic, ``MaxSplitMeanDifferenceTestStatistic``, is a CUSUM
    change-point statistic: the largest ``sqrt(k (n - k) / n) |mean(s[:k]) - mean(s[k:])|``
    over every split point ``k`` of the ordered sequence. It asks whether the *mean* of a
    score changes *somewhere along the order*; ours fixes the split at the validation / test
    boundary and compares the whole label distribution. On class indices a mean is arbitrary:
    a test split of classes 0 and 9 only, whose mean index equals a uniform validation split's,
    is invisible to the default statistic and flagged by ours."""
    rng = np.random.default_rng(8)
    yv = rng.integers(0, 10, 200)
    yt = rng.choice([0, 9], 100)
    sequence = np.concatenate([yv, yt]).astype(float)
    permutations = pytest.importorskip("mapie.exchangeability_testing.permutations")
    default = permutations.MaxSplitMeanDifferenceTestStatistic()
    theirs = mapie_p_value(sequence, default, 199, 2)
    assert theirs > 0.05
    assert label_p(yv, yt, 10, 9999) == 1 / 10_000
