"""A calibrator chosen for the data: stratified K-fold cross-validation over a stated set of
candidate calibrators on the user's validation predictions, scored by cross-validated NLL
(Brier score or ECE by option); the first candidate (in an order of preference set by the
evidence of large benchmarks) not significantly worse than the lowest score is refitted on
every row.

Nothing here is new mathematics: each candidate is fitted on K - 1 folds and predicts the
held-out fold, so every validation row gets one out-of-fold prediction per candidate; the
criterion of those pooled predictions ranks the candidates, and a paired bootstrap over rows
(the same resamples for every candidate) gives each candidate's difference from the
lowest-scoring one with a centred 95% interval (:func:`selfcal.metrics.bootstrap.interval_bounds`).
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np
import torch

from selfcal._validation import check_choice, check_int
from selfcal.exceptions import CalibrationNotConverged, DegenerateCalibration
from selfcal.metrics import brier, ece, nll
from selfcal.metrics.bootstrap import Resamples, interval_bounds, resampled_values
from selfcal.posthoc._base import Calibrator
from selfcal.posthoc._mixing import mix_confidence, mix_uniform
from selfcal.posthoc.registry import build_calibrator, register_calibrator
from selfcal.posthoc.temperature import shared_temperature_fits
from selfcal.predictions import Predictions

CANDIDATES = ("sms", "svs", "ts-mix", "ts", "ets", "isotonic", "none")
"""The default candidates, in the order of preference that ``selection="first"`` follows:
structured matrix and vector scaling, temperature scaling with and without mixing, ensemble
temperature scaling, mixed top-label isotonic regression, and last no calibration at all.

The order is the evidence of benchmarks over many models: structured matrix scaling ranks
first on multiclass sets in Berta et al.'s CalArena (win rate against temperature scaling
about 0.70 / 0.68 / 0.95 on TabRepo / TabArena / vision) and on selfcal's post-hoc leaderboard
(``results/posthoc``: 0.74 multiclass and 0.69 binary with small validation sets, 0.99
multiclass with large ones), so it is kept unless the user's data show a candidate to be
significantly better; before this order (temperature scaling first) ``auto`` kept temperature
scaling on most small sets and was significantly worse than ``sms`` alone."""
BINARY_CANDIDATES = ("platt", "beta", "quadratic")
"""Inserted after ``ts`` in the default candidates for two classes (CalArena ranks them first
for binary tasks; on selfcal's leaderboard they tie temperature scaling, quadratic scaling is
worse on small validation sets)."""
SELECTIONS = ("first", "best", "simplest")
"""``"simplest"``: the old name of ``"first"`` (the files saved before still load and fit)."""
CRITERIA = {"nll": nll, "brier": brier, "ece": ece}
N_RESAMPLES = 200
"""Bootstrap resamples of the paired intervals in ``cv_results_``."""


@register_calibrator("none")
class Uncalibrated(Calibrator):
    """No calibration: the model's own probabilities, unchanged (a baseline candidate)."""

    def _fit(self, pred: Predictions) -> None:
        pass

    def _all_correct_outcome(self, coverage: Any) -> str:
        return "returned the scores unchanged, as always"

    def _predict(self, pred: Predictions) -> torch.Tensor:
        return pred.probs.double()

    def _module(self, from_probs: bool) -> torch.nn.Module:
        from selfcal.posthoc._modules import TemperatureModule

        return TemperatureModule(1.0, from_probs)


@register_calibrator("auto")
class AutoCalibration(Calibrator):
    """A calibrator chosen for the data: the preferred candidate that cross-validates as well.

    ``fit`` splits the validation rows into ``n_folds`` stratified folds (seeded), fits every
    candidate on ``K - 1`` folds and predicts the held-out one, scores the pooled
    out-of-fold predictions by ``criterion`` (``"nll"``, default; ``"brier"``; ``"ece"``, 15
    bins), compares every candidate with the lowest-scoring one by a paired bootstrap over the
    rows, and chooses (``selection="first"``, default) the first candidate in the list that
    is not significantly worse than the lowest -- a one-standard-error rule, which keeps the
    benchmarks' favourite (structured matrix scaling, :data:`CANDIDATES`) unless the user's
    data show another to be better -- or (``selection="best"``) the lowest itself; then
    refits the choice on every row. A candidate that cannot be fitted on some fold (an error,
    e.g. a binary calibrator on three classes, or isotonic regression without scikit-learn) is
    skipped and its reason recorded; the DegenerateCalibration / not-converged warnings of the
    fold fits are counted, not shown; those of the final refit are re-warned under this
    class's name.

    Parameters
    ----------
    candidates : registered calibrator names, a list or one comma-separated string (default
        ``None``: :data:`CANDIDATES`, plus :data:`BINARY_CANDIDATES` for two classes).
    criterion : ``"nll"`` (default), ``"brier"`` or ``"ece"``.
    selection : ``"first"`` (default) or ``"best"`` (see above; ``"simplest"`` is an old name
        of ``"first"``).
    n_folds : folds of the cross-validation (default 5; at most the number of rows).
    seed : the folds' and the bootstrap's seed (default 0).
    kind : ``"logits"``, ``"probs"`` or ``None`` (default): what a positional score array holds.

    Attributes
    ----------
    chosen_ : str, the chosen candidate's name
    calibrator_ : the chosen calibrator, fitted on every row
    cv_results_ : dict of equal-length lists, one entry per candidate: ``candidate``,
        ``score`` (cross-validated criterion; ``inf`` if it failed), ``difference`` (score
        minus the lowest score), ``low`` / ``high`` (its paired bootstrap 95% interval),
        ``fit_seconds`` (all folds; the first-use imports of a fresh process are done before
        the clock starts), ``warnings`` (in the fold fits), ``error`` (``""``, or why it
        failed)
    """

    _hyperparameters = ("candidates", "criterion", "selection", "n_folds", "seed")
    _fitted_attributes = ("chosen_", "calibrator_", "cv_results_")

    def __init__(
        self,
        candidates: str | tuple[str, ...] | list[str] | None = None,
        criterion: str = "nll",
        selection: str = "first",
        n_folds: int = 5,
        seed: int = 0,
        kind: str | None = None,
    ) -> None:
        self.candidates = candidates
        self.criterion = criterion
        self.selection = selection
        self.n_folds = n_folds
        self.seed = seed
        self.kind = kind

    def _validate_hyperparameters(self) -> None:
        check_choice("criterion", self.criterion, tuple(CRITERIA))
        check_choice("selection", self.selection, SELECTIONS)
        check_int("n_folds", self.n_folds, minimum=2)
        check_int("seed", self.seed, minimum=0)
        if self.candidates is not None:
            names = self._given()
            if not names or not all(isinstance(n, str) and n for n in names):
                raise ValueError(
                    f"candidates must be calibrator names (a list, or one string separated "
                    f"by commas), got {self.candidates!r}"
                )
            for name in names:
                if name == "auto":
                    raise ValueError("candidates cannot include 'auto' itself")
                build_calibrator(name)  # an unknown name is a ValueError naming the known ones

    def _given(self) -> list[str]:
        """The stated candidates (``"ts,svs"`` is ``["ts", "svs"]``)."""
        given = self.candidates
        if isinstance(given, str):
            return [n.strip() for n in given.split(",") if n.strip()]
        return list(given or [])

    def _names(self, n_classes: int) -> list[str]:
        if self.candidates is not None:
            return self._given()
        binary = list(BINARY_CANDIDATES) if n_classes == 2 else []
        return list(CANDIDATES[:4]) + binary + list(CANDIDATES[4:])

    def _fit(self, pred: Predictions) -> None:
        names = self._names(pred.n_classes)
        folds = stratified_folds(pred.require_labels(), self.n_folds, self.seed)
        metric = CRITERIA[self.criterion]
        results: dict[str, list[Any]] = {
            k: [] for k in ("candidate", "score", "fit_seconds", "warnings", "error")
        }
        out_of_fold: dict[str, torch.Tensor] = {}
        splits = fold_splits(pred, folds)
        prepare_fits(names)
        with shared_temperature_fits():  # one solve per fold for TS, TS-mix (SVS, SMS)
            for name in names:
                start = time.perf_counter()
                probs, caught, error = cross_validated(name, pred, splits, self.kind)
                results["candidate"].append(name)
                results["fit_seconds"].append(time.perf_counter() - start)
                results["warnings"].append(caught)
                results["error"].append(error)
                if probs is None:
                    results["score"].append(float("inf"))
                    continue
                out_of_fold[name] = probs
                held_out = Predictions.from_probs(probs, pred.require_labels())
                results["score"].append(float(metric.core(held_out)))
        if not out_of_fold:
            raise ValueError(
                f"AutoCalibration: no candidate could be fitted ({names[0]}: {results['error'][0]})"
            )
        warn_single_row_classes(pred)
        best = names[int(np.argmin(results["score"]))]
        results.update(paired_intervals(out_of_fold, names, best, pred, metric, self.seed))
        self.cv_results_ = results
        self.chosen_ = best
        if self.selection != "best":  # the first not significantly worse than the lowest
            self.chosen_ = next(n for n, low in zip(names, results["low"]) if low <= 0.0)
        self.calibrator_ = self._refit(pred)

    def _refit(self, pred: Predictions) -> Calibrator:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            calibrator = build_calibrator(self.chosen_, kind=self.kind).fit(pred)
        for w in caught:
            if issubclass(w.category, (DegenerateCalibration, CalibrationNotConverged)):
                warnings.warn(
                    f"{type(self).__name__}: chose {self.chosen_!r}, whose fit on every row "
                    f"says: {w.message}",
                    w.category,
                    stacklevel=5,
                )
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return calibrator

    def _warn_coverage(self, coverage: Any) -> None:
        """The chosen calibrator's own fit has warned (re-warned by :meth:`_refit`)."""

    def _predict(self, pred: Predictions) -> torch.Tensor:
        inner = self.calibrator_
        p = inner._predict(inner._floored(pred))
        eps = inner._mix_weight()
        return mix_uniform(p, eps) if eps else p

    def _confidence(self, pred: Predictions) -> torch.Tensor:
        inner = self.calibrator_
        conf = inner._confidence(inner._floored(pred))
        eps = inner._mix_weight()
        return mix_confidence(conf, eps, pred.n_classes) if eps else conf

    def _module(self, from_probs: bool) -> torch.nn.Module:
        return self.calibrator_.to_module("probs" if from_probs else "logits")


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


def prepare_fits(names: list[str]) -> None:
    """Each candidate's ``_prepare_fit``, so that ``fit_seconds`` times its fits rather than,
    in a fresh process, the first import of scikit-learn or scipy's optimisers."""
    for name in names:
        try:
            type(build_calibrator(name))._prepare_fit()
        except ImportError:  # an optional package missing: its fold fits record why
            pass


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


Split = tuple[Predictions, Predictions, torch.Tensor]
"""A fold: the other folds' predictions (fitted on), its own (predicted) and its row indices."""


def fold_splits(pred: Predictions, folds: list[np.ndarray]) -> list[Split]:
    """The :data:`Split` of each fold, one set of objects shared by every candidate (so that
    what a fit derives from its predictions, and a temperature solved within
    :func:`~selfcal.posthoc.temperature.shared_temperature_fits`, is computed once)."""
    n = pred.n_samples
    out = []
    for rows in folds:
        held_out = torch.as_tensor(rows, device=pred.device)
        train = torch.as_tensor(np.setdiff1d(np.arange(n), rows), device=pred.device)
        out.append((pred.subset(train), pred.subset(held_out), held_out))
    return out


def cross_validated(
    name: str, pred: Predictions, splits: list[Split], kind: str | None
) -> tuple[torch.Tensor | None, int, str]:
    """Out-of-fold probabilities of candidate ``name`` on :func:`fold_splits` (``None`` when
    a fold's fit fails), the number of warnings its fold fits raised, and the failure's
    one-line reason."""
    out = torch.empty(pred.n_samples, pred.n_classes, dtype=torch.float64, device=pred.device)
    caught = 0
    for train, held_out, rows in splits:
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            try:
                p = build_calibrator(name, kind=kind).fit(train).predict_proba(held_out)
                out[rows] = torch.as_tensor(p, dtype=torch.float64, device=pred.device)
            except (ValueError, ImportError) as error:  # e.g. binary-only, needs scikit-learn
                return None, caught + len(record), str(error).splitlines()[0]
        caught += len(record)
    return out, caught, ""


def paired_intervals(
    out_of_fold: dict[str, torch.Tensor],
    names: list[str],
    reference: str,
    pred: Predictions,
    metric: Any,
    seed: int,
) -> dict[str, list[float]]:
    """Each candidate's criterion minus ``reference``'s, with a centred 95% interval from
    :data:`N_RESAMPLES` paired bootstrap resamples of the rows (NaN for failed candidates)."""
    labels = pred.require_labels()
    resamples = Resamples(pred.n_samples, N_RESAMPLES, seed, pred.device)

    def values(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        held_out = Predictions.from_probs(p, labels)
        point = metric.core(held_out)
        return point, resampled_values(
            lambda w: metric.core(held_out, weights=w),
            pred.n_samples,
            N_RESAMPLES,
            seed,
            pred.device,
            resamples,
        )

    base, base_values = values(out_of_fold[reference])
    out: dict[str, list[float]] = {"difference": [], "low": [], "high": []}
    for name in names:
        if name not in out_of_fold:
            for key in out:
                out[key].append(float("nan"))
            continue
        point, resampled = values(out_of_fold[name])
        low, high = interval_bounds(resampled - base_values, point - base, 0.95)
        out["difference"].append(float(point - base))
        out["low"].append(float(low))
        out["high"].append(float(high))
    return out
