"""Every headline metric of one set of predictions, each with a bootstrap interval.

:func:`evaluate` is what ``selfcal evaluate`` prints. The input is validated once (one
:class:`~selfcal.Predictions`) and every metric reads it through :func:`bootstrap_ci`.

Resamples: by default :func:`default_resamples` picks ``min(1000, max(10, 5e6 // (N + 2e4)))``.
Each resample costs every metric time linear in ``N`` plus a fixed part (the grid-based smooth
metrics, ``kde_ece`` and ``smooth_ece``, cost about as much as ``2e4`` rows per resample whatever
``N``), so this keeps one evaluation near 5e6 "row-resamples" per metric: 240 resamples at
``N = 720`` (the digits example), 41 at ``1e5``, and the floor of 10 from ``N = 5e5`` on (the
time of ``1e6`` rows is measured by ``benchmarks/bench_evaluate.py``, in
``benchmarks/results/evaluate.md``). The interval
width shrinks as ``1/sqrt(N)`` regardless; fewer resamples only make its end points noisier
(with 10 the 95% percentile interval is close to the resamples' range). Pass ``n_resamples``
to override.

:func:`evaluate_groups` is the per-group part of the report, for predictions with groups
(:func:`selfcal.metrics.group_summary.group_evaluation`, which ``selfcal compare`` uses too).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from selfcal._validation import check_choice
from selfcal.metrics import (
    Metric,
    accuracy,
    adaece,
    aurc,
    brier,
    classwise_ece,
    debiased_ece,
    ece,
    kde_ece,
    mce,
    nll,
    sece,
    smooth_ece,
)
from selfcal.metrics.bootstrap import Interval, Resamples, bootstrap_ci
from selfcal.metrics.group_summary import GroupEvaluation, group_evaluation
from selfcal.metrics.groups import N_DRAWS
from selfcal.predictions import Predictions
from selfcal.recalibration import calibration_loss, recalibrated_terms, refinement_loss

METRICS: dict[str, Metric] = {
    m.__name__: m
    for m in (
        accuracy,
        nll,
        brier,
        refinement_loss,
        calibration_loss,
        ece,
        mce,
        adaece,
        classwise_ece,
        sece,
        kde_ece,
        smooth_ece,
        debiased_ece,
        aurc,
    )
}
"""Report key -> metric, in report order: each key is the metric's own name in
:mod:`selfcal.metrics` (``selfcal evaluate --json`` and ``selfcal.M.<key>`` agree), or in
:mod:`selfcal.recalibration` for the two of :data:`RECALIBRATED`."""
KEY_ALIASES = {
    "smece": "smooth_ece",
    "nll_refinement": "refinement_loss",
    "nll_calibration": "calibration_loss",
}
"""Report keys of selfcal 0.1, still accepted wherever a key is read."""
RECALIBRATED = ("refinement_loss", "calibration_loss")
"""Keys whose metric fits a recalibrator (scores beyond what its likelihood fit can scale
cannot be fitted). They share one fit of their default recalibrator: :func:`_options` hands
each the :func:`~selfcal.recalibration.recalibrated_terms` of ``pred``, fitted on first
need."""
MAY_BE_UNDEFINED = (*RECALIBRATED, "kde_ece")
"""Keys whose metric can be undefined on valid scores -- a recalibrator that cannot be fitted,
KDE-ECE's default bandwidth undefined or below its grid step: the report gives NaN for them
with a warning, not an error."""

MAX_RESAMPLES = 1000
MIN_RESAMPLES = 10
RESAMPLE_BUDGET = 5_000_000
"""Resampled rows per metric that :func:`default_resamples` aims for."""
FIXED_COST_ROWS = 20_000
"""Per-resample fixed cost of the smooth metrics, in rows' worth."""

Progress = Callable[[str], None]
SMALLEST_FIXED = 1e-4
LARGEST_FIXED = 1e6
"""Magnitudes printed with fixed decimals by :func:`format_number`; others in scientific
notation."""


def default_resamples(n_samples: int) -> int:
    """Default bootstrap resamples for ``n_samples`` rows (see the module docstring)."""
    per_resample = max(1, n_samples) + FIXED_COST_ROWS
    return int(min(MAX_RESAMPLES, max(MIN_RESAMPLES, RESAMPLE_BUDGET // per_resample)))


def format_number(x: float | None, digits: int = 4) -> str:
    """A metric value for a table: ``digits`` decimals (``0.0412``) in the ordinary range,
    scientific notation with ``digits`` significant digits where that would be absurdly long
    or read as zero (``5e+304``, ``3.2e-07``), ``inf`` / ``-inf`` / ``nan`` as such and
    ``None`` as ``n/a``."""
    if x is None:
        return "n/a"
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x != 0 and not SMALLEST_FIXED <= abs(x) < LARGEST_FIXED:
        return f"{x:.{digits}g}"
    return f"{x:.{digits}f}"


def metric_key(key: str) -> str:
    """The report key ``key`` names (an old key of :data:`KEY_ALIASES` -> today's); an
    unknown key is a ``ValueError`` listing the keys."""
    return check_choice("keys", KEY_ALIASES.get(key, key), METRICS)


def load_metric(key: str) -> Metric:
    """The public metric reported under ``key`` (or an alias of :data:`KEY_ALIASES`)."""
    return METRICS[metric_key(key)]


def _options(
    key: str, metric: Metric, n_bins: int, pred: Predictions, fits: dict[str, torch.Tensor]
) -> dict[str, Any]:
    """``{"n_bins": n_bins}`` for metrics whose core takes a bin count; ``{"terms": l}`` for
    those of :data:`RECALIBRATED`, ``l_i = NLL(g(p)_i, y_i)`` the per-row NLL after their
    default recalibrator ``g`` (temperature scaling fitted on ``pred``), computed once and kept
    in ``fits`` for the other key, the point estimate and every resample; else ``{}``."""
    if key in RECALIBRATED:
        if "nll" not in fits:
            with torch.no_grad():
                fits["nll"] = recalibrated_terms(pred, "nll")
        return {"terms": fits["nll"]}
    return {"n_bins": n_bins} if metric.takes_bins else {}


def evaluate(
    pred: Predictions,
    *,
    n_bins: int = 15,
    n_resamples: int | None = None,
    confidence: float = 0.95,
    seed: int = 0,
    interval: str = "centred",
    progress: Progress | None = None,
    keys: Sequence[str] | None = None,
) -> dict[str, Interval]:
    """Point estimate and bootstrap interval (``interval``: ``"centred"``, the default, which
    always contains the point estimate, ``"percentile"`` or ``"basic"``; see
    :mod:`selfcal.metrics.bootstrap`) of every metric in :data:`METRICS` (or of those named
    by ``keys``, in that order).

    ``pred`` must carry labels. ``n_bins`` goes to every metric that takes a bin count;
    ``n_resamples=None`` uses :func:`default_resamples`. Every metric sees the same resamples
    (one :class:`~selfcal.metrics.bootstrap.Resamples`, drawn once from ``seed``).
    ``progress(key)`` is called after each metric.
    """
    if not isinstance(pred, Predictions):
        raise ValueError(
            "evaluate() takes a selfcal Predictions object: "
            "evaluate(Predictions.from_logits(z, y)) or Predictions.from_probs(p, y)"
        )
    pred.require_labels()
    if n_resamples is None:
        n_resamples = default_resamples(pred.n_samples)
    resamples = Resamples(pred.n_samples, n_resamples, seed, pred.device)
    chosen = list(METRICS) if keys is None else [metric_key(k) for k in keys]
    out: dict[str, Interval] = {}
    fits: dict[str, torch.Tensor] = {}  # the recalibrated terms, shared by RECALIBRATED
    for key in chosen:
        metric = load_metric(key)
        try:
            out[key] = bootstrap_ci(
                metric,
                pred,
                n_resamples=n_resamples,
                confidence=confidence,
                method=interval,
                resamples=resamples,  # drawn once from seed
                **_options(key, metric, n_bins, pred, fits),
            )
        except ValueError as error:
            if key not in MAY_BE_UNDEFINED:
                raise
            reason = str(error).splitlines()[0]
            warnings.warn(f"{key} not computed: {reason}", RuntimeWarning, stacklevel=2)
            nan = float("nan")
            out[key] = Interval(nan, nan, nan, confidence, n_resamples, interval)
        if progress is not None:
            progress(key)
    return out


def point_estimates(pred: Predictions, keys: list[str], *, n_bins: int = 15) -> dict[str, float]:
    """Plain values (no interval) of the metrics ``keys`` -- for before/after comparisons."""
    out: dict[str, float] = {}
    fits: dict[str, torch.Tensor] = {}  # the recalibrated terms, shared by RECALIBRATED
    for key in keys:
        metric = load_metric(key)
        out[key] = float(metric.core(pred, **_options(metric_key(key), metric, n_bins, pred, fits)))
    return out


def evaluate_groups(
    pred: Predictions,
    *,
    n_bins: int = 15,
    n_resamples: int | None = None,
    confidence: float = 0.95,
    seed: int = 0,
    interval: str = "centred",
    n_draws: int = N_DRAWS,
) -> GroupEvaluation:
    """Each group's size, accuracy, NLL, ECE and calibrated yardstick
    (:func:`~selfcal.metrics.group_calibration`, ``n_draws`` draws seeded by ``seed``), and
    bootstrap intervals (``n_resamples`` resamples from ``seed``, the ones :func:`evaluate`
    draws) of the worst group's ECE (:func:`~selfcal.metrics.worst_group_ece`), the worst
    excess over the yardstick (:func:`~selfcal.metrics.worst_group_debiased_ece`) and the
    multicalibration error (:func:`~selfcal.metrics.multicalibration_error`), by
    :func:`~selfcal.metrics.group_summary.group_evaluation`. ``pred`` must carry labels and
    groups."""
    pred.require_labels()
    pred.require_groups()
    if n_resamples is None:
        n_resamples = default_resamples(pred.n_samples)
    return group_evaluation(
        pred,
        Resamples(pred.n_samples, n_resamples, seed, pred.device),
        n_bins=n_bins,
        confidence=confidence,
        interval=interval,
        n_draws=n_draws,
        draw_seed=seed,
    )
