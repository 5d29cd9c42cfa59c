"""A calibrator chosen for the data: K-fold cross-validation (a single held-out split on large
sets) over a stated set of candidate calibrators on the user's validation predictions, scored
by cross-validated NLL (Brier score or ECE by option) with paired bootstrap intervals
(:mod:`selfcal.posthoc.crossfit`); the first candidate, in an order of preference set
by the evidence of large benchmarks, that is not significantly worse than the lowest score is
refitted on every row. Which candidate fits the data is decided by that evidence at every
size; the problem's size sets only what the cross-validation costs -- fewer folds held out
on large sets (:func:`folds_for`), and a candidate left out only where its fit cannot be
afforded (:func:`default_candidates`).
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, ClassVar

import numpy as np
import torch

from selfcal._validation import check_choice, check_int
from selfcal.estimator import Check
from selfcal.estimator.loading import MAPPING, TEXT, Fitted
from selfcal.exceptions import CalibrationNotConverged, DegenerateCalibration
from selfcal.metrics import brier, ece, nll
from selfcal.metrics._api import weighted_mean
from selfcal.metrics.scores import brier_terms, nll_terms
from selfcal.posthoc._auto_groups import fit_with_groups, group_folds
from selfcal.posthoc._base import CALIBRATOR, Calibrator
from selfcal.posthoc._costs import SCAN_ENTRIES, memory_refusal
from selfcal.posthoc._temperature_fits import TemperatureFits
from selfcal.posthoc.crossfit import (
    Kept,
    Outcome,
    Scorer,
    cross_validate,
    held_out_rows,
    paired_intervals,
    random_folds,
    stratified_folds,
    warn_single_row_classes,
)
from selfcal.posthoc.registry import build_calibrator, register_calibrator
from selfcal.predictions import Predictions

CANDIDATES = ("sms", "svs", "vector", "ts-mix", "ts", "ets", "isotonic", "none")
"""The default candidates, in the order of preference that ``selection="first"`` follows:
structured matrix, structured vector and vector scaling, temperature scaling with and without
mixing, ensemble temperature scaling, mixed top-label isotonic regression, and last no
calibration at all.

The order is the evidence of benchmarks over many models: structured matrix scaling ranks
first on multiclass sets in Berta et al.'s CalArena (win rate against temperature scaling
about 0.70 / 0.68 / 0.95 on TabRepo / TabArena / vision) and on selfcal's post-hoc
leaderboards (``results/posthoc``: 0.74 multiclass and 0.69 binary with small validation sets,
0.99 multiclass with large ones; ``results/posthoc-real``), so it is kept unless the user's
data show a candidate to be significantly better; before this order (temperature scaling
first) ``auto`` kept temperature scaling on most small sets and was significantly worse than
``sms`` alone. Requiring instead that a candidate cross-validate significantly better than
temperature scaling (tried in this version) made ``auto`` never worse than temperature scaling
on the 42 shared prediction sets but better on 22 of them instead of 35, and significantly
*worse* than temperature scaling on the leaderboard's small binary sets (NLL +0.021 [+0.002,
+0.058]), where temperature scaling's own fold fits on a few dozen rows are unstable.

Vector scaling (per-class scales and biases on the logits, ridge-penalised as SVS is) stands
after SVS: CalArena ranks SVS above it on every multiclass benchmark (mean rank 2.95 against
4.55 on vision, 6.90 against 7.29 on TabRepo), and on ImageNet its unpenalised vector scaling
was worse than no calibration on 7 of 8 models; on the 20 CIFAR-100 shared sets SVS beat
temperature scaling on 20, vector scaling on 3. So it is chosen only where the user's data
call both structured fits significantly worse than the lowest score. Cross-validation catches
its over-fitting: at 50,000 x 1,000, on logits that temperature scaling calibrates exactly, the
held-out split called it significantly worse than temperature scaling (its test NLL: +0.0004;
``benchmarks/results/auto_scale.md``)."""
BINARY_CANDIDATES = ("platt", "beta", "quadratic")
"""Inserted after ``ts`` in the default candidates for two classes (CalArena ranks them first
for binary tasks; on selfcal's leaderboard they tie temperature scaling, quadratic scaling is
worse on small validation sets)."""
BASELINE = "ts"
"""The candidate every other is also compared with in ``cv_results_`` (``ts_difference``)."""
FOLD_ROWS = 80_000
"""``n_folds="auto"``: ``K = 1 + FOLD_ROWS // N`` folds, between 2 and 5 -- five up to 20,000
validation rows; fewer beyond, so that the fold fits see about ``FOLD_ROWS`` rows in all
(each fold's fit has ``(K - 1) N / K`` rows)."""
HELD_OUT_ROWS = 20_000
"""``n_folds="auto"``: only as many of the ``K`` folds are held out (fitted on the others and
scored) as hold out this many rows (:func:`scored_folds`): every fold up to 26,667 rows, one
past 40,000 -- with 50,000 rows each candidate fitted once on 25,000 rows, half the cost of
two folds, which keeps SMS affordable (``auto`` at most 31 s at 50,000 x 1,000, two threads).
It separates what matters there: on temperature scaling's own map it called SMS, SVS and
vector scaling significantly worse than TS (test NLL +0.0028, +0.0008, +0.0004), on
class-wise maps SMS significantly better than all (``benchmarks/results/auto_scale.md``)."""
MAX_FOLDS = 5
STRATIFIED_ROWS = 20_000
"""Up to this many validation rows the folds are stratified by label (:func:`folds_for`)."""
SELECTIONS = ("first", "best", "simplest")
"""``"simplest"``: the old name of ``"first"`` (the files saved before still load and fit)."""
CRITERIA = {"nll": nll, "brier": brier, "ece": ece}
TERMS = {"nll": nll_terms, "brier": brier_terms}
"""The criteria that are means of per-row terms (the others keep the probabilities)."""


def default_candidates(pred: Predictions) -> tuple[list[str], dict[str, str]]:
    """:data:`CANDIDATES` (with :data:`BINARY_CANDIDATES` after ``ts`` for two classes), less
    those whose cost the problem's size rules out (:data:`~selfcal.posthoc._costs.SCAN_ENTRIES`,
    :func:`~selfcal.posthoc._costs.memory_refusal`), with the reason each is left out."""
    n, c = pred.n_samples, pred.n_classes
    binary = list(BINARY_CANDIDATES) if c == 2 else []
    after_ts = CANDIDATES.index("ts") + 1
    names = list(CANDIDATES[:after_ts]) + binary + list(CANDIDATES[after_ts:])
    left_out = {}
    too_large = memory_refusal("sms", c)
    if too_large is not None:
        left_out["sms"] = too_large
    if n * c > SCAN_ENTRIES:
        left_out["ets"] = (
            f"left out: its fit scans the {n * c:,} scores about 75 times (above "
            f"{SCAN_ENTRIES:,} scores)"
        )
    return names, left_out


def folds_for(labels: torch.Tensor, n_folds: int | str, seed: int) -> list[np.ndarray]:
    """The held-out rows of each fold: :func:`fold_count` folds, stratified by label up to
    :data:`STRATIFIED_ROWS` rows (every class in every fold, as small sets need), random
    beyond (:func:`~selfcal.posthoc.crossfit.random_folds`: stratified folds reward
    per-class fits for matching the validation set's own class frequencies, which at 1,000
    classes made ``auto`` choose structured vector scaling where the test rows called it worse
    than temperature scaling; ``scripts/auto_folds.py``); for ``n_folds="auto"`` only the
    first :func:`scored_folds` of them (past 40,000 rows, one: a single held-out split)."""
    n = labels.shape[0]
    k = fold_count(n_folds, n)
    folds = stratified_folds(labels, k, seed) if n <= STRATIFIED_ROWS else random_folds(n, k, seed)
    return folds[: scored_folds(k, n)] if n_folds == "auto" else folds


def fold_count(n_folds: int | str, n: int) -> int:
    """The folds of ``n`` rows: ``n_folds``, or for ``"auto"`` :data:`FOLD_ROWS`'s rule."""
    if n_folds == "auto":
        return min(MAX_FOLDS, max(2, 1 + FOLD_ROWS // n))
    return int(n_folds)


def scored_folds(k: int, n: int) -> int:
    """How many of ``k`` folds of ``n`` rows ``n_folds="auto"`` holds out: the fewest that
    hold out :data:`HELD_OUT_ROWS` rows, ``ceil(HELD_OUT_ROWS k / n)``, at most ``k``."""
    return min(k, -(-HELD_OUT_ROWS * k // n))


@register_calibrator("none")
class Uncalibrated(Calibrator):
    """No calibration: the model's own probabilities, unchanged (a baseline candidate)."""

    def _fit(self, pred: Predictions) -> None:
        pass

    def _all_correct_outcome(self, coverage: Any) -> str:
        return "returned the scores unchanged, as always"

    _tied_errors_outcome = _all_correct_outcome

    def _predict(self, pred: Predictions) -> torch.Tensor:
        return pred.probs.double()

    def _module(self, from_probs: bool) -> torch.nn.Module:
        from selfcal.posthoc._modules import TemperatureModule

        return TemperatureModule(1.0, from_probs)


def candidate_names(given: str | tuple[str, ...] | list[str] | None) -> list[str]:
    """The stated candidates as a list (``"ts,svs"`` is ``["ts", "svs"]``; ``None`` none)."""
    if isinstance(given, str):
        return [n.strip() for n in given.split(",") if n.strip()]
    return list(given or [])


def check_candidates(given: object) -> None:
    """``None`` (the default candidates) or calibrator names other than ``auto``."""
    if given is None:
        return
    names = candidate_names(given) if isinstance(given, str | tuple | list) else []
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ValueError(
            f"candidates must be calibrator names (a list, or one string separated by commas), "
            f"got {given!r}"
        )
    for name in names:
        if name == "auto":
            raise ValueError("candidates cannot include 'auto' itself")
        build_calibrator(name)  # an unknown name is a ValueError naming the known ones


@register_calibrator("auto")
class AutoCalibration(Calibrator):
    """A calibrator chosen for the data: the preferred candidate that cross-validates as well.

    ``fit`` splits the validation rows into folds (seeded; stratified by label up to 20,000
    rows, random beyond: :func:`folds_for`), fits every candidate on ``K - 1`` folds and
    predicts the held-out one (for each held-out fold), scores the pooled out-of-fold
    predictions by ``criterion``
    (``"nll"``, default; ``"brier"``; ``"ece"``, 15 bins), compares every candidate with the
    lowest-scoring one (and with temperature scaling, for the record) by paired bootstraps over
    the rows, and chooses (``selection="first"``, default) the first candidate in the list that
    is not significantly worse than the lowest -- a one-standard-error rule, which keeps the
    benchmarks' favourite (structured matrix scaling, :data:`CANDIDATES`) unless the user's
    data show another to be better -- or (``selection="best"``) the lowest itself; then refits
    the choice on every row. A candidate
    that cannot be fitted on some fold (an error, e.g. a binary calibrator on three classes,
    or isotonic regression without scikit-learn) is skipped and its reason recorded; the
    DegenerateCalibration / not-converged warnings of the fold fits are counted, not shown;
    those of the final refit are re-warned under this class's name.

    With groups (``groups=``, or carried by the predictions), the group-aware candidates
    join the others -- :class:`~selfcal.posthoc.GroupwiseCalibration` around the candidate
    chosen without groups, and ``multicalibration`` where it is registered -- every candidate
    is cross-validated on folds stratified by group, and a group-aware one is chosen only if its
    mean held-out NLL (``criterion``) is significantly lower than that choice's and its worst
    group's is not higher (the rule: :mod:`selfcal.posthoc._auto_groups`); ``cv_results_`` then
    holds ``worst_group`` and ``groupless_difference`` / ``_low`` / ``_high`` too. Predictions
    need groups only when the choice uses them (:meth:`needs_groups`). Without groups nothing
    changes.

    Decided by evidence at every size; sized by cost: ``n_folds="auto"`` (default) takes five
    folds up to 20,000 rows and fewer beyond (:func:`fold_count`), and holds out only enough of
    them to hold out 20,000 rows -- past 40,000 rows a single held-out split, every candidate
    fitted once on half the rows (:func:`folds_for`). The default candidates leave out only
    what cannot be afforded: ensemble temperature scaling past 10^5 scores, structured matrix
    scaling past 4 * 10^6 parameters (about 2,000 classes; :func:`default_candidates`).

    Parameters
    ----------
    candidates : registered calibrator names, a list or one comma-separated string (default
        ``None``: :func:`default_candidates`).
    criterion : ``"nll"`` (default), ``"brier"`` or ``"ece"``.
    selection : ``"first"`` (default) or ``"best"`` (see above; ``"simplest"`` is an old name
        of ``"first"``).
    n_folds : ``"auto"`` (default: :func:`fold_count`) or the number of folds (at least 2; at
        most the number of rows).
    seed : the folds' and the bootstrap's seed (default 0).
    kind : ``"logits"``, ``"probs"`` or ``None`` (default): what a positional score array holds.

    Attributes
    ----------
    chosen_ : str, the chosen candidate's name
    calibrator_ : the chosen calibrator, fitted on every row
    cv_results_ : dict of equal-length lists, one entry per candidate: ``candidate``,
        ``score`` (cross-validated criterion; ``inf`` if it failed or was left out),
        ``difference`` (score minus the lowest score), ``low`` / ``high`` (its paired bootstrap
        95% interval), ``ts_difference`` / ``ts_low`` / ``ts_high`` (the same against
        temperature scaling, where it is a candidate), ``fit_seconds`` (all folds; the
        first-use imports of a fresh process are done before the clock starts), ``warnings``
        (in the fold fits), ``error`` (``""``, or why it failed or was left out)
    """

    _parameters: ClassVar[dict[str, Check]] = {
        "candidates": lambda name, value: check_candidates(value),
        "criterion": functools.partial(check_choice, choices=tuple(CRITERIA)),
        "selection": functools.partial(check_choice, choices=SELECTIONS),
        "n_folds": lambda name, value: value == "auto" or check_int(name, value, minimum=2),
        "seed": functools.partial(check_int, minimum=0),
    }
    _fitted_attributes = ("chosen_", "calibrator_", "cv_results_")
    _version_1_lacks = ("selection",)
    _fitted_schema: ClassVar[dict[str, Fitted]] = {
        "chosen_": Fitted(TEXT),
        "calibrator_": Fitted(CALIBRATOR),
        "cv_results_": Fitted(MAPPING),
    }

    accepts_groups: ClassVar[bool] = True

    def needs_groups(self) -> bool:
        """Whether the fitted choice uses groups (then predictions need ``groups=``)."""
        return hasattr(self, "calibrator_") and self.calibrator_.needs_groups()

    def _probe_groups(self, n_rows: int) -> list[str] | None:
        return self.calibrator_._probe_groups(n_rows)

    def _check_loaded(self) -> None:
        """The loaded choice names the calibrator it holds, fitted on as many classes."""
        inner = self.calibrator_
        if type(build_calibrator(self.chosen_)) is not type(inner):
            raise ValueError(f"chosen_ {self.chosen_!r} is not the {type(inner).__name__} held")
        if inner.n_classes_ != self.n_classes_:
            raise ValueError("calibrator_ was fitted on another number of classes")
        super()._check_loaded()

    def __init__(
        self,
        candidates: str | tuple[str, ...] | list[str] | None = None,
        criterion: str = "nll",
        selection: str = "first",
        n_folds: int | str = "auto",
        seed: int = 0,
        kind: str | None = None,
    ) -> None:
        self.candidates = candidates
        self.criterion = criterion
        self.selection = selection
        self.n_folds = n_folds
        self.seed = seed
        self.kind = kind

    def _given(self) -> list[str]:
        """The stated candidates (``"ts,svs"`` is ``["ts", "svs"]``)."""
        return candidate_names(self.candidates)

    def _fit(self, pred: Predictions) -> None:
        names, left_out = (self._given(), {}) if self.candidates else default_candidates(pred)
        if pred.groups is not None:  # the group-aware candidates too (_auto_groups)
            k = fold_count(self.n_folds, pred.n_samples)
            held = scored_folds(k, pred.n_samples) if self.n_folds == "auto" else k
            folds = group_folds(pred, k, held, self.seed, STRATIFIED_ROWS)
            fit_with_groups(self, pred, names, left_out, folds, prepare_fits)
            return
        folds = folds_for(pred.require_labels(), self.n_folds, self.seed)
        prepare_fits([n for n in names if n not in left_out])
        if self._cross_validate(pred, names, left_out, folds) is not None:
            self.chosen_ = self._choose()
            self.calibrator_ = self._refit(pred)

    def _cross_validate(
        self, pred: Predictions, names: list[str], left_out: dict[str, str], folds: Any
    ) -> tuple[list[Outcome], torch.Tensor] | None:
        """Cross-validate ``names`` (less ``left_out``) on ``folds``, set ``cv_results_``: the
        outcomes and held-out rows, or ``None`` when none could be fitted (:meth:`_fall_back`)."""
        fitted = [n for n in names if n not in left_out]
        shared = TemperatureFits()  # one solve per fold for TS, TS-mix, SVS, SMS
        outcomes = cross_validate(fitted, pred, folds, self.kind, self._kept(), shared)
        if all(o.kept is None for o in outcomes):
            self._fall_back(names, outcomes, left_out, pred)
            return None
        warn_single_row_classes(pred)
        held_out = torch.as_tensor(held_out_rows(folds), device=pred.device)
        labels = pred.require_labels()[held_out]
        self.cv_results_ = self._results(names, outcomes, left_out, labels)
        return outcomes, held_out

    def _fall_back(
        self, names: list[str], outcomes: list[Outcome], left_out: dict[str, str], pred: Predictions
    ) -> None:
        """No candidate could be fitted on the folds (a class with too few rows for them):
        the identity-like choice, ``none``, with a warning about the user's rows."""
        counts = torch.bincount(pred.require_labels(), minlength=pred.n_classes).cpu()
        present = counts[counts > 0]
        by_name = {o.name: o for o in outcomes}
        self.cv_results_ = {
            "candidate": names,
            "score": [float("inf")] * len(names),
            "fit_seconds": [by_name[n].seconds if n in by_name else 0.0 for n in names],
            "warnings": [by_name[n].warnings if n in by_name else 0 for n in names],
            "error": [by_name[n].error if n in by_name else left_out[n] for n in names],
        }
        self.chosen_ = "none"
        self.calibrator_ = self._refit(pred)
        warnings.warn(
            f"AutoCalibration: no candidate could be cross-validated on these {pred.n_samples} "
            f"validation rows (the smallest class has {int(present.min())} of them, too few "
            f"for {len(folds_for(pred.require_labels(), self.n_folds, self.seed))} folds); "
            "returned the scores unchanged ('none'). Fit on more validation rows, stratified, "
            "with several rows of every class.",
            DegenerateCalibration,
            stacklevel=4,
        )

    def _kept(self) -> Kept:
        """What the cross-validation keeps of each fold's predictions: the criterion's per-row
        terms, or (ECE) the probabilities."""
        terms = TERMS.get(self.criterion)
        return terms if terms is not None else (lambda held_out: held_out.probs)

    def _scorer(self, kept: torch.Tensor, labels: torch.Tensor) -> Scorer:
        """The criterion of the out-of-fold predictions kept."""
        if self.criterion in TERMS:
            return lambda weights: weighted_mean(kept, weights)
        held_out = Predictions.from_probs(kept, labels)
        return lambda weights: CRITERIA[self.criterion].core(held_out, weights=weights)

    def _results(
        self,
        names: list[str],
        outcomes: list[Outcome],
        left_out: dict[str, str],
        labels: torch.Tensor,
    ) -> dict[str, list[Any]]:
        """``cv_results_``: every candidate in ``names`` order, scores and intervals over the
        held-out rows, whose ``labels`` are given."""
        by_name = {o.name: o for o in outcomes}
        scorers = {o.name: self._scorer(o.kept, labels) for o in outcomes if o.kept is not None}
        scores = {name: float(score(None)) for name, score in scorers.items()}
        results: dict[str, list[Any]] = {
            "candidate": names,
            "score": [scores.get(n, float("inf")) for n in names],
            "fit_seconds": [by_name[n].seconds if n in by_name else 0.0 for n in names],
            "warnings": [by_name[n].warnings if n in by_name else 0 for n in names],
            "error": [by_name[n].error if n in by_name else left_out[n] for n in names],
        }
        lowest = min(scores, key=lambda n: (scores[n], names.index(n)))
        n, seed = labels.shape[0], self.seed
        results.update(paired_intervals(scorers, names, lowest, n, seed, labels.device))
        if BASELINE in scorers:
            against = paired_intervals(scorers, names, BASELINE, n, seed, labels.device)
            results.update({f"ts_{key}": values for key, values in against.items()})
        return results

    def _choose(self) -> str:
        """:meth:`fit`'s choice from ``cv_results_`` (the class docstring's rule)."""
        r = self.cv_results_
        if self.selection == "best":
            return r["candidate"][int(np.argmin(r["score"]))]
        return next(n for n, low in zip(r["candidate"], r["low"], strict=True) if low <= 0.0)

    def _refit(self, pred: Predictions, **params: Any) -> Calibrator:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            calibrator = build_calibrator(self.chosen_, kind=self.kind, **params).fit(pred)
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

    def _coverage_problems(self, coverage: Any) -> list[str]:
        """None: the chosen calibrator's own fit has warned (re-warned by :meth:`_refit`)."""
        return []

    def _predict(self, pred: Predictions) -> torch.Tensor:
        return self.calibrator_.calibrated(pred)

    def _confidence(self, pred: Predictions) -> torch.Tensor:
        return self.calibrator_.calibrated_confidence(pred)

    def _module(self, from_probs: bool) -> torch.nn.Module:
        return self.calibrator_.to_module("probs" if from_probs else "logits")


def prepare_fits(names: list[str]) -> None:
    """Each candidate's ``prepare_fit``, so that ``fit_seconds`` times its fits rather than,
    in a fresh process, the first import of scikit-learn or scipy's optimisers."""
    for name in names:
        try:
            type(build_calibrator(name)).prepare_fit()
        except ImportError:  # an optional package missing: its fold fits record why
            pass
