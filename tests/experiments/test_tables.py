"""Paired differences over seeds (:func:`selfcal.experiments.tables.paired`): the t-interval and
the p-value of the same paired t-test, checked against scipy's ``ttest_1samp``; and the
Benjamini-Hochberg adjustment of the benchmark's shift comparisons."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from selfcal.experiments.tables import paired
from selfcal.studies.benchmark.shift_report import adjusted


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_p_value_and_the_interval_are_scipys_paired_t_test(seed):
    rng = np.random.default_rng(seed)
    a = dict(enumerate(rng.normal(0.3, 1.0, 10)))
    b = dict(enumerate(rng.normal(0.0, 1.0, 10)))
    diff = paired(a, b)
    d = np.array([a[s] - b[s] for s in range(10)])
    test = stats.ttest_1samp(d, 0.0)
    assert diff.p_value() == pytest.approx(test.pvalue, rel=1e-10)
    low, high = test.confidence_interval(0.95)
    assert (diff.low, diff.high) == pytest.approx((low, high), rel=1e-10)
    # the interval excludes 0 exactly when p < 0.05
    assert (diff.verdict() != "tied") == (diff.p_value() < 0.05)


def test_p_values_of_degenerate_differences():
    assert math.isnan(paired({0: 1.0}, {0: 0.0}).p_value())  # one seed
    assert paired({0: 1.0, 1: 1.0}, {0: 0.0, 1: 0.0}).p_value() == 0.0  # constant, nonzero
    assert paired({0: 1.0, 1: 2.0}, {0: 1.0, 1: 2.0}).p_value() == 1.0  # identical


def test_benjamini_hochberg_keeps_nan_and_matches_the_definition():
    p = [0.01, math.nan, 0.04, 0.03, 0.5]
    q = adjusted(p)
    assert math.isnan(q[1])
    finite = [0.01, 0.04, 0.03, 0.5]
    m = len(finite)
    order = np.argsort(finite)
    by_hand = np.minimum.accumulate(
        [min(1.0, finite[i] * m / (r + 1)) for r, i in reversed(list(enumerate(order)))]
    )[::-1]
    expected = np.empty(m)
    expected[order] = by_hand
    np.testing.assert_allclose([q[0], q[2], q[3], q[4]], expected, rtol=1e-12)
