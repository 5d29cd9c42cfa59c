"""GroupwiseCalibration: a base calibrator per group, pooled in log space with the global fit
by ``w_g = n_g / (n_g + k)`` (the rule of :mod:`selfcal.posthoc.groups`)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from selfcal import Predictions
from selfcal.exceptions import DegenerateCalibration
from selfcal.metrics import nll
from selfcal.metrics.groups import worst_group_ece
from selfcal.posthoc import (
    Calibrator,
    GroupwiseCalibration,
    TemperatureScaling,
    VectorScaling,
    build_calibrator,
)
from selfcal.posthoc.groups import PRIOR_GRID

TEMPERATURES = (0.5, 1.0, 2.0, 4.0)
"""Each group's true temperature: the model is over-confident on some groups and
under-confident on others, so one global temperature cannot fit them all."""


def grouped_data(n: int, seed: int, temperatures=TEMPERATURES, c: int = 4):
    """Logits ``z`` whose labels are drawn from ``softmax(z / T_g)``, ``T_g`` the row's
    group's temperature (groups ``g0``, ``g1``, ... dealt at random)."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, len(temperatures), n)
    z = 3.0 * rng.normal(size=(n, c))
    t = np.asarray(temperatures)[codes][:, None]
    p = np.exp(z / t - (z / t).max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = (p.cumsum(1) < rng.random((n, 1))).sum(1).clip(max=c - 1)
    names = np.array([f"g{i}" for i in range(len(temperatures))])[codes]
    return z, y, names


def quiet_fit(cal, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cal.fit(**kwargs)


def test_groupwise_beats_global_temperature_scaling_on_every_group_and_the_worst():
    z, y, g = grouped_data(3000, 0)
    zt, yt, gt = grouped_data(6000, 1)
    gw = GroupwiseCalibration().fit(logits=z, labels=y, groups=g)
    ts = TemperatureScaling().fit(logits=z, labels=y)
    p_gw = gw.predict_proba(logits=zt, groups=gt)
    p_ts = ts.predict_proba(logits=zt)
    per_group = {"gw": [], "ts": []}
    for name in np.unique(gt):
        rows = gt == name
        per_group["gw"].append(nll(probs=p_gw[rows], labels=yt[rows]))
        per_group["ts"].append(nll(probs=p_ts[rows], labels=yt[rows]))
    # no group worse (the group whose temperature is near the global one ties), the worst better
    assert all(a <= b + 1e-3 for a, b in zip(per_group["gw"], per_group["ts"], strict=True))
    assert max(per_group["gw"]) < max(per_group["ts"]) - 0.1
    worst_gw = float(worst_group_ece(Predictions.from_probs(p_gw, yt, gt)))
    worst_ts = float(worst_group_ece(Predictions.from_probs(p_ts, yt, gt)))
    assert worst_gw < 0.5 * worst_ts
    assert gw.prior_rows_ < math.inf  # cross-validation saw the groups differ


def test_prior_rows_zero_is_the_independent_per_group_fits_exactly():
    z, y, g = grouped_data(1200, 2)
    gw = GroupwiseCalibration(prior_rows=0).fit(logits=z, labels=y, groups=g)
    p = gw.predict_proba(logits=z, groups=g)
    assert set(gw.weights_) == {1.0}
    for name in np.unique(g):
        rows = g == name
        own = TemperatureScaling().fit(logits=z[rows], labels=y[rows])
        np.testing.assert_array_equal(p[rows], own.predict_proba(logits=z[rows]))


def test_prior_rows_infinite_is_the_global_fit_exactly():
    z, y, g = grouped_data(1200, 3)
    gw = GroupwiseCalibration(prior_rows=math.inf).fit(logits=z, labels=y, groups=g)
    ts = TemperatureScaling().fit(logits=z, labels=y)
    assert set(gw.weights_) == {0.0}
    np.testing.assert_array_equal(gw.predict_proba(logits=z, groups=g), ts.predict_proba(logits=z))


def test_for_temperature_scaling_the_pool_is_the_shrunk_inverse_temperature():
    """``softmax(w log p_g + (1 - w) log p)`` of two temperature maps is temperature scaling
    with ``1/T = w / T_g + (1 - w) / T``: checked against that formula, written out."""
    z, y, g = grouped_data(1500, 4)
    gw = GroupwiseCalibration(prior_rows=200.0).fit(logits=z, labels=y, groups=g)
    beta = 1.0 / gw.global_.temperature_
    p = gw.predict_proba(logits=z, groups=g)
    for i, name in enumerate(gw.group_names_):
        rows = g == name
        w = gw.group_rows_[i] / (gw.group_rows_[i] + 200.0)
        assert gw.weights_[i] == w
        shrunk = w / gw.group_calibrators_[name].temperature_ + (1 - w) * beta
        expected = torch.softmax(torch.from_numpy(z[rows]) * shrunk, 1).numpy()
        np.testing.assert_allclose(p[rows], expected, rtol=1e-12, atol=1e-15)


def test_a_small_group_falls_back_to_the_global_map():
    z, y, g = grouped_data(1000, 5)
    g = g.astype("<U10")
    g[:12] = "tiny"  # 12 rows, fewer than min_rows = 20
    gw = GroupwiseCalibration().fit(logits=z, labels=y, groups=g)
    assert "tiny" in gw.fallback_ and "min_rows" in gw.fallback_["tiny"]
    assert "tiny" not in gw.group_calibrators_ and gw.weights_[gw.group_names_.index("tiny")] == 0
    global_p = gw.global_.predict_proba(logits=z[:12])
    np.testing.assert_array_equal(gw.predict_proba(logits=z, groups=g)[:12], global_p)
    # with min_rows lowered the group fits its own map, weighted by its 12 rows only
    few = GroupwiseCalibration(prior_rows=300.0, min_rows=2).fit(logits=z, labels=y, groups=g)
    w = few.weights_[few.group_names_.index("tiny")]
    assert w == 12 / 312
    np.testing.assert_allclose(few.predict_proba(logits=z, groups=g)[:12], global_p, atol=0.05)


def test_a_group_whose_own_fit_is_degenerate_warns_and_takes_the_global_map():
    z, y, g = grouped_data(1000, 6)
    g = g.astype("<U10")
    z[:30] = 0.0
    z[np.arange(30), y[:30]] = 5.0  # every prediction of group "sure" correct
    g[:30] = "sure"
    with pytest.warns(DegenerateCalibration, match="1 group.*sure: its fit is degenerate"):
        gw = GroupwiseCalibration(prior_rows=10.0).fit(logits=z, labels=y, groups=g)
    assert gw.fallback_["sure"].startswith("its fit is degenerate")
    np.testing.assert_array_equal(
        gw.predict_proba(logits=z[:30], groups=g[:30]), gw.global_.predict_proba(logits=z[:30])
    )


def test_an_unseen_group_warns_by_name_and_takes_the_global_map():
    z, y, g = grouped_data(800, 7)
    gw = GroupwiseCalibration(prior_rows=50.0).fit(logits=z, labels=y, groups=g)
    new = np.array(["g0", "never-seen", "g1"])
    with pytest.warns(
        UserWarning, match="'never-seen' were not seen at fit time; their rows take the global"
    ):
        p = gw.predict_proba(logits=z[:3], groups=new)
    np.testing.assert_array_equal(p[1], gw.global_.predict_proba(logits=z[1:2])[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        seen = gw.predict_proba(logits=z[:3], groups=np.array(["g0", "g2", "g1"]))
    np.testing.assert_array_equal(p[[0, 2]], seen[[0, 2]])


def test_groups_are_required_and_must_be_one_a_row():
    z, y, g = grouped_data(300, 8)
    with pytest.raises(ValueError, match="GroupwiseCalibration needs groups="):
        GroupwiseCalibration().fit(logits=z, labels=y)
    gw = GroupwiseCalibration(prior_rows=10.0).fit(logits=z, labels=y, groups=g)
    with pytest.raises(ValueError, match="GroupwiseCalibration needs groups="):
        gw.predict_proba(logits=z)
    membership = np.stack([g == "g0", g != "g3"], 1)
    with pytest.raises(ValueError, match=r"needs one group a row \(a partition\); got 2 member"):
        GroupwiseCalibration().fit(logits=z, labels=y, groups=membership)
    with pytest.raises(ValueError, match="one group a row"):
        gw.predict_proba(logits=z, groups=membership)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"base": "magic"}, "unknown calibrator 'magic'"),
        ({"base": "groupwise"}, "base must be a calibrator that does not use groups"),
        ({"base": 3}, "base must be a calibrator name or a Calibrator"),
        ({"prior_rows": -1}, r"prior_rows must be 'auto' or a number in \[0, inf\]"),
        ({"prior_rows": float("nan")}, "prior_rows must be"),
        ({"min_rows": 0}, "min_rows"),
        ({"n_folds": 1}, "n_folds"),
    ],
)
def test_bad_hyperparameters_are_one_line_errors(params, message):
    z, y, g = grouped_data(200, 9)
    with pytest.raises(ValueError, match=message):
        GroupwiseCalibration(**params).fit(logits=z, labels=y, groups=g)


def test_prior_rows_auto_chooses_the_lowest_cross_validated_nll():
    z, y, g = grouped_data(1500, 10)
    gw = GroupwiseCalibration().fit(logits=z, labels=y, groups=g)
    r = gw.cv_results_
    assert r["prior_rows"] == list(PRIOR_GRID) and len(r["nll"]) == len(PRIOR_GRID)
    assert gw.prior_rows_ == PRIOR_GRID[int(np.argmin(r["nll"]))]
    assert all(w >= m for w, m in zip(r["worst_group_nll"], r["nll"], strict=True))
    # one temperature for every group: the groups carry nothing, and the choice shrinks hard
    z1, y1, g1 = grouped_data(1500, 11, temperatures=(2.0, 2.0, 2.0, 2.0))
    same = GroupwiseCalibration().fit(logits=z1, labels=y1, groups=g1)
    assert same.prior_rows_ >= 300.0


def test_save_load_is_bit_exact_with_a_base_by_name_or_as_an_instance(tmp_path):
    z, y, g = grouped_data(900, 12)
    for base in ("ts", VectorScaling(bias_l2=1.0)):
        gw = quiet_fit(GroupwiseCalibration(base=base), logits=z, labels=y, groups=g)
        path = tmp_path / "gw.json"
        gw.save(path)
        loaded = Calibrator.load(path)
        assert type(loaded) is GroupwiseCalibration
        for method in ("predict_proba", "predict_confidence"):
            np.testing.assert_array_equal(
                getattr(loaded, method)(logits=z, groups=g), getattr(gw, method)(logits=z, groups=g)
            )
        again = tmp_path / "again.json"
        loaded.save(again)
        assert again.read_bytes() == path.read_bytes()
    assert type(loaded.base) is VectorScaling and loaded.base.bias_l2 == 1.0


def test_clone_and_params():
    sklearn_base = pytest.importorskip("sklearn.base")
    gw = GroupwiseCalibration(base=VectorScaling(), prior_rows=30.0, min_rows=5)
    copy = sklearn_base.clone(gw)
    assert copy.get_params()["prior_rows"] == 30.0 and copy.min_rows == 5
    assert type(copy.base) is VectorScaling and copy.base is not gw.base
    assert build_calibrator("groupwise", prior_rows=5.0).prior_rows == 5.0


def test_to_module_says_why_it_cannot_export_a_group_map():
    z, y, g = grouped_data(300, 13)
    gw = GroupwiseCalibration(prior_rows=10.0).fit(logits=z, labels=y, groups=g)
    with pytest.raises(ValueError, match="depends on each row's group"):
        gw.to_module()
