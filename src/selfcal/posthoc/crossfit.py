"""Cross-validation of calibrators on one set of validation predictions: stratified folds,
each candidate fitted on the other folds and predicting its held-out fold, and paired bootstrap
intervals between candidates' cross-validated scores. What :class:`~selfcal.posthoc.AutoCalibration`
chooses by, and what the cross-fitted refinement metrics (:mod:`selfcal.recalibration`)
recalibrate with.

Nothing here is new mathematics: each candidate is fitted on K - 1 folds and predicts the
held-out fold, so every validation row gets one out-of-fold prediction per candidate (or,
when only some of the folds are held out -- a single held-out split of a large set -- every
held-out row); the criterion of those pooled predictions ranks the candidates, and a paired
bootstrap over rows (the same resamples for every candidate) gives each candidate's
difference from another with a centred 95% interval
(:func:`selfcal.metrics.bootstrap.interval_bounds`).
"""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from selfcal.exceptions import DegenerateCalibration
from selfcal.metrics.bootstrap import Resamples, interval_bounds, resampled_values
from selfcal.posthoc._base import Calibrator
from selfcal.posthoc._temperature_fits import TemperatureFits
from selfcal.posthoc.registry import build_calibrator
from selfcal.predictions import Predictions

N_RESAMPLES = 200
"""Bootstrap resamples of the paired intervals."""

Kept = Callable[[Predictions], torch.Tensor]
"""What is kept of a fold's out-of-fold predictions: per-row terms of the criterion
(``(n,)``), or the probabilities themselves (``(n, C)``)."""
Scorer = Callable[[torch.Tensor | None], torch.Tensor]
"""A candidate's criterion on its out-of-fold predictions: the point (weights ``None``), or
``(B,)`` values under ``(B, N)`` resampling weights."""


def stratified_folds(labels: torch.Tensor, n_folds: int, seed: int) -> list[np.ndarray]:
    """Held-out row indices of ``min(n_folds, N)`` stratified folds: each class's rows are
    shuffled (seeded) and dealt round-robin, continuing from fold to fold across classes, so
    every fold holds each class's rows within one and the fold sizes differ by at most one.
    (Written here rather than importing scikit-learn's ``StratifiedKFold``, whose import
    costs about two seconds on these CPUs -- more than a whole ``auto`` fit of small data.)"""
    y = labels.cpu().numpy()
    k = min(n_folds, len(y))
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(np.flatnonzero(y == c)) for c in np.unique(y)])
    fold_of = np.empty(len(y), dtype=np.int64)
    fold_of[order] = np.arange(len(y)) % k
    return [np.flatnonzero(fold_of == f) for f in range(k)]


def random_folds(n: int, n_folds: int, seed: int) -> list[np.ndarray]:
    """Held-out row indices of ``min(n_folds, n)`` random folds: the rows in a seeded random
    order, dealt round-robin (fold sizes differ by at most one), each fold's rows sorted.

    Not stratified, unlike :func:`stratified_folds`: a stratified fold has the class
    frequencies of the whole validation set, so per-class parameters fitted on the other
    folds are rewarded for matching frequencies that a new sample of the same distribution
    will not share. On 50,000 synthetic validation rows of 1,000 classes with labels drawn
    independently, stratified cross-validation called structured vector scaling significantly
    better than temperature scaling (-0.0004 nats [-0.0008, -0.0002]) while on as many test
    rows it was significantly worse (+0.0009 [+0.0006, +0.0013]); random folds called it
    worse (+0.0007 [+0.0004, +0.0010]), and ``auto`` kept temperature scaling
    (``scripts/auto_folds.py``). ``auto`` uses them past 20,000 rows."""
    k = min(n_folds, n)
    order = np.random.default_rng(seed).permutation(n)
    return [np.sort(order[f::k]) for f in range(k)]


PREDICT_ELEMENTS = 1 << 21
"""Scores of the held-out rows predicted at a time (16 MiB of float64 probabilities): a fold's
``(n, C)`` probabilities are never formed whole, only what is kept of them."""


def held_out_chunks(rows: np.ndarray, n_classes: int) -> list[np.ndarray]:
    """A fold's held-out rows in consecutive pieces of about :data:`PREDICT_ELEMENTS` scores
    (one piece, the whole fold, below that)."""
    size = max(1, PREDICT_ELEMENTS // n_classes)
    return [rows[start : start + size] for start in range(0, len(rows), size)]


@dataclass
class Outcome:
    """One candidate's cross-validation: what was kept of its out-of-fold predictions
    (``None`` when a fold's fit failed), the seconds its fits took, the warnings they raised
    and the failure's one-line reason."""

    name: str
    kept: torch.Tensor | None = None
    seconds: float = 0.0
    warnings: int = 0
    error: str = ""
    _filled: list[torch.Tensor] = field(default_factory=list, repr=False)


def cross_validate(
    names: list[str],
    pred: Predictions,
    folds: list[np.ndarray],
    kind: str | None,
    keep: Kept,
    shared: TemperatureFits | None = None,
    factories: Mapping[str, Callable[[], Calibrator]] | None = None,
) -> list[Outcome]:
    """Every candidate of ``names`` fitted on each fold's other rows and predicting the fold,
    fold by fold: one fold's training rows at a time, shared by every candidate (so that a
    temperature solved through ``shared``, a
    :class:`~selfcal.posthoc._temperature_fits.TemperatureFits`, is solved once a fold), and
    the held-out rows predicted in pieces (:func:`held_out_chunks`); ``keep`` of those
    predictions is assembled over the rows. A candidate that fails on a fold (a
    ``ValueError``, e.g. a binary calibrator on three classes, or an ``ImportError``, e.g.
    isotonic regression without scikit-learn) is dropped from the later folds with its
    reason. Folds that do not cover every row (a single held-out split) keep the held-out
    rows' values only (:func:`held_out_rows`). A name in ``factories`` is built by its
    factory (a configured calibrator: ``auto``'s group-wise candidate around its base), every
    other by :func:`~selfcal.posthoc.registry.build_calibrator` with ``kind``."""
    outcomes = [Outcome(name) for name in names]
    everything = np.arange(pred.n_samples)
    for rows in folds:
        train = pred.subset(torch.as_tensor(np.setdiff1d(everything, rows), device=pred.device))
        for outcome in outcomes:
            if not outcome.error:
                build = (factories or {}).get(outcome.name)
                build = build or functools.partial(build_calibrator, outcome.name, kind=kind)
                _fit_fold(outcome, train, pred, rows, build, keep, shared)
    for outcome in outcomes:
        if not outcome.error:
            outcome.kept = _assembled(outcome._filled, folds, pred)
        outcome._filled = []
    return outcomes


def _fit_fold(
    outcome: Outcome,
    train: Predictions,
    pred: Predictions,
    rows: np.ndarray,
    build: Callable[[], Calibrator],
    keep: Kept,
    shared: TemperatureFits | None,
) -> None:
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        try:
            calibrator = build()
            fitted = calibrator.share_temperature_fits(shared).fit(train)
            parts = []
            for piece in held_out_chunks(rows, pred.n_classes):
                held_out = pred.subset(torch.as_tensor(piece, device=pred.device))
                p = fitted.predict_proba(held_out)
                probs = torch.as_tensor(p, dtype=torch.float64, device=pred.device)
                parts.append(keep(Predictions.from_probs(probs, held_out.labels)))
            outcome._filled.append(torch.cat(parts))
        except (ValueError, ImportError) as error:
            outcome.error = str(error).splitlines()[0]
    outcome.seconds += time.perf_counter() - start
    outcome.warnings += len(record)


def held_out_rows(folds: list[np.ndarray]) -> np.ndarray:
    """The rows the folds hold out, in order: every row when they partition the rows (K-fold
    cross-validation), only the held-out ones when some rows are never held out (a single
    held-out split: :func:`~selfcal.posthoc.auto.folds_for`)."""
    return np.sort(np.concatenate(folds))


def _assembled(
    parts: list[torch.Tensor], folds: list[np.ndarray], pred: Predictions
) -> torch.Tensor:
    """The folds' kept values in the order of :func:`held_out_rows` (row order when the folds
    partition the rows)."""
    rows = held_out_rows(folds)
    out = torch.empty((len(rows), *parts[0].shape[1:]), dtype=parts[0].dtype, device=pred.device)
    for fold, part in zip(folds, parts):
        out[torch.as_tensor(np.searchsorted(rows, fold), device=pred.device)] = part
    return out


def out_of_fold_probs(
    name: str, pred: Predictions, folds: list[np.ndarray], kind: str | None
) -> tuple[torch.Tensor | None, str]:
    """Out-of-fold probabilities of calibrator ``name`` (``None`` with the reason when a fold's
    fit fails)."""
    (outcome,) = cross_validate([name], pred, folds, kind, lambda held: held.probs)
    return outcome.kept, outcome.error


def paired_intervals(
    scorers: dict[str, Scorer],
    names: list[str],
    reference: str,
    n: int,
    seed: int,
    device: torch.device,
) -> dict[str, list[float]]:
    """Each candidate's score minus ``reference``'s (``difference``) with a centred 95%
    interval (``low``, ``high``) from :data:`N_RESAMPLES` paired bootstrap resamples of the
    ``n`` rows (the same for every candidate); NaN for a candidate without a scorer."""
    resamples = Resamples(n, N_RESAMPLES, seed, device)

    def values(score: Scorer) -> tuple[torch.Tensor, torch.Tensor]:
        return score(None), resampled_values(score, n, N_RESAMPLES, seed, device, resamples)

    base, base_values = values(scorers[reference])
    out: dict[str, list[float]] = {"difference": [], "low": [], "high": []}
    for name in names:
        if name not in scorers:
            for key in out:
                out[key].append(float("nan"))
            continue
        point, resampled = values(scorers[name])
        low, high = interval_bounds(resampled - base_values, point - base, 0.95)
        out["difference"].append(float(point - base))
        out["low"].append(float(low))
        out["high"].append(float(high))
    return out


def warn_single_row_classes(pred: Predictions) -> None:
    """Warn (:class:`~selfcal.exceptions.DegenerateCalibration`) when a class has a single
    validation row: the fold that holds it out fits every candidate without that class, so the
    cross-validated scores, and the choice made from them, rest on fits that never saw it."""
    counts = torch.bincount(pred.require_labels(), minlength=pred.n_classes).cpu()
    single = torch.nonzero(counts == 1).squeeze(1).tolist()
    if single:
        shown = ", ".join(map(str, single[:10])) + (", ..." if len(single) > 10 else "")
        warnings.warn(
            f"AutoCalibration: {len(single)} class(es) have a single validation row (class "
            f"{shown}), so the fold holding that row out fits every candidate without its "
            "class: the cross-validated scores and the choice are unreliable. Fit on more "
            "validation rows, stratified, with at least two rows of every class.",
            DegenerateCalibration,
            stacklevel=4,
        )
