"""Calibrators compared on one prediction set (:mod:`selfcal.posthoc.compare`): scores on the
test split, differences from temperature scaling with paired intervals, failures recorded."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.sets import write_folder_set

import selfcal.metrics as M
from selfcal.io import load_prediction_set
from selfcal.posthoc import build_calibrator
from selfcal.posthoc.compare import compare, default_methods


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return load_prediction_set(write_folder_set(tmp_path_factory.mktemp("set") / "m", 0))


def test_scores_are_each_calibrators_test_metrics_and_differences_pair_with_ts(data):
    rows = compare(data, ["svs", "none"], resamples=200, keep_probs=True)
    assert [r.name for r in rows] == ["ts", "svs", "none"]  # the reference added first
    by = {r.name: r for r in rows}
    svs = build_calibrator("svs", kind="logits").fit(data.val, data.val_labels)
    probs = svs.predict_proba(data.test)
    assert by["svs"].scores["nll"] == pytest.approx(
        float(M.nll(probs=probs, labels=data.test_labels))
    )
    np.testing.assert_allclose(by["svs"].probs.numpy(), probs)
    for row in rows:
        for score in ("nll", "brier", "ece"):
            point = row.scores[score] - by["ts"].scores[score]
            assert row.difference[score] == pytest.approx(point)
            assert row.low[score] <= point + 1e-12 and point <= row.high[score] + 1e-12
    assert by["ts"].low == by["ts"].high == {"nll": 0.0, "brier": 0.0, "ece": 0.0}
    assert by["none"].low["nll"] > 0  # the model's own softmax: significantly worse than TS
    assert by["svs"].resampled.shape == (3, 200) and by["svs"].seconds > 0


def test_a_calibrator_that_cannot_be_fitted_is_a_row_with_its_reason(data):
    rows = compare(data, ["ts", "platt"], resamples=50)
    platt = next(r for r in rows if r.name == "platt")
    assert "binary problems" in platt.error and platt.scores == {} and platt.resampled is None


def test_auto_names_its_choice_and_the_defaults_are_autos_candidates_then_auto(data):
    rows = compare(data, ["ts", "auto"], resamples=50)
    assert next(r for r in rows if r.name == "auto").chosen in ("sms", "svs", "ts", "ts-mix")
    assert default_methods(data)[-1] == "auto" and "ets" in default_methods(data)


def test_the_default_methods_leave_out_what_autos_size_rule_leaves_out(tmp_path):
    big = load_prediction_set(write_folder_set(tmp_path / "big", 0, n=1100, c=100))
    assert "ets" not in default_methods(big) and "sms" in default_methods(big)
    assert torch.as_tensor(big.val).shape == (1100, 100)


def test_venn_abers_is_shown_but_no_candidate_of_auto(data, monkeypatch):
    """``venn-abers`` and ``venn-abers-top`` are in compare's defaults (not ``auto``'s
    candidates), after them and before ``auto``; past ``TABLE_SCORES`` validation scores they
    are left out."""
    import selfcal.posthoc._compare_fits as fits
    from selfcal.posthoc.auto import CANDIDATES

    names = default_methods(data)
    assert "venn-abers" not in CANDIDATES and "venn-abers-top" not in CANDIDATES
    assert names[-3:] == ["venn-abers", "venn-abers-top", "auto"]
    monkeypatch.setattr(fits, "TABLE_SCORES", 10)
    assert not {"venn-abers", "venn-abers-top"} & set(default_methods(data))


def _row(name, **intervals):
    """A row whose differences from TS are ``score=(low, point, high)``."""
    from selfcal.posthoc.compare import Row

    row = Row(name, scores={"nll": 1.0, "brier": 0.5, "ece": 0.05})
    for score, (low, point, high) in intervals.items():
        row.low[score], row.difference[score], row.high[score] = low, point, high
    return row


def test_a_verdict_needs_the_interval_to_exclude_zero_as_printed():
    from selfcal.posthoc.compare import verdict

    assert verdict(_row("a", nll=(-4e-5, -2e-5, -1e-5))) == ""  # prints [-0.0000, -0.0000]
    assert verdict(_row("a", nll=(-3e-4, -2e-4, -6e-5))) == "better"  # [-0.0003, -0.0001]
    assert verdict(_row("a", nll=(6e-5, 1e-4, 2e-4))) == "worse"
    assert verdict(_row("a", ece=(4e-5, 1e-4, 2e-4)), "ece") == ""  # +0.00 points
    assert verdict(_row("a", ece=(6e-5, 1e-4, 2e-4)), "ece") == "worse"  # [+0.01, +0.02]


def test_the_recommendation_is_autos_choice_with_its_costs_or_ts_when_auto_is_worse():
    from selfcal.posthoc.compare import recommend

    ts = _row("ts", nll=(0, 0, 0), ece=(0, 0, 0), brier=(0, 0, 0))
    auto = _row("auto", nll=(-0.03, -0.026, -0.022), ece=(3e-4, 8e-3, 1.58e-2), brier=(0, 0, 0))
    auto.chosen = "sms"
    rec = recommend([ts, auto], "nll")
    assert rec.name == "sms" and rec.costs == ("ECE +0.80 [+0.03, +1.58] points worse",)
    assert rec.line == (
        "use sms (auto's choice by cross-validated NLL): NLL -0.0260 [-0.0300, -0.0220] "
        "better than TS; ECE +0.80 [+0.03, +1.58] points worse"
    )
    by_ece = recommend([ts, auto], "ece")
    assert by_ece.name == "ts" and "auto chose sms, but its test ECE is worse" in by_ece.line
    tied = _row("svs", nll=(-0.01, -0.001, 0.008), ece=(0, 0, 0), brier=(0, 0, 0))
    assert recommend([ts, tied], "nll").name == "ts"  # without auto: only a significant winner
    better = _row("svs", nll=(-0.01, -0.005, -0.001), ece=(0, 0, 0), brier=(0, 0, 0))
    better.scores["nll"] = 0.9
    assert recommend([ts, tied, better], "nll").name == "svs"
    assert recommend([_row("svs")], "nll") is None  # no TS to judge against


def test_auto_chooses_by_the_criterion_given(data):
    rows = compare(data, ["auto"], criterion="ece", resamples=50)
    auto = next(r for r in rows if r.name == "auto")
    assert auto.chosen is not None
    with pytest.raises(ValueError, match="criterion must be one of"):
        compare(data, ["auto"], criterion="accuracy")


def test_the_fits_warnings_are_kept_word_for_word_and_grouped_by_message(tmp_path):
    from selfcal.posthoc.compare import comparison

    folder = write_folder_set(tmp_path / "easy", 0, n=60)
    for split in ("val", "test"):  # every validation prediction correct: TS cannot be fitted
        arrays = dict(np.load(folder / f"{split}.npz"))
        arrays["logits"] = (20 * np.eye(4)[arrays["labels"]]).astype(np.float32)
        np.savez(folder / f"{split}.npz", **arrays)
    found = comparison(load_prediction_set(folder), ["ts", "svs"], resamples=50)
    rows = {r.name: r for r in found.rows}
    assert any("all 60 validation predictions are correct" in w for w in rows["ts"].warnings)
    first = found.warnings[0]
    assert "validation predictions are correct" in first.message
    assert set(first.calibrators) <= {"ts", "svs"} and first.count >= 1
    assert found.to_dict()["warnings"][0]["message"] == first.message
