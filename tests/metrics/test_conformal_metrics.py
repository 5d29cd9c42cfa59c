"""Metrics of prediction sets (selfcal.metrics.conformal): values by hand and by a plain
numpy re-computation, numpy/torch forms, one-line errors, and conformal_summary's bootstrap
intervals as bootstrap_ci's."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import selfcal.metrics as M
from selfcal.metrics.bootstrap import Resamples

SETS = np.array(
    [[True, False, False], [True, True, False], [False, True, True], [False, False, True]]
)
LABELS = np.array([0, 0, 0, 2])


def _random(n: int = 500, c: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.random((n, c)) < 0.4, rng.integers(0, c, n)


def test_values_by_hand():
    assert M.set_coverage(SETS, LABELS) == 0.75
    assert M.average_set_size(SETS) == 1.5
    assert M.singleton_rate(SETS) == 0.5
    np.testing.assert_array_equal(
        M.class_conditional_coverage(SETS, LABELS), [2 / 3, math.nan, 1.0]
    )
    assert M.worst_class_coverage(SETS, LABELS) == pytest.approx(2 / 3)
    assert M.size_stratified_coverage(SETS, LABELS) == {1: (1.0, 2), 2: (0.5, 2)}


def test_values_equal_a_plain_numpy_computation():
    sets, y = _random()
    covered = sets[np.arange(len(y)), y]
    assert M.set_coverage(sets, y) == pytest.approx(covered.mean())
    assert M.average_set_size(sets) == pytest.approx(sets.sum(1).mean())
    assert M.singleton_rate(sets) == pytest.approx((sets.sum(1) == 1).mean())
    per_class = [covered[y == k].mean() for k in range(4)]
    np.testing.assert_allclose(M.class_conditional_coverage(sets, y), per_class)
    assert M.worst_class_coverage(sets, y) == pytest.approx(min(per_class))
    sizes = sets.sum(1)
    expected = {int(s): (covered[sizes == s].mean(), int((sizes == s).sum())) for s in set(sizes)}
    got = M.size_stratified_coverage(sets, y)
    assert list(got) == sorted(expected)
    for s, (cov, n) in expected.items():
        assert got[s][1] == n and got[s][0] == pytest.approx(cov)


def test_torch_in_torch_out():
    sets, y = _random()
    t_sets, t_y = torch.as_tensor(sets), torch.as_tensor(y)
    for fn in (M.set_coverage, M.worst_class_coverage):
        out = fn(t_sets, t_y)
        assert isinstance(out, torch.Tensor) and out.dtype == torch.float64 and out.ndim == 0
        assert float(out) == pytest.approx(fn(sets, y))
    assert isinstance(M.average_set_size(t_sets), torch.Tensor)
    per_class = M.class_conditional_coverage(t_sets, t_y)
    assert isinstance(per_class, torch.Tensor) and per_class.shape == (4,)


@pytest.mark.parametrize(
    ("sets", "labels", "message"),
    [
        (SETS.astype(float), LABELS, "sets must be a boolean"),
        (SETS[0], LABELS, "sets must be a 2-D"),
        (SETS[:0], LABELS[:0], "sets is empty"),
        (SETS, LABELS[:3], "labels has length 3"),
        (SETS, LABELS + 1, r"labels must lie in \[0, 3\)"),
        (SETS, LABELS - 1, r"labels must lie in \[0, 3\)"),
    ],
)
def test_bad_input_is_a_one_line_error(sets, labels, message):
    with pytest.raises(ValueError, match=message) as err:
        M.set_coverage(sets, labels)
    assert "\n" not in str(err.value)


def test_summary_intervals_are_bootstrap_intervals_of_each_metric():
    sets, y = _random(n=300)
    summary = M.conformal_summary(sets, y, n_resamples=400, seed=5)
    assert list(summary) == ["coverage", "average_set_size", "singleton_rate",
                             "worst_class_coverage"]  # fmt: skip
    assert summary["coverage"].value == pytest.approx(M.set_coverage(sets, y))
    assert summary["worst_class_coverage"].value == pytest.approx(M.worst_class_coverage(sets, y))
    for interval in summary.values():
        assert isinstance(interval, M.Interval)
        assert interval.low <= interval.value <= interval.high  # centred intervals contain it
        assert interval.n_resamples == 400 and interval.confidence == 0.95
    # the same resamples by hand: coverage of each resample, then the centred interval
    covered = torch.as_tensor(sets[np.arange(300), y]).double()
    w = torch.cat(list(Resamples(300, 400, 5).chunks()))
    values = w @ covered / w.sum(1)
    lo, mid, hi = torch.quantile(values, torch.tensor([0.025, 0.5, 0.975]).double())
    point = covered.mean()
    assert summary["coverage"].low == pytest.approx(float(lo + point - mid), abs=1e-12)
    assert summary["coverage"].high == pytest.approx(float(hi + point - mid), abs=1e-12)
    again = M.conformal_summary(sets, y, n_resamples=400, seed=5)
    assert again == summary
