"""``AutoCalibration`` fitted with groups (:mod:`selfcal.posthoc._auto_groups`): group-aware
candidates, folds stratified by group, and the rule -- a group-aware candidate replaces the
choice made without groups only when significantly better on mean NLL and no worse on its
worst group."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from posthoc.test_groupwise import grouped_data

from selfcal import Predictions
from selfcal.posthoc import AutoCalibration, Calibrator, GroupwiseCalibration
from selfcal.posthoc._auto_groups import choose, group_candidates, group_folds
from selfcal.posthoc.auto import fold_count, folds_for, scored_folds


def fit_auto(z, y, g, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoCalibration(**params).fit(logits=z, labels=y, groups=g)


def test_groups_that_differ_choose_groupwise_by_the_stated_rule(tmp_path):
    z, y, g = grouped_data(2000, 20)
    auto = fit_auto(z, y, g, candidates="ts,svs")
    r = auto.cv_results_
    assert r["candidate"] == ["ts", "svs", "groupwise"]
    assert auto.chosen_ == "groupwise" and isinstance(auto.calibrator_, GroupwiseCalibration)
    i, b = r["candidate"].index("groupwise"), r["candidate"].index(auto.calibrator_.base)
    assert r["groupless_difference"][b] == 0.0  # the base is the choice without groups
    assert r["groupless_high"][i] < 0 and r["worst_group"][i] <= r["worst_group"][b]
    assert auto.needs_groups()
    with pytest.raises(ValueError, match="AutoCalibration needs groups="):
        auto.predict_proba(logits=z)
    p = auto.predict_proba(logits=z, groups=g)
    np.testing.assert_array_equal(p, auto.calibrator_.predict_proba(logits=z, groups=g))
    auto.save(tmp_path / "auto.json")
    loaded = Calibrator.load(tmp_path / "auto.json")
    np.testing.assert_array_equal(loaded.predict_proba(logits=z, groups=g), p)


def test_groups_that_carry_nothing_keep_the_choice_without_groups():
    z, y, g = grouped_data(2000, 21, temperatures=(2.0, 2.0, 2.0, 2.0))
    auto = fit_auto(z, y, g, candidates="ts,svs")
    assert auto.chosen_ in ("ts", "svs") and not auto.needs_groups()
    assert "groupwise" in auto.cv_results_["candidate"]
    # predictions need no groups, and take them when given
    np.testing.assert_array_equal(
        auto.predict_proba(logits=z), auto.predict_proba(logits=z, groups=g)
    )


def test_without_groups_auto_is_unchanged():
    """The candidates, folds and choice of a fit without groups are those of the code before
    groups (no group-aware candidate, no group columns in ``cv_results_``)."""
    z, y, _ = grouped_data(600, 22)
    auto = fit_auto(z, y, None, candidates="ts,svs")
    assert auto.cv_results_["candidate"] == ["ts", "svs"]
    assert "worst_group" not in auto.cv_results_ and not auto.needs_groups()


def results(score, high, worst):
    names = ["ts", "svs", "groupwise", "multicalibration"]
    return {"candidate": names, "score": score, "groupless_high": high, "worst_group": worst}


def test_the_rule_needs_significance_and_no_worse_worst_group():
    extra = ["groupwise", "multicalibration"]
    # significantly better and no worse on the worst group: the lower of the two
    r = results([0.9, 0.9, 0.8, 0.7], [0.1, 0.0, -0.01, -0.02], [1.0, 1.0, 1.0, 0.99])
    assert choose(r, "svs", extra, "first") == "multicalibration"
    # not significant: kept
    r = results([0.9, 0.9, 0.8, 0.85], [0.1, 0.0, 0.001, 0.01], [1.0, 1.0, 0.5, 0.5])
    assert choose(r, "svs", extra, "first") == "svs"
    # significant but its worst group worse: vetoed
    r = results([0.9, 0.9, 0.8, 0.85], [0.1, 0.0, -0.01, 0.01], [1.0, 1.0, 1.2, 0.5])
    assert choose(r, "svs", extra, "first") == "svs"
    # failed candidates (inf) never chosen; "best" takes the lowest score of all
    r = results([0.9, 0.9, np.inf, 0.85], [0.1, 0.0, np.nan, -0.01], [1.0, 1.0, np.inf, 0.9])
    assert choose(r, "ts", extra, "first") == "multicalibration"
    assert choose(r, "ts", extra, "best") == "multicalibration"


def test_membership_groups_leave_groupwise_out_with_the_reason():
    z, y, g = grouped_data(900, 23)
    membership = {"any-g0": g == "g0", "not-g3": g != "g3"}
    pred = Predictions.from_logits(z, y, membership)
    names, left_out = group_candidates(pred)
    assert "groupwise" in names and "one group a row" in left_out["groupwise"]
    auto = fit_auto(z, y, membership, candidates="ts,svs")
    r = auto.cv_results_
    i = r["candidate"].index("groupwise")
    assert r["score"][i] == np.inf and "one group a row" in r["error"][i]
    assert auto.chosen_ in ("ts", "svs")


@pytest.mark.parametrize("n", [300, 30_000])
def test_group_folds_spread_every_group_over_the_folds(n):
    z, y, g = grouped_data(n, 24)
    g = g.astype("<U10")
    g[:7] = "rare"
    pred = Predictions.from_logits(z, y, g)
    folds = group_folds(pred, 5, 5, 0, stratified_rows=20_000)
    assert sorted(np.concatenate(folds).tolist()) == list(range(n))  # a partition
    codes = pred.groups.codes.numpy()
    for group in range(pred.groups.n_groups):
        counts = [int((codes[f] == group).sum()) for f in folds]
        assert max(counts) - min(counts) <= 1
    plain = folds_for(pred.labels, "auto", 0)  # auto's folds without groups: as many held out
    k = fold_count("auto", n)
    auto_folds = group_folds(pred, k, scored_folds(k, n), 0, stratified_rows=20_000)
    assert [len(f) for f in auto_folds] == [len(f) for f in plain]
    assert torch.equal(pred.groups.codes, torch.as_tensor(codes))
