"""``selfcal.evaluation``: every headline metric with a bootstrap interval, the default number
of resamples, and the plain point estimates."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.metrics import REPORT_KEYS

import selfcal.evaluation as E
from selfcal.evaluation import METRICS, default_resamples, evaluate, load_metric, point_estimates
from selfcal.metrics import Metric, bootstrap_ci
from selfcal.metrics.bootstrap import Interval
from selfcal.predictions import Predictions

KEYS = REPORT_KEYS
BINNED = {"ece", "mce", "adaece", "classwise_ece", "debiased_ece"}


@pytest.fixture(scope="module")
def pred() -> Predictions:
    """Labels drawn from the predicted distribution: calibration gaps of both signs, so a
    binned error depends on the number of bins."""
    rng = np.random.default_rng(0)
    z = rng.normal(size=(300, 4)) * 2.5
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    y = (rng.uniform(size=(300, 1)) > p.cumsum(1)).sum(1)
    return Predictions.from_logits(z, y)


@pytest.fixture(scope="module")
def report(pred: Predictions) -> dict[str, Interval]:
    return evaluate(pred, n_bins=7, n_resamples=12, seed=3)


def bins_for(metric: Metric, n_bins: int) -> dict[str, int]:
    return {"n_bins": n_bins} if metric.takes_bins else {}


def test_the_table_maps_each_key_to_its_metric_in_report_order() -> None:
    assert list(METRICS) == KEYS
    for key in KEYS:
        assert isinstance(METRICS[key], Metric) and load_metric(key) is METRICS[key]
    for key in KEYS:  # one vocabulary: the report key is the metric's own name
        assert METRICS[key].__name__ == key
    for old, new in (("smece", "smooth_ece"), ("nll_refinement", "refinement_loss")):
        assert load_metric(old) is METRICS[new]  # 0.1's keys still read
    assert {key for key in KEYS if METRICS[key].takes_bins} == BINNED
    with pytest.raises(ValueError, match="keys must be one of"):
        load_metric("smoothece")


def test_every_key_in_order_with_the_metric_point_values(
    pred: Predictions, report: dict[str, Interval]
) -> None:
    assert list(report) == KEYS
    for key, interval in report.items():
        metric = METRICS[key]
        assert isinstance(interval, Interval) and interval.n_resamples == 12
        assert interval.value == metric(pred, **bins_for(metric, 7)), key
        assert interval.low <= interval.high and interval.confidence == 0.95


def test_intervals_are_those_of_bootstrap_ci_on_the_same_draws(
    pred: Predictions, report: dict[str, Interval]
) -> None:
    for key in ("accuracy", "ece", "smooth_ece"):
        metric = METRICS[key]
        alone = bootstrap_ci(metric, pred, n_resamples=12, seed=3, **bins_for(metric, 7))
        assert report[key] == alone, key


def test_keys_pick_metrics_in_their_order_on_the_same_draws(
    pred: Predictions, report: dict[str, Interval]
) -> None:
    some = evaluate(pred, n_bins=7, n_resamples=12, seed=3, keys=["brier", "ece"])
    assert list(some) == ["brier", "ece"]
    assert all(some[k] == report[k] for k in some)
    with pytest.raises(ValueError, match="keys must be one of"):
        evaluate(pred, keys=["smooth-ece"])
    old = evaluate(pred, n_bins=7, n_resamples=12, seed=3, keys=["smece"])  # 0.1's key
    assert list(old) == ["smooth_ece"] and old["smooth_ece"] == report["smooth_ece"]


def test_n_bins_reaches_exactly_the_metrics_that_take_bins(
    pred: Predictions, report: dict[str, Interval]
) -> None:
    other = evaluate(pred, n_bins=3, n_resamples=12, seed=3)
    for key in KEYS:
        if key in BINNED:
            assert other[key].value == METRICS[key](pred, n_bins=3), key
        else:
            assert other[key] == report[key], key
    assert other["ece"].value != report["ece"].value
    assert other["nll"].value == report["nll"].value


def test_point_estimates_equal_the_metric_calls(pred: Predictions) -> None:
    got = point_estimates(pred, ["ece", "nll", "kde_ece", "debiased_ece"], n_bins=9)
    assert list(got) == ["ece", "nll", "kde_ece", "debiased_ece"]
    for key, value in got.items():
        metric = METRICS[key]
        assert isinstance(value, float)
        assert value == metric(pred, **bins_for(metric, 9)), key
    assert got["ece"] != point_estimates(pred, ["ece"])["ece"]  # default 15 bins


def test_progress_is_called_after_each_metric(pred: Predictions) -> None:
    seen: list[str] = []
    evaluate(pred.subset(np.arange(40)), n_resamples=2, progress=seen.append)
    assert seen == KEYS


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (0, 249),  # as one row: 5e6 // (1 + 2e4)
        (720, 241),
        (100_000, 41),
        (480_000, 10),  # 5e6 // 5e5 = 10, just at the floor
        (500_000, 10),  # 9 -> the floor
        (10**7, 10),
    ],
)
def test_default_resamples(n: int, expected: int) -> None:
    assert default_resamples(n) == expected


def test_default_resamples_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the fixed cost a small N would ask for more than the cap."""
    monkeypatch.setattr(E, "FIXED_COST_ROWS", 0)
    assert default_resamples(1_000) == 1000  # 5e6 // 1e3 = 5000 -> capped
    assert default_resamples(10_000) == 500


def test_evaluate_uses_the_default_resamples(
    pred: Predictions, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(E, "default_resamples", lambda n: 3 if n == 300 else 0)
    assert {iv.n_resamples for iv in evaluate(pred).values()} == {3}


def test_rejects_input_that_is_not_predictions() -> None:
    z, y = np.zeros((4, 3)), np.zeros(4, dtype=int)
    with pytest.raises(ValueError, match="Predictions"):
        evaluate({"logits": z, "labels": y})
    with pytest.raises(ValueError, match="Predictions"):
        evaluate(z)


def test_requires_labels() -> None:
    with pytest.raises(ValueError, match="labels"):
        evaluate(Predictions.from_logits(np.zeros((4, 3))))


def test_a_recalibrator_that_cannot_be_fitted_gives_nan_with_a_warning() -> None:
    """Scores beyond what temperature scaling's likelihood fit can scale: the decomposition's
    rows are NaN and say why; every other metric is reported."""
    rng = np.random.default_rng(1)
    z = rng.normal(size=(60, 3))
    z[0, 0] = 1e308
    pred = Predictions.from_logits(z, rng.integers(0, 3, 60))
    with pytest.warns(RuntimeWarning) as record:
        out = evaluate(pred, n_resamples=10)
    assert sorted(str(w.message).split(": ")[:2] for w in record) == [
        ["calibration_loss not computed", "TemperatureScaling"],
        ["refinement_loss not computed", "TemperatureScaling"],
    ]
    assert np.isnan(out["refinement_loss"].value) and np.isnan(out["calibration_loss"].high)
    assert np.isfinite(out["ece"].value)
