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
