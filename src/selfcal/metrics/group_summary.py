"""Calibration per group as one object: the per-group report with its calibrated yardstick,
the worst group's ECE and excess ECE with bootstrap intervals, and the multicalibration error
with its interval -- what ``selfcal evaluate`` (:func:`selfcal.evaluation.evaluate_groups`)
and ``selfcal compare`` (:mod:`selfcal.posthoc.compare`) report per group, computed by one
function (:func:`group_evaluation`) so the two commands cannot disagree.

The numbers are those of :mod:`selfcal.metrics.groups` and
:mod:`selfcal.metrics.multicalibration`; the intervals are
:func:`~selfcal.metrics.bootstrap.bootstrap_ci`'s over the resamples given (one
:class:`~selfcal.metrics.bootstrap.Resamples`, so several calibrators judged on the same rows
share them and their differences have paired intervals: :attr:`GroupEvaluation.worst_resampled`
keeps the worst group's ECE on each resample for that).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from selfcal._validation import check_real
from selfcal.metrics.bootstrap import Interval, Resamples, bootstrap_ci, interval_bounds
from selfcal.metrics.groups import (
    N_DRAWS,
    GroupCalibration,
    group_calibration,
    worst_group_debiased_ece,
    worst_group_ece,
)
from selfcal.metrics.multicalibration import multicalibration_error, multicalibration_sigma
from selfcal.predictions import Predictions


@dataclass(frozen=True)
class GroupEvaluation:
    """Calibration per group of one set of predictions (:func:`group_evaluation`): the
    per-group report, the worst group's ECE and excess ECE with bootstrap intervals (and
    which group each is on the full data), the multicalibration error with its interval and
    its sigma scale; ``worst_resampled``, the worst group's ECE on each of the worst ECE's
    resamples (``(B,)``, for paired differences between predictions of the same rows)."""

    report: GroupCalibration
    worst_ece: Interval
    worst_excess: Interval
    multicalibration: Interval
    multicalibration_sigma: float
    n_draws: int
    worst_resampled: torch.Tensor | None = field(default=None, repr=False, compare=False)

    @property
    def worst_excess_group(self) -> int:
        """Index of the group whose ECE most exceeds its calibrated yardstick."""
        return int(self.report.excess_ece.nan_to_num(nan=-math.inf).argmax())

    def to_dict(self) -> dict[str, Any]:
        """Every group's numbers and the worst group's as JSON values (non-finite -> null):
        ``per_group`` (name, size, accuracy, NLL, ECE, its calibrated mean ``null_ece``,
        ``excess_ece``, ``p_value``), the worst group by ECE with its interval, what the
        worst of the calibrated draws shows on average and the observed worst's p-value, the
        worst group by excess ECE with its interval, the multicalibration error with its
        interval and its sigma scale."""
        report = self.report
        columns = ("accuracy", "nll", "ece", "null_ece", "excess_ece", "p_value")
        rows = [
            {
                "name": name,
                "size": int(report.size[g]),
                **{c: _finite(float(getattr(report, c)[g])) for c in columns},
            }
            for g, name in enumerate(report.names)
        ]
        return {
            "n_groups": len(report.names),
            "n_draws": self.n_draws,
            "per_group": rows,
            "worst_group_ece": {
                "group": report.names[report.worst],
                **_interval(self.worst_ece),
                "calibrated_worst_mean": _finite(float(report.worst_null.mean())),
                "p_value": report.worst_p_value,
            },
            "worst_group_debiased_ece": {
                "group": report.names[self.worst_excess_group],
                **_interval(self.worst_excess),
            },
            "multicalibration_error": _interval(self.multicalibration),
            "multicalibration_sigma": _finite(self.multicalibration_sigma),
        }


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _interval(iv: Interval) -> dict[str, Any]:
    return {"value": _finite(iv.value), "ci": [_finite(iv.low), _finite(iv.high)]}


def group_evaluation(
    pred: Predictions,
    resamples: Resamples,
    *,
    n_bins: int = 15,
    confidence: float = 0.95,
    interval: str = "centred",
    n_draws: int = N_DRAWS,
    draw_seed: int = 0,
    worst_resamples: Resamples | None = None,
) -> GroupEvaluation:
    """Each group's size, accuracy, NLL, ECE and calibrated yardstick
    (:func:`~selfcal.metrics.group_calibration`, ``n_draws`` draws seeded by ``draw_seed``),
    and bootstrap intervals over ``resamples`` (``interval``: centred, percentile or basic)
    of the worst group's excess over the yardstick
    (:func:`~selfcal.metrics.worst_group_debiased_ece`, the same draws) and of the
    multicalibration error (:func:`~selfcal.metrics.multicalibration_error`); the worst
    group's ECE (:func:`~selfcal.metrics.worst_group_ece`) over ``worst_resamples`` (default
    ``resamples``: it is the cheapest of the three, so a caller comparing several
    predictions may give it more), its resampled values kept. ``pred`` must carry labels
    and groups."""
    pred.require_labels()
    pred.require_groups()
    check_real("confidence", confidence, 0.0, 1.0, low_open=True, high_open=True)
    for given in (resamples, worst_resamples):
        if given is not None and given.n != pred.n_samples:
            raise ValueError(f"resamples are of {given.n} rows, the predictions {pred.n_samples}")
    common: dict[str, Any] = {
        "n_resamples": resamples.n_resamples,
        "confidence": confidence,
        "method": interval,
        "resamples": resamples,
    }
    drawn: dict[str, Any] = {"n_draws": n_draws, "draw_seed": draw_seed}
    worst, values = _worst_ece(pred, worst_resamples or resamples, n_bins, confidence, interval)
    return GroupEvaluation(
        group_calibration(pred, n_bins=n_bins, **drawn),
        worst,
        bootstrap_ci(worst_group_debiased_ece, pred, n_bins=n_bins, **drawn, **common),
        bootstrap_ci(multicalibration_error, pred, **common),
        float(multicalibration_sigma.core(pred)),
        n_draws,
        values,
    )


def _worst_ece(
    pred: Predictions, resamples: Resamples, n_bins: int, confidence: float, interval: str
) -> tuple[Interval, torch.Tensor]:
    """The worst group's ECE with its interval, as :func:`bootstrap_ci` gives it, and its
    value on each resample."""
    with torch.no_grad():
        value = worst_group_ece.core(pred, n_bins=n_bins)
        values = torch.cat(
            [worst_group_ece.core(pred, weights=w, n_bins=n_bins) for w in resamples.chunks()]
        )
        low, high = interval_bounds(values, value, confidence, interval)
    n = resamples.n_resamples
    return Interval(float(value), float(low), float(high), confidence, n, interval), values
