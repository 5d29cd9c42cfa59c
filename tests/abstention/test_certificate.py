"""certify_threshold and Certificate on hand-made cases: each rule's threshold, counts and bound,
ties, all-correct and all-wrong rows, nothing certifiable with the rows it would need, the
family-wise procedures and p-values, the JSON round trip and the one-line errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from selfcal.abstention import Certificate, certify_threshold
from selfcal.abstention import _procedures as proc

# rows in decreasing confidence: two tied at 0.9 (one wrong), 0.8, two tied at 0.7, 0.6 (wrong)
CONF = np.array([0.7, 0.9, 0.6, 0.9, 0.8, 0.7])
RIGHT = np.array([1, 0, 0, 1, 1, 1])


def test_candidates_are_tie_groups_answered_together():
    thresholds, n, e = proc.candidates(CONF, RIGHT.astype(bool), None)
    np.testing.assert_array_equal(thresholds, [0.9, 0.8, 0.7, 0.6])
    np.testing.assert_array_equal(n, [2, 3, 5, 6])
    np.testing.assert_array_equal(e, [1, 1, 1, 2])
    # a grid counts c >= t: 0.75 answers the three rows >= 0.8; 0.95 none
    thresholds, n, e = proc.candidates(CONF, RIGHT.astype(bool), np.array([0.75, 0.95, 0.7]))
    np.testing.assert_array_equal(thresholds, [0.95, 0.75, 0.7])
    np.testing.assert_array_equal(n, [0, 3, 5])
    np.testing.assert_array_equal(e, [0, 1, 1])


def test_empirical_rule_by_hand():
    # selective accuracy 0.5, 0.667, 0.8, 0.667: the smallest threshold reaching 0.75 is 0.7
    cert = certify_threshold(CONF, RIGHT, target_risk=0.25, rule="empirical")
    assert (cert.threshold, cert.n_answered, cert.errors) == (0.7, 5, 1)
    assert cert.delta is None and cert.bound is None and cert.rows_needed is None
    np.testing.assert_array_equal(cert.abstain(CONF), [False, False, True, False, False, False])
    none = certify_threshold(CONF, RIGHT, target_risk=0.1, rule="empirical")
    assert none.threshold is None and none.rows_needed is None
    assert none.abstain(CONF).all()


def test_crc_by_hand():
    # (e_t + 1) / (N + 1) = 2/7 for the candidates 0.9, 0.8, 0.7; 3/7 at 0.6
    cert = certify_threshold(CONF, RIGHT, target_risk=0.3, rule="crc")
    assert (cert.threshold, cert.n_answered, cert.errors) == (0.7, 5, 1)
    assert cert.bound == pytest.approx(2 / 7, abs=0) and cert.delta is None
    # at eps = 0.2 even the top group (one error) fails: (M/6 + 1) / (M + 1) <= 0.2 from M = 24
    none = certify_threshold(CONF, RIGHT, target_risk=0.2, rule="crc")
    assert none.threshold is None and none.bound is None and none.rows_needed == 24
    assert (24 / 6 + 1) / 25 <= 0.2 < (23 / 6 + 1) / 24


def test_ltt_all_correct_answers_every_row_with_the_clopper_pearson_bound():
    conf = np.linspace(0.5, 1.0, 100)
    cert = certify_threshold(conf, np.ones(100, bool), target_risk=0.1, delta=0.05)
    assert (cert.threshold, cert.n_answered, cert.errors) == (0.5, 100, 0)
    # with no error the exact bound solves (1 - u)^n = delta
    assert cert.bound == pytest.approx(1 - 0.05 ** (1 / 100), rel=1e-12)
    assert cert.bound <= 0.1 and cert.rows_needed is None


def test_ltt_all_wrong_certifies_nothing_and_no_row_count_helps():
    cert = certify_threshold(np.linspace(0.5, 1, 50), np.zeros(50), target_risk=0.1)
    assert cert.threshold is None and cert.n_answered == 0 and cert.rows_needed is None
    assert "no confidence level observed is accurate enough" in cert.describe()


def test_ltt_too_few_rows_says_how_many_are_needed():
    # 20 right rows: 0.9^20 > 0.05, and ceil(log 0.05 / log 0.9) = 29 rows would do
    cert = certify_threshold(np.linspace(0.5, 1, 20), np.ones(20), target_risk=0.1, delta=0.05)
    assert cert.threshold is None and cert.rows_needed == 29
    assert proc.min_answered(0.1, 0.05) == 29 == math.ceil(math.log(0.05) / math.log(0.9))
    assert 0.9**29 <= 0.05 < 0.9**28
    assert "about 29 rows" in cert.describe()
    # with errors the estimate is ceil(m N / n_t), m from the Chernoff bound at r_t = e_t / n_t
    conf, right = np.linspace(0.5, 1, 40), np.ones(40, bool)
    right[:20] = False  # the 20 least confident rows wrong: r = 0 on the top 20
    cert = certify_threshold(conf, right, target_risk=0.1, delta=0.05)
    assert cert.rows_needed == 29 * 2  # 29 answered rows at coverage 1/2


def test_rows_needed_counts_the_starts_of_the_fixed_sequence_and_is_then_enough():
    # a quarter right (the most confident), eps = 0.01: with one start 4 * 299 = 1196 rows,
    # where the sequence has two starts at delta / 2: n1 = 368 right rows, 4 * 368 = 1472
    def quarter_right(n: int) -> tuple[np.ndarray, np.ndarray]:
        return np.linspace(1, 0.5, n), np.arange(n) < n // 4

    cert = certify_threshold(*quarter_right(200), target_risk=0.01, delta=0.05)
    assert cert.threshold is None and cert.rows_needed == 4 * 368
    assert proc.min_answered(0.01, 0.025) == 368
    enough = certify_threshold(*quarter_right(1472), target_risk=0.01, delta=0.05)
    assert enough.n_answered == 368 and enough.errors == 0
    short = certify_threshold(*quarter_right(1471), target_risk=0.01, delta=0.05)
    assert short.threshold is None


def test_ltt_threshold_is_the_lowest_rejected_and_ties_stay_together():
    rng = np.random.default_rng(3)
    conf = np.round(rng.uniform(0.5, 1, 3000), 2)  # many ties
    right = rng.uniform(size=3000) < conf
    cert = certify_threshold(conf, right, target_risk=0.05, delta=0.1)
    assert cert.threshold is not None
    answered = conf >= cert.threshold
    assert cert.n_answered == answered.sum() and cert.errors == (~right[answered]).sum()
    assert cert.bound <= 0.05
    # every candidate from the start down to the threshold has p <= delta / J
    thresholds, n, e = proc.candidates(conf, right, None)
    p = proc.p_values(n, e, 0.05, "binomial")
    starts, level = proc.sequence_starts(3000, 0.05, 0.1)
    g = int(np.flatnonzero(thresholds == cert.threshold)[0])
    assert (p[g] <= level) and (g + 1 == len(p) or p[g + 1] > level)


def test_sequence_starts():
    # n0 = 59 at (0.05, 0.05): N = 100 one start at n0; N = 5000 three starts at delta / 3
    starts, level = proc.sequence_starts(100, 0.05, 0.05)
    assert starts.tolist() == [59] and level == 0.05
    starts, level = proc.sequence_starts(5000, 0.05, 0.05)
    n1 = math.ceil(math.log(0.05 / 3) / math.log(0.95))
    assert starts.tolist() == [n1, 4 * n1, 16 * n1] and level == 0.05 / 3


def test_fixed_sequence_stops_at_the_first_failure_of_each_start():
    p = np.array([0.9, 0.01, 0.015, 0.5, 0.01, 0.01, 0.9, 0.01])
    n = np.array([1, 30, 40, 50, 120, 130, 140, 500])
    # N = 500, eps = 0.1, delta = 0.05: n0 = 29 and 29 * 16 <= 500, so J = 3 at level 0.05/3;
    # n1 = ceil(log(0.05/3) / log(0.9)) = 39: starts 39 (index 2, stops at p 0.5 on index 3),
    # 156 (index 7) and 624 (no candidate)
    starts, level = proc.sequence_starts(500, 0.1, 0.05)
    assert starts.tolist() == [39, 156, 624] and level == 0.05 / 3
    got = proc.fixed_sequence(p, n, 500, 0.1, 0.05)
    np.testing.assert_array_equal(np.flatnonzero(got), [2, 7])
    p[2] = 0.02  # above 0.05 / 3: the first sequence stops at once
    np.testing.assert_array_equal(np.flatnonzero(proc.fixed_sequence(p, n, 500, 0.1, 0.05)), [7])


def test_holm_and_bonferroni_by_hand():
    p = np.array([0.01, 0.012, 0.02, 0.3])
    np.testing.assert_array_equal(proc.bonferroni(p, 0.05), [True, True, False, False])
    np.testing.assert_array_equal(proc.holm(p, 0.05), [True, True, True, False])
    p = np.array([0.01, 0.04, 0.03, 0.005])  # 0.03 > 0.05 / 2 stops Holm
    np.testing.assert_array_equal(proc.holm(p, 0.05), [True, False, False, True])


def test_hoeffding_bentkus_is_the_binomial_tail_except_where_float_rounding_adds_an_error():
    n = np.repeat(np.arange(1, 200), np.arange(2, 201))
    e = np.concatenate([np.arange(k + 1) for k in range(1, 200)])
    exact = proc.p_values(n, e, 0.1, "binomial")
    hb = proc.p_values(n, e, 0.1, "hoeffding_bentkus")
    rounded = np.ceil(n * (e / n)) > e
    assert rounded.any()
    # elsewhere equal up to the last bits (the Chernoff term may win the min by an ulp)
    np.testing.assert_allclose(hb[~rounded], exact[~rounded], rtol=1e-13, atol=0)
    np.testing.assert_array_equal(hb[rounded], np.minimum(binom.cdf(e + 1, n, 0.1), hb)[rounded])
    assert (hb[rounded] >= exact[rounded]).all()
    small = rounded & (exact < 0.5)
    assert small.any() and (hb[small] > 1.01 * exact[small]).all()
    # the first such pair: 7 errors in 25 rows, 25 * (7 / 25) = 7.000000000000001
    assert 25 * (7 / 25) > 7
    one = proc.p_values(np.array([25]), np.array([7]), 0.3, "hoeffding_bentkus")[0]
    assert one == pytest.approx(binom.cdf(8, 25, 0.3), rel=1e-12) and one > binom.cdf(7, 25, 0.3)
    np.testing.assert_array_equal(exact, binom.cdf(e, n, 0.1))
    # no row answered: p = 1 under both
    assert proc.p_values(np.array([0]), np.array([0]), 0.1, "hoeffding_bentkus")[0] == 1


def test_json_round_trip_and_checks():
    cert = certify_threshold(CONF, RIGHT, target_risk=0.3, rule="crc")
    assert Certificate.from_json(cert.to_json()) == cert
    ltt = certify_threshold(np.linspace(0.5, 1, 20), np.ones(20), target_risk=0.1)
    assert Certificate.from_json(ltt.to_json()) == ltt
    bad = [
        ({"rule": "magic"}, "certificate rule must be one of"),
        ({"delta": None}, "certificate delta must be a finite number"),
        ({"n_answered": 21}, "errors <= n_answered <= n_rows"),
        ({"n_answered": 7}, "a certificate without a threshold answers no row"),
        ({"threshold": float("nan")}, "certificate threshold must be a finite number"),
        ({"bound": 1.5}, "certificate bound must be"),
        ({"extra": 1}, "unknown field"),
        ({"group": ""}, "certificate group must be a non-empty string"),
    ]
    base = ltt.to_json() | {"rule": "ltt"}
    for change, message in bad:
        with pytest.raises(ValueError, match=message) as err:
            Certificate.from_json(base | change)
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="certificate delta must be None"):
        Certificate.from_json(cert.to_json() | {"delta": 0.1})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target_risk": 0}, "target_risk must be a finite number in (0, 1)"),
        ({"target_risk": 1.0}, "target_risk must be a finite number in (0, 1)"),
        ({"delta": 1}, "delta must be a finite number in (0, 1)"),
        ({"rule": "lt"}, "rule must be one of ltt, crc, empirical"),
        ({"fwer": "holm"}, "fwer='holm' corrects over a fixed family of thresholds: pass grid="),
        ({"fwer": "hochberg"}, "fwer must be one of"),
        ({"p_value": "exact"}, "p_value must be one of"),
        ({"rule": "crc", "grid": [0.5]}, "options of rule 'ltt'"),
        ({"grid": [0.5, 0.5]}, "grid must hold distinct thresholds"),
        ({"grid": [[0.5]]}, "grid must be a non-empty 1-D array"),
        ({"grid": []}, "grid must be a non-empty 1-D array"),
        ({"confidence": [0.5, np.nan]}, "confidence must hold finite numbers"),
        ({"confidence": [[0.5, 0.6]]}, "confidence must be a 1-D"),
        ({"correct": [1, 0, 1]}, "correct must be a 1-D array of 2 values"),
        ({"correct": [1, 2]}, "correct must hold booleans or the numbers 0 and 1"),
        ({"confidence": [], "correct": []}, "at least one row"),
    ],
)
def test_bad_inputs_are_one_line_errors(kwargs, message):
    args = {"confidence": [0.9, 0.6], "correct": [1, 0], "target_risk": 0.1} | kwargs
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        certify_threshold(args.pop("confidence"), args.pop("correct"), **args)
    assert "\n" not in str(err.value)
