"""Calibration metrics: one binning core, the ECE family, smooth metrics, proper scores,
selective prediction, metrics of conformal prediction sets, calibration per group and
multicalibration (:mod:`~selfcal.metrics.groups`, :mod:`~selfcal.metrics.multicalibration`),
and bootstrap intervals.

Every metric is a :class:`Metric`: it takes its input explicitly -- ``f(labels=y, logits=z)`` or
``f(labels=y, probs=p)`` -- or a validated :class:`~selfcal.Predictions` as the first argument,
and returns a float (numpy input) or a float64 tensor on the input's device (torch input).
The group metrics also take ``groups=`` (or read the groups a ``Predictions`` carries).
"""

from selfcal.metrics._api import Metric
from selfcal.metrics.binning import (
    BinStats,
    bin_statistics,
    calibration_error,
    equal_mass_edges,
    uniform_edges,
)
from selfcal.metrics.bootstrap import Interval, bootstrap_ci
from selfcal.metrics.calibration import adaece, classwise_ece, ece, mce
from selfcal.metrics.conformal import (
    average_set_size,
    class_conditional_coverage,
    conformal_summary,
    set_coverage,
    singleton_rate,
    size_stratified_coverage,
    worst_class_coverage,
)
from selfcal.metrics.debiased import debiased_ece
from selfcal.metrics.groups import (
    GroupCalibration,
    debiased_group_ece,
    group_calibration,
    group_ece,
    worst_group_debiased_ece,
    worst_group_ece,
)
from selfcal.metrics.multicalibration import multicalibration_error, multicalibration_sigma
from selfcal.metrics.scores import accuracy, brier, error, nll
from selfcal.metrics.selective import (
    RiskCoverage,
    accuracy_at_coverage,
    aurc,
    coverage_at_accuracy,
    risk_coverage_curve,
)
from selfcal.metrics.smooth import dece, kde_ece, sece, smooth_ece, soft_accuracy
from selfcal.metrics.streaming import CalibrationAccumulator

__all__ = [
    "BinStats",
    "CalibrationAccumulator",
    "GroupCalibration",
    "Interval",
    "Metric",
    "RiskCoverage",
    "accuracy",
    "accuracy_at_coverage",
    "adaece",
    "aurc",
    "average_set_size",
    "bin_statistics",
    "bootstrap_ci",
    "brier",
    "calibration_error",
    "class_conditional_coverage",
    "classwise_ece",
    "conformal_summary",
    "coverage_at_accuracy",
    "debiased_ece",
    "debiased_group_ece",
    "dece",
    "ece",
    "equal_mass_edges",
    "error",
    "group_calibration",
    "group_ece",
    "kde_ece",
    "mce",
    "multicalibration_error",
    "multicalibration_sigma",
    "nll",
    "risk_coverage_curve",
    "sece",
    "set_coverage",
    "singleton_rate",
    "size_stratified_coverage",
    "smooth_ece",
    "soft_accuracy",
    "uniform_edges",
    "worst_class_coverage",
    "worst_group_debiased_ece",
    "worst_group_ece",
]
