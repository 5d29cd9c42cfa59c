"""Calibrators compared on one prediction set: each fitted on the set's validation split and
scored on its test split -- NLL, Brier score, 15-bin ECE, error, fit time, the fit's warnings
-- with a paired 95% bootstrap interval of each score's difference from temperature scaling's
over the test rows (the same resamples for every calibrator), and the calibrator to use
(:func:`recommend`); on a set with groups, each calibrator per test group too
(:mod:`selfcal.posthoc._compare_groups`). What ``selfcal compare`` prints and the post-hoc
leaderboard on prediction sets stores (``selfcal reproduce posthoc --sets DIR``)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

import selfcal.metrics as M
from selfcal._validation import check_choice
from selfcal.io import PredictionSet
from selfcal.metrics.bootstrap import Resamples, interval_bounds, resampled_values
from selfcal.metrics.group_summary import GroupEvaluation
from selfcal.metrics.scores import brier_terms, nll_terms
from selfcal.posthoc._compare_fits import default_methods, fit_predict
from selfcal.posthoc._compare_groups import (
    GroupComparison,
    compare_groups,
    evaluate_row,
    group_resamples,
)
from selfcal.posthoc.auto import AutoCalibration, prepare_fits
from selfcal.predictions import Predictions
from selfcal.shift import SplitCheck, check_splits

SCORES = ("nll", "brier", "ece")
"""The scores compared, in the order of :attr:`Row.resampled`'s first axis."""
CRITERIA = SCORES
"""What a recommendation can be decided by (``criterion``): each score, lower is better."""
PRINTED = {"nll": (1.0, 4, ""), "brier": (100.0, 2, " (×100)"), "ece": (100.0, 2, " points")}
"""How each score's difference is printed: ``(scale, decimals, unit)`` -- NLL in nats to 4
decimals, Brier score ×100 and ECE in percentage points to 2. A difference is called
better or worse only where its interval excludes 0 *at this precision* (:func:`verdict`), so
no verdict stands beside an interval printed as ``[-0.0000, -0.0000]``."""
LABELS = {"nll": "NLL", "brier": "Brier", "ece": "ECE"}
BASELINE = "ts"
"""What every calibrator is compared with: temperature scaling."""
RESAMPLES = 1000
"""Bootstrap resamples of the test rows."""
SPLIT_LEVEL = 0.01
"""The level of the check that a set's two splits look exchangeable (:func:`comparison`):
an exchangeable set is flagged with at most this probability."""


@dataclass
class Row:
    """One calibrator on one set: its test ``scores`` (``nll``, ``brier``, ``ece``,
    ``error``), their ``resampled`` values ``(3, R)``, each score's ``difference`` from TS's
    with its paired interval (``low`` / ``high``), the fit's ``seconds`` and ``warnings``,
    ``auto``'s ``chosen`` candidate, and -- where it could not be fitted -- the one-line
    ``error``; on a set with groups, its calibration per test group (``groups``)."""

    name: str
    scores: dict[str, float] = field(default_factory=dict)
    resampled: np.ndarray | None = None
    difference: dict[str, float] = field(default_factory=dict)
    low: dict[str, float] = field(default_factory=dict)
    high: dict[str, float] = field(default_factory=dict)
    seconds: float = float("nan")
    warnings: tuple[str, ...] = ()
    chosen: str | None = None
    error: str = ""
    probs: torch.Tensor | None = field(default=None, repr=False)
    groups: GroupEvaluation | None = field(default=None, repr=False)


def verdict(row: Row, score: str = "nll") -> str:
    """``"better"`` / ``"worse"`` than TS where the interval of ``row``'s ``score`` difference
    excludes 0 as printed (:data:`PRINTED`: both bounds round to the same side of 0, and not
    to 0), else ``""`` (tied, or no interval)."""
    if score not in row.difference:
        return ""
    scale, digits, _ = PRINTED[score]
    low, high = (round(scale * bound[score], digits) for bound in (row.low, row.high))
    return "better" if high < 0 else "worse" if low > 0 else ""


def difference_text(row: Row, score: str, unit: bool = False) -> str:
    """``row``'s ``score`` minus TS's with its interval, as printed (:data:`PRINTED`), e.g.
    ``-0.0744 [-0.0836, -0.0655]``; with ``unit``, the unit after it (``points``)."""
    scale, digits, suffix = PRINTED[score]
    point, low, high = (scale * d[score] for d in (row.difference, row.low, row.high))
    text = f"{point:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]"
    return text + (suffix if unit else "")


@dataclass(frozen=True)
class Recommendation:
    """The calibrator to use on a set (:func:`recommend`): its ``name``, the ``criterion``
    that decided it, ``basis`` (why, in words), ``row`` (the test scores it was judged by:
    ``auto``'s row where ``auto`` decided), and ``costs`` -- the other scores on which it is
    significantly worse than temperature scaling, as printed text."""

    name: str
    criterion: str
    basis: str
    row: Row = field(repr=False)
    costs: tuple[str, ...] = ()

    @property
    def line(self) -> str:
        """One line: ``use X (basis): NLL -0.0744 [-0.0836, -0.0655] better than TS; ECE
        +0.80 [+0.03, +1.58] points worse``."""
        head = f"use {self.name} ({self.basis})"
        if self.name == BASELINE:
            return head
        said = verdict(self.row, self.criterion)
        relation = f"{said} than TS" if said else "tied with TS"
        found = f"{LABELS[self.criterion]} {difference_text(self.row, self.criterion, True)}"
        return "; ".join([f"{head}: {found} {relation}", *self.costs])

    def to_dict(self) -> dict[str, object]:
        """The recommendation as JSON values (``--json``)."""
        judged = self.row
        out: dict[str, object] = {"use": self.name, "criterion": self.criterion}
        out["basis"] = self.basis
        if self.criterion in judged.difference:
            out["difference_from_ts"] = {
                "value": judged.difference[self.criterion],
                "ci": [judged.low[self.criterion], judged.high[self.criterion]],
                "verdict": verdict(judged, self.criterion) or "tied",
            }
        out["costs"] = list(self.costs)
        return out


def recommend(rows: list[Row], criterion: str = "nll") -> Recommendation | None:
    """The calibrator to use, from a set's rows, decided by ``criterion``:

    * with an ``auto`` row, ``auto``'s choice -- made by cross-validating ``criterion`` on
      the validation split only, so the test split judges it rather than choosing it --
      unless its test ``criterion`` is significantly worse than temperature scaling's, when
      temperature scaling is the answer;
    * without one, the calibrator with the lowest test ``criterion`` where it is
      significantly below temperature scaling's, else temperature scaling.

    Its ``costs`` name each other score (:data:`SCORES`) on which the choice is significantly
    worse than temperature scaling (:func:`verdict`), with the interval. ``None`` where
    temperature scaling itself could not be fitted (nothing to judge against)."""
    fitted = {row.name: row for row in rows if not row.error}
    base = fitted.get(BASELINE)
    if base is None:
        return None
    word = LABELS[criterion]
    auto = fitted.get("auto")
    if auto is not None and auto.chosen is not None:
        name, basis, judged = auto.chosen, f"auto's choice by cross-validated {word}", auto
        if verdict(auto, criterion) == "worse":
            name = BASELINE
            basis = f"auto chose {auto.chosen}, but its test {word} is worse than TS's"
    else:
        judged = min(fitted.values(), key=lambda row: row.scores.get(criterion, float("inf")))
        name, basis = judged.name, f"the lowest test {word}, below TS's"
        if verdict(judged, criterion) != "better":
            judged, name = base, BASELINE
            basis = f"no calibrator's test {word} is below TS's"
    if name == BASELINE:
        return Recommendation(name, criterion, basis, base)
    costs = tuple(
        f"{LABELS[score]} {difference_text(judged, score, True)} worse"
        for score in SCORES
        if score != criterion and verdict(judged, score) == "worse"
    )
    return Recommendation(name, criterion, basis, judged, costs)


def resampled_scores(
    probs: torch.Tensor, labels: torch.Tensor, n_bins: int, resamples: Resamples
) -> np.ndarray:
    """``(3, R)`` NLL, Brier score and ECE of ``probs`` on each resample of the test rows."""
    pred = Predictions.from_probs(probs.double(), labels)
    nll, brier = nll_terms(pred), brier_terms(pred)
    out = []
    for weights in resamples.chunks():
        total = weights.sum(1)
        out.append(torch.stack([weights @ nll / total, weights @ brier / total]))
    ece = resampled_values(
        lambda w: M.ece.core(pred, weights=w, n_bins=n_bins),
        pred.n_samples,
        resamples.n_resamples,
        0,
        pred.device,
        resamples,
    )
    return torch.cat([torch.cat(out, 1), ece.reshape(1, -1)]).numpy()


def test_scores(probs: torch.Tensor, labels: np.ndarray, n_bins: int) -> dict[str, float]:
    """NLL, Brier score, ``n_bins``-bin ECE and error of test probabilities ``probs``."""
    pred = Predictions.from_probs(probs.double(), torch.as_tensor(labels))
    return {
        "nll": float(M.nll(pred)),
        "brier": float(M.brier(pred)),
        "ece": float(M.ece(pred, n_bins=n_bins)),
        "error": float(M.error(pred)),
    }


def against_baseline(rows: list[Row]) -> None:
    """Fill each row's ``difference``, ``low`` / ``high``: its score minus TS's with the
    centred 95% interval, paired over the resamples (nothing without a TS row)."""
    base = next((r for r in rows if r.name == BASELINE and r.resampled is not None), None)
    if base is None or base.resampled is None:
        return
    for row in rows:
        if row.resampled is None:
            continue
        for j, score in enumerate(SCORES):
            point = row.scores[score] - base.scores[score]
            low, high = interval_bounds(
                torch.from_numpy(row.resampled[j] - base.resampled[j]), torch.tensor(point), 0.95
            )
            row.difference[score] = point
            row.low[score], row.high[score] = float(low), float(high)


def compare(
    data: PredictionSet,
    methods: list[str] | None = None,
    *,
    criterion: str = "nll",
    n_bins: int = 15,
    resamples: int = RESAMPLES,
    keep_probs: bool = False,
    by_group: bool = True,
) -> list[Row]:
    """Every calibrator of ``methods`` (default :func:`default_methods`; TS is added when
    missing, as the reference) fitted on ``data``'s validation split and scored on its test
    split, with paired intervals against TS (module docstring); ``auto`` chooses by
    ``criterion`` (``"nll"``, ``"brier"`` or ``"ece"``, as :func:`recommend` decides).
    ``keep_probs``: keep each row's test probabilities (for figures). ``by_group`` (on a set
    with groups): judge each row per test group too (:attr:`Row.groups`), and give ``auto``
    the groups (its group-aware candidates join)."""
    check_choice("criterion", criterion, CRITERIA)
    methods = list(methods or default_methods(data))
    if BASELINE not in methods:
        methods.insert(0, BASELINE)
    labels = torch.as_tensor(data.test_labels)
    draws = Resamples(len(labels), resamples, 0)
    per_group = group_resamples(data) if by_group else None
    prepare_fits([m for m in methods if m != "auto"])
    rows = []
    for name in methods:
        fitted = fit_predict(name, data, criterion, with_groups=by_group)
        if fitted.probs is None:
            rows.append(Row(name, error=fitted.error))
            continue
        auto = fitted.calibrator if isinstance(fitted.calibrator, AutoCalibration) else None
        rows.append(
            Row(
                name,
                test_scores(fitted.probs, data.test_labels, n_bins),
                resampled_scores(fitted.probs, labels, n_bins, draws),
                seconds=fitted.seconds,
                warnings=fitted.warnings,
                chosen=None if auto is None else auto.chosen_,
                probs=fitted.probs if keep_probs else None,
            )
        )
        if per_group is not None:
            rows[-1].groups = evaluate_row(fitted.probs, data, per_group, draws, n_bins)
    against_baseline(rows)
    return rows


@dataclass(frozen=True)
class Warned:
    """One warning the fits on a set raised: its ``message``, the ``calibrators`` whose fit
    raised it, and how many times in all (``count``)."""

    message: str
    calibrators: tuple[str, ...]
    count: int

    def to_dict(self) -> dict[str, object]:
        return {"message": self.message, "calibrators": list(self.calibrators), "count": self.count}


def grouped_warnings(rows: list[Row]) -> tuple[Warned, ...]:
    """The rows' warnings, one :class:`Warned` per distinct message (in the order first
    raised), naming every calibrator that raised it."""
    by_message: dict[str, list[str]] = {}
    for row in rows:
        for message in row.warnings:
            by_message.setdefault(message, []).append(row.name)
    return tuple(
        Warned(message, tuple(dict.fromkeys(names)), len(names))
        for message, names in by_message.items()
    )


@dataclass(frozen=True)
class Comparison:
    """Every calibrator on one prediction set (:func:`comparison`): the set's ``name``, sizes
    and ``kind``, the ``criterion``, the :class:`Row` of each calibrator, the
    :class:`Recommendation` (``None`` where temperature scaling could not be fitted), the
    check that the two splits look exchangeable (:func:`selfcal.shift.check_splits`), the
    fits' warnings, grouped (:func:`grouped_warnings`), and on a set with groups each
    calibrator's calibration per group (``groups``; ``None`` without)."""

    name: str
    n_val: int
    n_test: int
    n_classes: int
    kind: str
    criterion: str
    rows: list[Row] = field(repr=False)
    recommendation: Recommendation | None
    split_check: SplitCheck
    warnings: tuple[Warned, ...] = ()
    groups: GroupComparison | None = None

    def to_dict(self) -> dict[str, object]:
        """The comparison as JSON values (``selfcal compare --json``): sizes, criterion, the
        split check, the recommendation, the warnings, and per calibrator its test scores,
        their differences from TS's with intervals, fit seconds, warnings, ``auto``'s choice
        or why it could not be fitted; on a set with groups, ``groups``
        (:meth:`~selfcal.posthoc._compare_groups.GroupComparison.to_dict`)."""
        out = {
            "n_val": self.n_val,
            "n_test": self.n_test,
            "n_classes": self.n_classes,
            "kind": self.kind,
            "criterion": self.criterion,
            "split_check": self.split_check.to_dict(),
            "recommendation": None
            if self.recommendation is None
            else self.recommendation.to_dict(),
            "warnings": [w.to_dict() for w in self.warnings],
            "calibrators": {row.name: row_dict(row) for row in self.rows},
        }
        return out if self.groups is None else {**out, "groups": self.groups.to_dict()}


def row_dict(row: Row) -> dict[str, object]:
    """One calibrator's entry of :meth:`Comparison.to_dict`."""
    if row.error:
        return {"error": row.error}
    entry: dict[str, object] = dict(row.scores)
    for score, value in row.difference.items():
        entry[f"{score}_minus_ts"] = {
            "value": value,
            "ci": [row.low[score], row.high[score]],
            "verdict": verdict(row, score) or "tied",
        }
    entry["fit_seconds"] = row.seconds
    entry["warnings"] = list(row.warnings)
    if row.chosen is not None:
        entry["chosen"] = row.chosen
    return entry


def comparison(
    data: PredictionSet,
    methods: list[str] | None = None,
    *,
    criterion: str = "nll",
    n_bins: int = 15,
    resamples: int = RESAMPLES,
    keep_probs: bool = False,
    level: float = SPLIT_LEVEL,
) -> Comparison:
    """Every calibrator of ``methods`` on ``data`` (:func:`compare`), the calibrator to use by
    ``criterion`` (:func:`recommend`), and whether the validation and test splits look
    exchangeable at ``level`` (:func:`selfcal.shift.check_splits`: every verdict here assumes
    they are); on a set with groups, each calibrator per group (:attr:`Comparison.groups`)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check = check_splits(data.predictions("val"), data.predictions("test"), level=level)
    rows = compare(
        data,
        methods,
        criterion=criterion,
        n_bins=n_bins,
        resamples=resamples,
        keep_probs=keep_probs,
    )
    reading = tuple(" ".join(str(w.message).split()) for w in caught)
    found = grouped_warnings([Row("reading the set", warnings=reading), *rows])
    return Comparison(
        data.name,
        len(data.val_labels),
        len(data.test_labels),
        data.n_classes,
        data.kind,
        criterion,
        rows,
        recommend(rows, criterion),
        check,
        found,
        compare_groups({row.name: row.groups for row in rows if row.groups is not None}),
    )
