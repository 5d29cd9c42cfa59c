"""Calibrators compared per group (:mod:`selfcal.posthoc._compare_groups`): each row's per-group
numbers are :func:`selfcal.evaluation.evaluate_groups`'s on its calibrated probabilities, the
worst group's ECE and its paired difference from TS's agree with a numpy transcription over the
same resamples, a set without groups is compared as before, and a calibrator that uses groups
is fitted with the validation split's and predicts with the test split's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.sets import write_folder_set

import selfcal.posthoc._compare_fits as F
import selfcal.posthoc.compare as C
from selfcal import Predictions
from selfcal.evaluation import evaluate_groups
from selfcal.io import load_prediction_set
from selfcal.metrics.bootstrap import Resamples
from selfcal.posthoc import TemperatureScaling
from selfcal.posthoc._compare_groups import GROUP_DRAWS, GROUP_RESAMPLES
from selfcal.posthoc.compare import comparison

RESAMPLES = 60


@pytest.fixture(scope="module")
def grouped(tmp_path_factory):
    folder = write_folder_set(tmp_path_factory.mktemp("set") / "g", 0, n=600, c=4, groups=5)
    return load_prediction_set(folder)


@pytest.fixture(scope="module")
def found(grouped):
    return comparison(grouped, ["svs", "none"], resamples=RESAMPLES, keep_probs=True)


def numpy_worst_ece(probs, labels, groups, weights=None, n_bins=15):
    """max over groups of sum_m |sum_{i in B_gm} w_i (conf_i - correct_i)| / sum_{i in g} w_i,
    bins ``((m-1)/M, m/M]``."""
    conf, correct = probs.max(1), (probs.argmax(1) == labels).astype(float)
    bins = np.clip(np.ceil(conf * n_bins).astype(int) - 1, 0, n_bins - 1)
    w = np.ones(len(labels)) if weights is None else weights
    worst = -np.inf
    for g in np.unique(groups):
        rows = groups == g
        gaps = np.bincount(bins[rows], w[rows] * (conf[rows] - correct[rows]), n_bins)
        worst = max(worst, np.abs(gaps).sum() / w[rows].sum())
    return worst


def test_each_rows_groups_are_evaluate_groups_on_its_calibrated_probabilities(grouped, found):
    labels = torch.as_tensor(grouped.test_labels)
    assert set(found.groups.evaluations) == {"ts", "svs", "none"}
    for row in found.rows:
        pred = Predictions.from_probs(row.probs, labels, grouped.test_groups)
        expected = evaluate_groups(pred, n_resamples=GROUP_RESAMPLES, n_draws=GROUP_DRAWS)
        got = row.groups
        assert got is found.groups.evaluations[row.name]
        assert got.report.names == expected.report.names == ("g0", "g1", "g2", "g3", "g4")
        for key in ("size", "accuracy", "nll", "ece", "null_ece", "excess_ece", "p_value"):
            torch.testing.assert_close(getattr(got.report, key), getattr(expected.report, key))
        assert got.worst_excess == expected.worst_excess
        assert got.multicalibration == expected.multicalibration
        # the worst group's ECE: over the comparison's resamples, as evaluate_groups with as many
        assert got.worst_ece == evaluate_groups(pred, n_resamples=RESAMPLES).worst_ece
        assert got.worst_ece.n_resamples == RESAMPLES
        assert got.worst_ece.low <= got.worst_ece.value <= got.worst_ece.high


def test_the_worst_groups_difference_from_ts_is_paired_over_the_same_resamples(grouped, found):
    by = {row.name: row for row in found.rows}
    labels, groups = grouped.test_labels, grouped.test_groups
    weights = next(Resamples(len(labels), RESAMPLES, 0).chunks()).numpy()

    def resampled(name):
        probs = by[name].probs.numpy()
        return np.array([numpy_worst_ece(probs, labels, groups, w) for w in weights])

    base = resampled("ts")
    for name in ("svs", "none"):
        point = numpy_worst_ece(by[name].probs.numpy(), labels, groups) - numpy_worst_ece(
            by["ts"].probs.numpy(), labels, groups
        )
        diff = resampled(name) - base
        low, mid, high = np.quantile(diff, [0.025, 0.5, 0.975])
        paired = found.groups.worst_minus_ts[name]
        assert paired.value == pytest.approx(point, abs=1e-8)
        assert (paired.low, paired.high) == pytest.approx(
            (point + low - mid, point + high - mid), abs=1e-8
        )
    assert found.groups.worst_minus_ts["ts"].value == 0.0
    assert found.groups.worst_minus_ts["none"].verdict in ("better", "worse", "")


def test_json_holds_every_group_under_every_calibrator(found):
    out = found.to_dict()["groups"]
    assert out["n_groups"] == 5 and [g["name"] for g in out["groups"]] == [
        f"g{k}" for k in range(5)
    ]
    assert sum(g["size"] for g in out["groups"]) == found.n_test
    assert (out["n_draws"], out["n_resamples"]) == (GROUP_DRAWS, GROUP_RESAMPLES)
    assert out["worst_group_ece_resamples"] == RESAMPLES
    assert list(out["calibrators"]) == ["ts", "svs", "none"]
    for name, entry in out["calibrators"].items():
        assert [g["name"] for g in entry["per_group"]] == [f"g{k}" for k in range(5)]
        worst = entry["worst_group_ece"]
        assert worst["value"] == pytest.approx(found.groups.evaluations[name].worst_ece.value)
        assert worst["minus_ts"]["value"] == pytest.approx(found.groups.worst_minus_ts[name].value)
        assert {"worst_group_debiased_ece", "multicalibration_error"} <= set(entry)


def test_a_set_without_groups_is_compared_as_before(tmp_path, grouped):
    """Same scores without the groups: the same rows, numbers and JSON, with no group part."""
    plain = load_prediction_set(write_folder_set(tmp_path / "p", 0, n=600, c=4))
    np.testing.assert_array_equal(plain.test, grouped.test)
    without = comparison(plain, ["svs", "none"], resamples=RESAMPLES)
    with_groups = comparison(grouped, ["svs", "none"], resamples=RESAMPLES)
    assert without.groups is None and all(row.groups is None for row in without.rows)
    old, new = without.to_dict(), with_groups.to_dict()
    assert "groups" not in old and set(new) - set(old) == {"groups"}
    for entry in (*old["calibrators"].values(), *new["calibrators"].values()):
        entry.pop("fit_seconds")
    assert old["calibrators"] == new["calibrators"]
    assert old["recommendation"] == new["recommendation"]


def test_by_group_false_leaves_the_groups_out(grouped):
    rows = C.compare(grouped, ["ts"], resamples=20, by_group=False)
    assert rows[0].groups is None


class PerGroupTemperature:
    """A tiny group-aware calibrator for the test: one temperature per group, each fitted on
    its group's validation rows; records the groups it was given."""

    uses_groups = True
    accepts_groups = False

    def needs_groups(self):
        return True

    def fit(self, scores, labels, *, groups=None):
        if groups is None:
            raise ValueError("per-group-ts needs groups=")
        self.fit_groups = np.asarray(groups)
        self.each = {
            g: TemperatureScaling().fit(logits=scores[groups == g], labels=labels[groups == g])
            for g in np.unique(groups)
        }
        return self

    def predict_proba(self, scores, *, groups=None):
        self.predict_groups = np.asarray(groups)
        out = np.zeros(scores.shape)
        for g, ts in self.each.items():
            out[groups == g] = ts.predict_proba(logits=scores[groups == g])
        return out


class NeedsGroups(TemperatureScaling):
    uses_groups = True


def test_a_calibrator_that_uses_groups_gets_the_validation_and_test_groups(
    grouped, tmp_path, monkeypatch
):
    made = {}
    build = F.build_calibrator

    def fake_build(name, **options):
        if name == "per-group-ts":
            made[name] = PerGroupTemperature()
            return made[name]
        if name == "needs-groups":
            return NeedsGroups(**options)
        return build(name, **options)

    monkeypatch.setattr(F, "build_calibrator", fake_build)
    monkeypatch.setattr(C, "prepare_fits", lambda names: None)  # builds by the registry
    found = comparison(grouped, ["ts", "per-group-ts"], resamples=20, keep_probs=True)
    fake = made["per-group-ts"]
    np.testing.assert_array_equal(fake.fit_groups, grouped.val_groups)
    np.testing.assert_array_equal(fake.predict_groups, grouped.test_groups)
    row = next(r for r in found.rows if r.name == "per-group-ts")
    expected = PerGroupTemperature().fit(grouped.val, grouped.val_labels, groups=grouped.val_groups)
    np.testing.assert_allclose(
        row.probs.numpy(), expected.predict_proba(grouped.test, groups=grouped.test_groups)
    )
    assert "per-group-ts" in found.groups.evaluations
    # a real calibrator that uses groups: fitted with them, and refused on a set without
    rows = C.compare(grouped, ["ts", "needs-groups"], resamples=20)
    assert not rows[1].error and rows[1].groups is not None
    plain = load_prediction_set(write_folder_set(tmp_path / "p", 0, n=600, c=4))
    rows = C.compare(plain, ["ts", "needs-groups"], resamples=20)
    assert "NeedsGroups needs groups=" in rows[1].error


def test_compare_gives_auto_the_groups_and_lists_the_group_calibrators(grouped):
    """On a set with groups compare's default calibrators add the group-aware ones, and its
    ``auto`` is fitted with the groups (their candidates join); the studies' ``fit_predict``
    (``with_groups`` off) keeps ``auto`` without them."""
    assert {"groupwise", "multicalibration"} <= set(F.default_methods(grouped))
    with_groups = F.fit_predict("auto", grouped, with_groups=True).calibrator
    without = F.fit_predict("auto", grouped).calibrator
    assert "groupwise" in with_groups.cv_results_["candidate"]
    assert "groupwise" not in without.cv_results_["candidate"]
