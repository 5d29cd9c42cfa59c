"""The promises, checked by Monte Carlo on calibrated synthetic rows with a known risk function,
and the empirical rule equal to the pipeline's ``choose_threshold``.

Rows: ``c ~ Uniform(lo, hi)`` and ``P(right | c) = c`` (calibrated), so the selective risk at
``t`` in ``[lo, hi]`` is ``R(t) = 1 - (t + hi) / 2`` and the rate of rows answered and wrong is
``A(t) = (hi - t)(2 - hi - t) / (2 (hi - lo))``."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.abstention import calibrated_test_split

from selfcal.abstention import certify_threshold
from selfcal.pipeline.selective import choose_threshold

TRIALS = 1000


def draw(rng: np.random.Generator, n: int, lo: float, hi: float, step: float | None = None):
    c = rng.uniform(lo, hi, n)
    right = rng.uniform(size=n) < c
    if step is not None:  # ties: confidences reported on a grid (the risk drawn before rounding)
        c = np.round(c / step) * step
    return c, right


def slack(rate: float, trials: int) -> float:
    """Three Monte-Carlo standard errors of a frequency ``rate`` over ``trials``."""
    return 3 * math.sqrt(rate * (1 - rate) / trials)


@pytest.mark.parametrize("step", [None, 0.005])
def test_ltt_violation_frequency_is_at_most_delta(step):
    rng = np.random.default_rng(51)
    lo, hi, eps, delta, n = 0.88, 0.98, 0.05, 0.1, 2000

    def risk(t: float) -> float:
        # with rounded confidences t is a grid value: rows answered are those whose
        # unrounded c >= t - step/2
        t = t if step is None else max(lo, t - step / 2)
        return 1 - (t + hi) / 2

    # every threshold below 0.92 is a null (R > 0.05): 40% of the rows lie there
    ltt = emp = answered = 0
    for _ in range(TRIALS):
        c, right = draw(rng, n, lo, hi, step)
        cert = certify_threshold(c, right, target_risk=eps, delta=delta)
        if cert.threshold is not None:
            ltt += risk(cert.threshold) > eps
            answered += cert.n_answered
        rule = certify_threshold(c, right, target_risk=eps, rule="empirical")
        emp += rule.threshold is not None and risk(rule.threshold) > eps
    print(f"step {step}: LTT violates in {ltt / TRIALS:.3f}, the empirical rule {emp / TRIALS:.3f}")
    assert ltt / TRIALS <= delta + slack(delta, TRIALS)
    assert emp / TRIALS > 0.3  # the check can fail: the empirical rule breaks it
    assert answered > 0.05 * n * TRIALS  # and LTT is not vacuous here


def test_crc_mean_joint_risk_is_at_most_eps():
    rng = np.random.default_rng(52)
    lo, hi, eps, n = 0.5, 1.0, 0.02, 500
    joint = np.zeros(TRIALS)
    for k in range(TRIALS):
        c, right = draw(rng, n, lo, hi)
        cert = certify_threshold(c, right, target_risk=eps, rule="crc")
        t = cert.threshold
        joint[k] = 0.0 if t is None else (hi - t) * (2 - hi - t) / (2 * (hi - lo))
    mean, se = joint.mean(), joint.std() / math.sqrt(TRIALS)
    print(f"CRC: mean P(answered and wrong) {mean:.5f} (se {se:.5f}) at eps {eps}")
    assert mean <= eps + 3 * se
    assert mean > 0.8 * eps  # CRC is nearly exact: not an empty promise


def test_empirical_rule_equals_choose_threshold():
    rng = np.random.default_rng(53)
    for k in range(300):
        n = int(rng.integers(1, 400))
        c = rng.uniform(0, 1, n)
        if k % 3 == 0:
            c = np.round(c, 1)  # heavy ties
        right = rng.uniform(size=n) < (c if k % 2 else 0.9)
        eps = float(rng.choice([0.01, 0.05, 0.1, 0.3, 0.5]))
        cert = certify_threshold(c, right, target_risk=eps, rule="empirical")
        old = choose_threshold(c, right, kind="accuracy", target=1 - eps)
        assert cert.threshold == old.threshold
        if old.threshold is not None:
            assert cert.n_answered / n == old.coverage
            assert 1 - cert.errors / cert.n_answered == pytest.approx(old.accuracy, abs=1e-15)


@pytest.mark.parametrize("name", ["chenyaofo_resnet56_cifar100", "mmlu_llama31_8b_instruct"])
def test_ltt_promise_on_a_real_score_distribution(name):
    """The certifying rows drawn i.i.d. (with replacement) from a shared set's calibrated test
    split, so that the split is the population and ``R(t)`` its exact selective risk: no
    assumption on the shape of ``P(wrong | c)`` is made for the data, it is what the model
    gives."""
    p, y = calibrated_test_split(name)
    c, right = p.max(1), p.argmax(1) == y
    descending = -np.sort(-c)
    wrong_before = np.cumsum(~right[np.argsort(-c, kind="stable")])

    def risk(t: float) -> float:
        k = int(np.searchsorted(-descending, -t, side="right"))
        return wrong_before[k - 1] / k

    rng = np.random.default_rng(54)
    eps, delta, draws = 0.1, 0.1, 300
    ltt = emp = answered = 0
    for _ in range(draws):
        rows = rng.integers(0, len(c), len(c) // 2)
        cert = certify_threshold(c[rows], right[rows], target_risk=eps, delta=delta)
        if cert.threshold is not None:
            ltt += risk(cert.threshold) > eps
            answered += cert.n_answered
        rule = certify_threshold(c[rows], right[rows], target_risk=eps, rule="empirical")
        emp += rule.threshold is not None and risk(rule.threshold) > eps
    print(f"{name}: LTT violates in {ltt / draws:.3f}, the empirical rule {emp / draws:.3f}")
    assert ltt / draws <= delta + slack(delta, draws)
    assert emp / draws > 0.3 and answered > 0.1 * draws * len(c) // 2
