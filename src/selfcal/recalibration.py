"""Refinement and calibration loss: a proper loss split into what post-hoc recalibration
removes and what it cannot (Berta et al., 2025, "Rethinking early stopping: refine, then
calibrate"; the classical decomposition of a proper score into calibration and refinement loss,
DeGroot & Fienberg 1983, Broecker 2009).

For a proper loss ``L`` (NLL or the multi-class Brier score) and a recalibrator ``g`` (a
post-hoc calibrator, temperature scaling by default) fitted on the rows themselves:

``refinement = L(g(p), y)``, ``calibration = L(p, y) - refinement``,

so the refinement loss is the loss the predictions would have after recalibration -- what
training can still improve -- and the calibration loss is what recalibration takes away. Berta
et al. call them refinement and calibration *error* (probmetrics 1.3:
``refinement_logloss_ts-mix_all`` and ``calib-err_...``); selfcal says *loss* because
:func:`~selfcal.metrics.binning.calibration_error` is the binned ECE family's. With ``g`` fitted
on the same rows both parts are in-sample: the refinement is optimistic, more so for a
recalibrator with more parameters. ``folds=K`` cross-fits instead: each row's recalibrated
prediction comes from ``g`` fitted on the other ``K - 1`` stratified folds (probmetrics'
``_cv-5``), so the refinement is an honest held-out loss and the calibration loss can be
negative (recalibrating would hurt).

Bootstrap intervals (``weights``) hold the recalibrator fitted on the rows themselves and
resample the per-row losses -- paired, so the calibration loss's interval is that of a mean
difference, and as cheap as the loss's own. That conditions on the fitted map: for temperature
scaling's one parameter its sampling variability is small beside the loss's, but the interval
leaves it out. ``refit=True`` refits the recalibrator on every resample (its rows repeated by
their multiplicities) instead, so the interval covers the fit too, at one fit per resample; a
resample's degenerate fit (every prediction correct) then keeps its documented bounded result,
unwarned.

A metric *defined by* a calibrator sits above both :mod:`selfcal.metrics` (the losses it
applies) and :mod:`selfcal.posthoc` (the recalibrators it fits, and the folds of
:mod:`selfcal.posthoc.crossfit`), so that :mod:`selfcal.metrics` imports nothing from
:mod:`selfcal.posthoc`. Nothing is
kept between calls: each call fits ``g`` once. A caller that wants several values of one fit
-- the point estimate, the bootstrap resamples, both parts, as
:func:`selfcal.evaluation.evaluate` does -- computes :func:`recalibrated_terms` once and passes
them as ``terms=``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from selfcal._validation import check_choice, check_int
from selfcal.exceptions import CalibrationNotConverged, DegenerateCalibration
from selfcal.metrics._api import metric, weighted_mean
from selfcal.metrics.binning import Weights
from selfcal.metrics.scores import brier, brier_terms, nll, nll_terms
from selfcal.posthoc import build_calibrator
from selfcal.posthoc.crossfit import out_of_fold_probs, stratified_folds
from selfcal.predictions import Predictions

LOSSES = {"nll": nll, "brier": brier}
"""The proper losses the decomposition applies to."""

Folds = int | Sequence[Any] | None
"""``None`` (fit on the rows themselves), ``K`` stratified folds, or the held-out row indices
of each fold."""


TERMS = {"nll": nll_terms, "brier": brier_terms}
"""Each loss's per-row terms (its value is their mean)."""


def recalibrated(
    pred: Predictions, recalibrator: str = "ts", folds: Folds = None, seed: int = 0
) -> Predictions:
    """``pred`` after ``recalibrator`` (a registered calibrator name): fitted on every row and
    applied to them (``folds=None``), or cross-fitted -- each fold's rows predicted by the
    calibrator fitted on the others (``folds=K``:
    :func:`~selfcal.posthoc.crossfit.stratified_folds` seeded by ``seed``; or the
    held-out indices of each fold, which must cover every row once). The metrics score these
    predictions without forming them whole (:func:`recalibrated_terms`)."""
    labels = pred.require_labels()
    if folds is None:
        return Predictions.from_probs(_fitted(pred, recalibrator).predict_proba(pred), labels)
    return _cross_fitted(pred, recalibrator, folds, seed)


def recalibrated_terms(
    pred: Predictions, loss: str, recalibrator: str = "ts", folds: Folds = None, seed: int = 0
) -> torch.Tensor:
    """``(N,)`` float64 per-row ``loss`` terms (:data:`TERMS`) of :func:`recalibrated`
    ``(pred, recalibrator, folds, seed)``. Fitted on every row (``folds=None``), the
    recalibrated probabilities are formed and scored one chunk of rows at a time
    (:meth:`~selfcal.Predictions.row_chunks`), so the memory is ``O(chunk x C)`` whatever ``N``
    (for a row-wise recalibrator such as ``"ts"`` the terms are those of the whole array, bit for
    bit); cross-fitted, each fold's predictions are formed whole. Every call fits anew; what
    several values of one fit share is its result (``terms=`` of :func:`refinement_loss` and
    :func:`calibration_loss`)."""
    terms = TERMS[loss]
    if folds is not None:
        return terms(_cross_fitted(pred, recalibrator, folds, seed))
    calibrator, labels = _fitted(pred, recalibrator), pred.require_labels()
    return torch.cat(
        [
            terms(Predictions.from_probs(calibrator.predict_proba(pred.subset(rows)), labels[rows]))
            for rows in pred.row_chunks()
        ]
    )


def _fitted(pred: Predictions, recalibrator: str) -> Any:
    return build_calibrator(recalibrator).fit(pred)


def _cross_fitted(
    pred: Predictions, recalibrator: str, folds: int | Sequence[Any], seed: int
) -> Predictions:
    labels = pred.require_labels()
    if isinstance(folds, (int, np.integer)):
        held_out = stratified_folds(labels, check_int("folds", folds, minimum=2), seed)
    else:
        held_out = [np.asarray(rows, dtype=np.int64).reshape(-1) for rows in folds]
        covered = np.sort(np.concatenate(held_out)) if held_out else np.empty(0)
        if not np.array_equal(covered, np.arange(pred.n_samples)):
            raise ValueError(
                f"folds must hold every row index 0..{pred.n_samples - 1} exactly once"
            )
    probs, error = out_of_fold_probs(recalibrator, pred, held_out, None)
    if probs is None:
        raise ValueError(f"recalibrator {recalibrator!r} could not be fitted on a fold: {error}")
    return Predictions.from_probs(probs, labels)


def _resample_rows(weights: torch.Tensor) -> torch.Tensor:
    """The rows of one bootstrap resample, each repeated by its multiplicity."""
    n = weights.shape[0]
    return torch.repeat_interleave(torch.arange(n, device=weights.device), weights.long())


def _check(
    pred: Predictions,
    loss: str,
    recalibrator: str,
    folds: Folds,
    weights: Weights,
    refit: bool,
    terms: torch.Tensor | None,
) -> None:
    check_choice("loss", loss, tuple(LOSSES))
    build_calibrator(recalibrator)  # an unknown name is a ValueError naming the known ones
    if not isinstance(refit, bool):
        raise ValueError(f"refit must be True or False, got {refit!r}")
    explicit = folds is not None and not isinstance(folds, (int, np.integer))
    if refit and weights is not None and explicit:
        raise ValueError(
            "refit=True resamples the rows, so it needs folds=None or a number of folds, not "
            "explicit fold indices"
        )
    if terms is not None and (
        not isinstance(terms, torch.Tensor) or tuple(terms.shape) != (pred.n_samples,)
    ):
        raise ValueError(
            f"terms must be the ({pred.n_samples},) tensor recalibrated_terms(pred, ...) returns"
        )


def _refinement(
    pred: Predictions,
    weights: Weights,
    loss: str,
    recalibrator: str,
    folds: Folds,
    seed: int,
    refit: bool,
    terms: torch.Tensor | None,
) -> torch.Tensor:
    """The refinement loss ``L(g(p), y) = (1/N) sum_i l_i``, the mean of the recalibrated
    per-row terms ``l_i = L(g(p)_i, y_i)`` (:func:`recalibrated_terms`), or
    ``sum_i w_bi l_i / sum_i w_bi`` under ``(B, N)`` weights: the one computation both
    :func:`refinement_loss` and :func:`calibration_loss` (``L(p, y)`` minus it) take their
    values from. ``terms``: the ``l_i``
    of this fit, when the caller has them (one fit, several values); otherwise fitted here,
    once. With ``refit`` and weights every resample ``b`` is refitted on its rows (each
    repeated ``w_bi`` times) and scored by its plain mean, and ``terms`` go unused. Nothing
    outlives the call."""
    if weights is None or not refit:
        if terms is None:
            terms = recalibrated_terms(pred, loss, recalibrator, folds, seed)
        return weighted_mean(terms, weights)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateCalibration)
        warnings.simplefilter("ignore", CalibrationNotConverged)
        return torch.stack(
            [
                recalibrated_terms(
                    pred.subset(_resample_rows(w)), loss, recalibrator, folds, seed
                ).mean()
                for w in weights
            ]
        )


@metric()
def refinement_loss(
    pred: Predictions,
    weights: Weights = None,
    *,
    loss: str = "nll",
    recalibrator: str = "ts",
    folds: Folds = None,
    seed: int = 0,
    refit: bool = False,
    terms: torch.Tensor | None = None,
) -> torch.Tensor:
    """Refinement loss ``L(g(p), y)``: the ``loss`` (``"nll"`` or ``"brier"``) of the
    predictions after ``recalibrator`` ``g`` (default ``"ts"``; any registered calibrator,
    e.g. ``"ts-mix"`` or ``"sms"``), fitted on the same rows (``folds=None``) or cross-fitted
    (``folds=K``; see :func:`recalibrated`). Berta et al. (2025) stop training at its minimum.
    ``refit``: refit ``g`` on every bootstrap resample (see the module docstring). ``terms``:
    :func:`recalibrated_terms` ``(pred, loss, recalibrator, folds, seed)`` when already
    computed, so that several calls on ``pred`` (the point, the bootstrap's resamples,
    :func:`calibration_loss`) share one fit; without them each call fits ``g``."""
    _check(pred, loss, recalibrator, folds, weights, refit, terms)
    return _refinement(pred, weights, loss, recalibrator, folds, seed, refit, terms)


@metric()
def calibration_loss(
    pred: Predictions,
    weights: Weights = None,
    *,
    loss: str = "nll",
    recalibrator: str = "ts",
    folds: Folds = None,
    seed: int = 0,
    refit: bool = False,
    terms: torch.Tensor | None = None,
) -> torch.Tensor:
    """Calibration loss ``L(p, y) - L(g(p), y)``: what ``recalibrator`` ``g`` takes off the
    ``loss`` (options as :func:`refinement_loss`). At least 0 for a recalibrator fitted on the
    same rows by that loss whose family holds the identity map (TS on the NLL); cross-fitted,
    it is negative where recalibrating would hurt."""
    _check(pred, loss, recalibrator, folds, weights, refit, terms)
    refinement = _refinement(pred, weights, loss, recalibrator, folds, seed, refit, terms)
    return LOSSES[loss].core(pred, weights) - refinement
