"""The abstention study (``selfcal reproduce abstention``): its vectorised certificates equal
:func:`selfcal.abstention.certify_threshold` re-split by re-split, each threshold's risk is
read exactly on the population, Learn-then-Test's violation rate stays within delta up to
Monte-Carlo error on a calibrated synthetic set, and the quick protocol writes its tables."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from helpers.studies import run_quick

from selfcal.abstention import GuaranteedAbstention, certify_threshold
from selfcal.studies.abstention import engine as E
from selfcal.studies.abstention.execute import (
    GROUP_ROWS,
    certify_all,
    group_certificates,
    resplit_seeds,
    rule_configs,
)
from selfcal.studies.abstention.protocol import QUICK


def _calibrated(n, seed, digits=None):
    rng = np.random.default_rng(seed)
    c = rng.beta(4, 1, n)
    if digits is not None:
        c = np.round(c, digits)  # ties: several rows per level
    return c, rng.random(n) < c


def _rows(kind, seed, n):
    rng = np.random.default_rng(int(seed))
    return rng.integers(0, n, n // 2) if kind == "iid" else rng.permutation(n)[: n // 2]


@pytest.mark.parametrize("digits", [None, 2])
@pytest.mark.parametrize("kind", E.KINDS)
def test_the_vectorised_thresholds_equal_certify_threshold(kind, digits):
    c, right = _calibrated(1500, 3, digits)
    pop = E.population(c, right)
    seeds = np.arange(25) + 100
    d = E.draw(pop, kind, seeds)
    for eps in (0.02, 0.05, 0.15):
        for delta in (0.05, 0.1):
            found = {
                "empirical": E.empirical(d, eps),
                "crc": E.crc(d, eps),
                "ltt": E.ltt(d, eps, delta),
                "mapie": E.ltt_grid(pop, d, eps, delta),
            }
            options = {
                "empirical": {"rule": "empirical"},
                "crc": {"rule": "crc"},
                "ltt": {"rule": "ltt", "delta": delta},
                "mapie": {
                    "rule": "ltt",
                    "delta": delta,
                    "grid": E.MAPIE_GRID,
                    "fwer": "holm",
                    "p_value": "hoeffding_bentkus",
                },
            }
            for name, level in found.items():
                for r, seed in enumerate(seeds):
                    rows = _rows(kind, seed, c.shape[0])
                    cert = certify_threshold(c[rows], right[rows], target_risk=eps, **options[name])
                    if cert.threshold is None:
                        assert level[r] == -1, (name, eps, delta, r)
                        continue
                    assert level[r] >= 0, (name, eps, delta, r)
                    # the same population rows answered (the grid's threshold sits between levels)
                    assert pop.answered[level[r]] == np.sum(c >= cert.threshold)
                    if name != "mapie":
                        assert E.thresholds(pop, level)[r] == cert.threshold


def test_the_risk_is_read_on_the_population_or_on_the_test_half():
    c, right = _calibrated(800, 5, 2)
    pop = E.population(c, right)
    for kind in E.KINDS:
        d = E.draw(pop, kind, np.arange(10))
        level = E.ltt(d, 0.1, 0.1)
        risk, cov, joint = E.read(pop, d, level)
        for r in range(10):
            if level[r] < 0:
                assert cov[r] == 0 and risk[r] == 0
                continue
            t = pop.levels[level[r]]
            if kind == "iid":
                rows = np.arange(800)
            else:
                rows = np.random.default_rng(r).permutation(800)[400:]
            answered = c[rows] >= t
            assert cov[r] == pytest.approx(answered.mean())
            assert risk[r] == pytest.approx(np.mean(~right[rows][answered]))
            assert joint[r] == pytest.approx(np.mean(answered & ~right[rows]))


def test_ltt_keeps_its_promise_within_monte_carlo_error_and_the_empirical_rule_does_not():
    """On a calibrated population (P(wrong | c) = 1 - c: LTT's assumption holds), LTT's
    violation rate over i.i.d. re-splits is at most delta plus three Monte-Carlo standard
    errors; the empirical rule, whose threshold sits near risk eps, fails far more often."""
    c, right = _calibrated(4000, 11)
    pop = E.population(c, right)
    protocol = dataclasses.replace(QUICK, resplits=300)
    found = certify_all(protocol, pop, "iid", 0)
    r = protocol.resplits
    for rule, delta in rule_configs(protocol):
        if delta is None:
            continue
        for eps in protocol.eps:
            risk, cov, _ = found[(f"{rule}@{delta:g}", eps)]
            slack = 3 * math.sqrt(delta * (1 - delta) / r)
            assert np.mean(risk > eps) <= delta + slack, (rule, delta, eps)
    emp_risk, emp_cov, _ = found[("empirical", 0.1)]
    ltt_cov = found[("ltt@0.05", 0.1)][1]
    assert np.mean(emp_risk > 0.1) > 0.2
    assert np.mean(emp_cov) > np.mean(ltt_cov) > 0  # the promise costs coverage


def test_crc_keeps_its_joint_risk_within_eps_on_average():
    c, right = _calibrated(3000, 13)
    pop = E.population(c, right)
    found = certify_all(dataclasses.replace(QUICK, resplits=200), pop, "iid", 1)
    for eps in QUICK.eps:
        _, _, joint = found[("crc", eps)]
        assert np.mean(joint) <= eps + 3 * np.std(joint) / math.sqrt(200) + 1e-12


def test_the_per_group_table_follows_guaranteed_abstention():
    c, right = _calibrated(1200, 17)
    probs = np.stack([c, 1 - c], axis=1)  # class 0 predicted, confidence c
    labels = np.where(right, 0, 1)
    groups = np.array(list("ABC"))[np.random.default_rng(2).choice(3, 1200, p=[0.6, 0.3, 0.1])]
    protocol = dataclasses.replace(QUICK, group_resplits=5)
    table, names = group_certificates(protocol, probs, labels, groups, 0)
    assert names == ["A", "B", "C"] and table.shape == (len(GROUP_ROWS), 3)
    assert table[0].tolist() == [np.sum(groups == g) for g in names]
    seed = resplit_seeds(0, "iid", 1)[0]
    rows = np.random.default_rng(int(seed)).integers(0, 1200, 600)
    model = GuaranteedAbstention(protocol.group_eps, protocol.group_delta, "ltt")
    model.fit(probs[rows], labels[rows], groups=groups[rows])
    assert np.all(table[3] <= 5) and np.all((table[2] >= 0) & (table[2] <= 1))
    if model.certificates_["A"].threshold is not None:
        assert table[2][0] > 0


def test_the_quick_study_writes_its_tables(tmp_path):
    payload = run_quick("abstention", tmp_path)
    assert payload["failures"] == []
    text = (tmp_path / "report" / "README.md").read_text()
    for heading in (
        "## The answer",
        "## Violation rate and coverage: i.i.d. re-splits, population risk",
        "## Violation rate and coverage: held-out half (the issue's protocol)",
        "## CRC: mean joint risk",
        "## Does calibrating first buy coverage at the same guarantee?",
        "## Per group",
    ):
        assert heading in text
    assert "| ts | LTT δ=0.05 |" in text
