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
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from selfcal._validation import check_choice, check_int
from selfcal.exceptions import CalibrationNotConverged, DegenerateCalibration
from selfcal.metrics._api import metric, weighted_mean
from selfcal.metrics.binning import Weights
from selfcal.metrics.scores import brier, brier_terms, nll, nll_terms
from selfcal.predictions import Predictions

LOSSES = {"nll": nll, "brier": brier}
"""The proper losses the decomposition applies to."""

Folds = int | Sequence[Any] | None
"""``None`` (fit on the rows themselves), ``K`` stratified folds, or the held-out row indices
of each fold."""


TERMS = {"nll": nll_terms, "brier": brier_terms}
"""Each loss's per-row terms (its value is their mean)."""

_last_fit: tuple[weakref.ref[Predictions], tuple[Any, ...], torch.Tensor] | None = None
"""The last :func:`recalibrated_terms` result with its input (held weakly) and options: the
point estimate, the bootstrap and :func:`calibration_loss` of one ``Predictions`` share one fit.
It is dropped when its input is (:func:`_forget`), and it holds ``(N,)`` per-row losses, not the
``(N, C)`` recalibrated probabilities (which at 200,000 x 1,000 took 1,526 MiB of GPU memory)."""


def _forget(held: weakref.ref[Predictions]) -> None:
    """Drop :data:`_last_fit` once its input is gone."""
    global _last_fit
    if _last_fit is not None and _last_fit[0] is held:
        _last_fit = None


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
    bit); cross-fitted, each fold's predictions are formed whole. A repeated call with the same
    ``pred`` object and options returns the last result."""
    global _last_fit
    explicit = folds is not None and not isinstance(folds, (int, np.integer))
    key = (loss, recalibrator, None if explicit else folds, seed)
    if not explicit and _last_fit is not None:
        held, last_key, result = _last_fit
        if held() is pred and last_key == key:
            return result
    result = _recalibrated_terms(pred, TERMS[loss], recalibrator, folds, seed)
    if not explicit:
        _last_fit = (weakref.ref(pred, _forget), key, result)
    return result


def _recalibrated_terms(
    pred: Predictions,
    terms: Callable[[Predictions], torch.Tensor],
    recalibrator: str,
    folds: Folds,
    seed: int,
) -> torch.Tensor:
    """:func:`recalibrated_terms` without its cache."""
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
    from selfcal.posthoc import build_calibrator

    return build_calibrator(recalibrator).fit(pred)


def _cross_fitted(
    pred: Predictions, recalibrator: str, folds: int | Sequence[Any], seed: int
) -> Predictions:
    from selfcal.posthoc.crossfit import out_of_fold_probs, stratified_folds

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


def _check(loss: str, recalibrator: str, folds: Folds, weights: Weights, refit: bool) -> None:
    from selfcal.posthoc import build_calibrator

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
) -> torch.Tensor:
    """Refinement loss ``L(g(p), y)``: the ``loss`` (``"nll"`` or ``"brier"``) of the
    predictions after ``recalibrator`` ``g`` (default ``"ts"``; any registered calibrator,
    e.g. ``"ts-mix"`` or ``"sms"``), fitted on the same rows (``folds=None``) or cross-fitted
    (``folds=K``; see :func:`recalibrated`). Berta et al. (2025) stop training at its minimum.
    ``refit``: refit ``g`` on every bootstrap resample (see the module docstring)."""
    _check(loss, recalibrator, folds, weights, refit)
    if weights is None or not refit:
        return weighted_mean(recalibrated_terms(pred, loss, recalibrator, folds, seed), weights)
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
def calibration_loss(
    pred: Predictions,
    weights: Weights = None,
    *,
    loss: str = "nll",
    recalibrator: str = "ts",
    folds: Folds = None,
    seed: int = 0,
    refit: bool = False,
) -> torch.Tensor:
    """Calibration loss ``L(p, y) - L(g(p), y)``: what ``recalibrator`` ``g`` takes off the
    ``loss`` (options as :func:`refinement_loss`). At least 0 for a recalibrator fitted on the
    same rows by that loss whose family holds the identity map (TS on the NLL); cross-fitted,
    it is negative where recalibrating would hurt."""
    refinement = refinement_loss.core(
        pred, weights, loss=loss, recalibrator=recalibrator, folds=folds, seed=seed, refit=refit
    )
    return LOSSES[loss].core(pred, weights) - refinement
