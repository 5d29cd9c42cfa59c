"""MulticlassMulticalibration (selfcal.posthoc.multicalibration): it fixes a group x class
miscalibration temperature scaling cannot, leaves a map without group effect (nearly) as the
base, keeps its guard's promise, refits bit-identically, saves and loads through JSON alone,
takes overlapping membership groups, and at 1,000 classes keeps rows summing to 1 and the
argmax unchanged."""

from __future__ import annotations

import json

import numpy as np
import pytest

from selfcal.estimator.persistence import read_document, write_document
from selfcal.metrics import nll
from selfcal.metrics.groups import worst_group_ece
from selfcal.posthoc import Calibrator, MulticlassMulticalibration, TemperatureScaling

pytest.importorskip("lightgbm")


def grouped_logits(
    n: int, n_classes: int = 4, n_groups: int = 8, effect: float = 1.0, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Logits ``z``, labels drawn from ``softmax(a_g z + b_g)`` -- a per-group temperature
    ``a_g`` and per-group class shifts ``b_g`` (``effect`` scales both; 0: no group effect,
    the labels drawn from ``softmax(z)``) -- and the group names."""
    rng = np.random.default_rng(seed)
    g = rng.integers(0, n_groups, n)
    z = rng.normal(0, 2, (n, n_classes))
    shift = rng.normal(0, effect, (n_groups, n_classes))
    scale = np.exp(rng.normal(0, 0.5 * effect, n_groups))
    true = z * scale[g][:, None] + shift[g]
    p = np.exp(true - true.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = (rng.random(n)[:, None] > np.cumsum(p, 1)).sum(1).clip(max=n_classes - 1)
    return z, y, np.array([f"g{k}" for k in g])


def halves(n: int, **kwargs):
    z, y, g = grouped_logits(2 * n, **kwargs)
    return (z[:n], y[:n], g[:n]), (z[n:], y[n:], g[n:])


def scores(p: np.ndarray, y: np.ndarray, g: np.ndarray) -> tuple[float, float]:
    return float(nll(probs=p, labels=y)), float(worst_group_ece(probs=p, labels=y, groups=g))


@pytest.mark.parametrize("classes", ["all", "top"])
def test_fixes_a_group_miscalibration_temperature_scaling_cannot(classes):
    """On held-out rows, both the mean NLL and the worst group's ECE fall below temperature
    scaling's (a per-group temperature and class shift: one global temperature cannot fit
    them)."""
    (z, y, g), (zt, yt, gt) = halves(6000)
    ts = TemperatureScaling().fit(logits=z, labels=y)
    mc = MulticlassMulticalibration(classes=classes).fit(logits=z, labels=y, groups=g)
    assert mc.form_ == classes and mc.rounds_ >= 1
    base_nll, base_worst = scores(ts.predict_proba(logits=zt), yt, gt)
    ours_nll, ours_worst = scores(mc.predict_proba(logits=zt, groups=gt), yt, gt)
    assert ours_nll < base_nll - 0.005
    assert ours_worst < base_worst - 0.01


def test_without_a_group_effect_it_returns_nearly_the_base_map():
    """Labels drawn from ``softmax(z)`` whatever the group: the guard keeps (nearly) the base
    calibrator, and the held-out NLL is not worse than the base's."""
    (z, y, g), (zt, yt, gt) = halves(6000, effect=0.0)
    ts = TemperatureScaling().fit(logits=z, labels=y)
    for classes in ("all", "top"):
        mc = MulticlassMulticalibration(classes=classes).fit(logits=z, labels=y, groups=g)
        p, base = mc.predict_proba(logits=zt, groups=gt), ts.predict_proba(logits=zt)
        assert float(nll(probs=p, labels=yt)) <= float(nll(probs=base, labels=yt)) + 1e-3
        assert np.abs(p - base).max() < 0.05
        assert mc.holdout_nll_[mc.rounds_] <= mc.holdout_nll_[0]


@pytest.mark.parametrize("effect", [0.0, 1.0])
def test_the_guard_never_keeps_a_worse_held_out_fit(effect):
    """``refit=False`` keeps the search's own rounds: the held-out NLL of what is kept is the
    lowest seen, never above the base's; 0 rounds predict exactly as the base."""
    (z, y, g), _ = halves(3000, effect=effect, seed=3)
    mc = MulticlassMulticalibration(refit=False).fit(logits=z, labels=y, groups=g)
    assert mc.holdout_nll_[mc.rounds_] == mc.holdout_nll_.min() <= mc.holdout_nll_[0]
    assert len(mc.boosters_) == mc.rounds_ == len(mc.unshrink_)
    if mc.rounds_ == 0:
        base = mc.base_.predict_proba(logits=z)
        np.testing.assert_array_equal(mc.predict_proba(logits=z, groups=g), base)


def test_a_refit_with_the_same_seed_is_bit_identical():
    (z, y, g), (zt, _, gt) = halves(3000)
    a = MulticlassMulticalibration(seed=5).fit(logits=z, labels=y, groups=g)
    b = MulticlassMulticalibration(seed=5).fit(logits=z, labels=y, groups=g)
    assert a.rounds_ >= 1 and a.boosters_ == b.boosters_
    np.testing.assert_array_equal(a.unshrink_, b.unshrink_)
    np.testing.assert_array_equal(
        a.predict_proba(logits=zt, groups=gt), b.predict_proba(logits=zt, groups=gt)
    )


@pytest.mark.parametrize("classes", ["all", "top"])
def test_save_and_load_round_trip_through_json(classes, tmp_path):
    (z, y, g), (zt, _, gt) = halves(2000)
    mc = MulticlassMulticalibration(classes=classes).fit(logits=z, labels=y, groups=g)
    mc.save(tmp_path / "mc.json")
    doc = json.loads((tmp_path / "mc.json").read_text())
    assert all(isinstance(t, str) for t in doc["fitted"]["boosters_"])
    loaded = Calibrator.load(tmp_path / "mc.json")
    assert isinstance(loaded, MulticlassMulticalibration) and loaded.rounds_ == mc.rounds_ >= 1
    np.testing.assert_array_equal(
        loaded.predict_proba(logits=zt, groups=gt), mc.predict_proba(logits=zt, groups=gt)
    )


def test_a_file_whose_trees_are_not_lightgbm_models_is_refused(tmp_path):
    (z, y, g), _ = halves(2000)
    MulticlassMulticalibration().fit(logits=z, labels=y, groups=g).save(tmp_path / "mc.json")
    doc = read_document(tmp_path / "mc.json")
    doc["fitted"]["boosters_"][0] = "not a model"
    write_document(tmp_path / "bad.json", {k: doc[k] for k in ("class", "params", "fitted")})
    with pytest.raises(ValueError, match="boosters_ holds a text LightGBM cannot read"):
        Calibrator.load(tmp_path / "bad.json")
    doc["fitted"]["rounds_"] = 0
    write_document(tmp_path / "bad.json", {k: doc[k] for k in ("class", "params", "fitted")})
    with pytest.raises(ValueError, match="disagree on the number of rounds"):
        Calibrator.load(tmp_path / "bad.json")


def test_overlapping_membership_groups():
    """Two overlapping groups (columns of a membership mapping) with a shift on one class
    each: fixed as with a partition, and a row in both gets both corrections."""
    rng = np.random.default_rng(4)
    n = 12000
    z = rng.normal(0, 2, (n, 3))
    a, b = rng.random(n) < 0.4, rng.random(n) < 0.4
    true = z + 1.5 * np.stack([a, b, np.zeros(n)], 1)
    p = np.exp(true - true.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = (rng.random(n)[:, None] > np.cumsum(p, 1)).sum(1).clip(max=2)
    fit, test = slice(0, n // 2), slice(n // 2, n)
    groups = {"a": a, "b": b}
    mc = MulticlassMulticalibration().fit(
        logits=z[fit], labels=y[fit], groups={k: v[fit] for k, v in groups.items()}
    )
    assert mc.group_names_ == ["a", "b"]
    out = mc.predict_proba(logits=z[test], groups={k: v[test] for k, v in groups.items()})
    ts = TemperatureScaling().fit(logits=z[fit], labels=y[fit]).predict_proba(logits=z[test])
    np.testing.assert_allclose(out.sum(1), 1.0, atol=1e-12)
    assert float(nll(probs=out, labels=y[test])) < float(nll(probs=ts, labels=y[test])) - 0.01


def test_a_thousand_classes_boost_the_top_label_and_keep_the_argmax():
    """Above 32 classes the top label is boosted: rows sum to 1, the argmax is the base's,
    and the other classes keep the base's ratios."""
    rng = np.random.default_rng(6)
    n, c, n_groups = 4000, 1000, 20
    g = rng.integers(0, n_groups, n)
    z = rng.normal(0, 1, (n, c))
    z[np.arange(n), rng.integers(0, c, n)] += 6 + rng.normal(0, 1.5, n_groups)[g]
    y = np.where(rng.random(n) < 0.5 + 0.3 * (g % 2), z.argmax(1), rng.integers(0, c, n))
    names = np.array([f"s{k}" for k in g])
    mc = MulticlassMulticalibration().fit(logits=z[:3000], labels=y[:3000], groups=names[:3000])
    assert mc.form_ == "top" and mc.rounds_ >= 1
    p = mc.predict_proba(logits=z[3000:], groups=names[3000:])
    base = mc.base_.predict_proba(logits=z[3000:])
    np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-12)
    np.testing.assert_array_equal(p.argmax(1), base.argmax(1))
    rows = np.arange(len(p))
    ratio = p / base
    ratio[rows, base.argmax(1)] = np.nan  # every other class scaled by one factor a row
    np.testing.assert_allclose(np.nanstd(ratio, 1) / np.nanmean(ratio, 1), 0, atol=1e-9)
    assert float(nll(probs=p, labels=y[3000:])) < float(nll(probs=base, labels=y[3000:]))
    assert not np.array_equal(p[rows, base.argmax(1)], base[rows, base.argmax(1)])


def test_an_unseen_group_warns_and_reads_as_in_no_fitted_group():
    (z, y, g), (zt, _, gt) = halves(2000)
    mc = MulticlassMulticalibration().fit(logits=z, labels=y, groups=g)
    gt = gt.astype(object)
    gt[:5] = "new-subject"
    with pytest.warns(UserWarning, match="'new-subject' were not seen at fit time"):
        p = mc.predict_proba(logits=zt, groups=gt)
    np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-12)


def test_bad_settings_and_missing_groups_are_one_line_errors():
    (z, y, g), _ = halves(500)
    with pytest.raises(ValueError, match="needs groups="):
        MulticlassMulticalibration().fit(logits=z, labels=y)
    with pytest.raises(ValueError, match="base must be a calibrator that does not use groups"):
        MulticlassMulticalibration(base="multicalibration").fit(logits=z, labels=y, groups=g)
    with pytest.raises(ValueError, match="holdout must be a finite number in"):
        MulticlassMulticalibration(holdout=1.0).fit(logits=z, labels=y, groups=g)
    with pytest.raises(ValueError, match="classes must be one of auto, all, top"):
        MulticlassMulticalibration(classes="some").fit(logits=z, labels=y, groups=g)
    fitted = MulticlassMulticalibration().fit(logits=z, labels=y, groups=g)
    with pytest.raises(ValueError, match="needs groups="):
        fitted.predict_proba(logits=z)
    with pytest.raises(NotImplementedError, match="no torch module"):
        fitted.to_module()
