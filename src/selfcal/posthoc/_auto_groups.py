""":class:`~selfcal.posthoc.AutoCalibration` fitted with groups: the group-aware candidates
beside the others, cross-validated on folds stratified by group, and the rule that chooses
between them (:func:`fit_with_groups`).

The rule, stated once. Every candidate is cross-validated on the same folds, each group's rows
spread over them (:func:`group_folds`). First the candidates that do not use groups are
compared exactly as without groups (``AutoCalibration``'s rule: the first in the order of
preference not significantly worse than the lowest score): that choice is ``b``. Then each
group-aware candidate -- :class:`~selfcal.posthoc.GroupwiseCalibration` around ``b``, and the
calibrator registered as ``multicalibration`` where one is -- replaces ``b`` only if both

* its mean held-out criterion (NLL by default) is significantly lower than ``b``'s: the upper
  end of the paired bootstrap 95% interval of the difference is below 0; and
* its worst group's held-out criterion is not higher than ``b``'s worst group's,

the lowest-scoring such candidate if several. So groups are used only where the held-out rows
show they improve the average fit without making the worst group worse; ``selection="best"``
takes the lowest mean score of all candidates instead. ``cv_results_`` adds, per candidate,
``worst_group`` (its worst group's criterion on the held-out rows; the worst over the groups
with held-out rows) and ``groupless_difference`` / ``groupless_low`` / ``groupless_high``
(its paired difference from ``b`` with the 95% interval).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from selfcal.posthoc.crossfit import (
    cross_validate,
    paired_intervals,
    stratified_folds,
)
from selfcal.posthoc.registry import build_calibrator, calibrator_names
from selfcal.predictions import Predictions

if TYPE_CHECKING:
    from selfcal.posthoc.auto import AutoCalibration

GROUP_CANDIDATES = ("groupwise", "multicalibration")
"""The group-aware candidates, each where it is registered (``multicalibration``:
:class:`MulticlassMulticalibration`, where that module is installed)."""


def group_candidates(pred: Predictions) -> tuple[list[str], dict[str, str]]:
    """The registered group-aware candidates, with why one is left out (``groupwise`` for
    membership columns: it needs one group a row)."""
    names = [n for n in GROUP_CANDIDATES if n in calibrator_names()]
    left_out = {}
    if pred.require_groups().overlapping and "groupwise" in names:
        left_out["groupwise"] = "left out: it needs one group a row, not membership columns"
    return names, left_out


def group_folds(
    pred: Predictions, n_folds: int, held_out: int, seed: int, stratified_rows: int
) -> list[np.ndarray]:
    """The first ``held_out`` of ``n_folds`` folds (as many as
    :func:`~selfcal.posthoc.auto.folds_for` makes and holds out), dealt so that each group's
    rows -- each distinct combination of groups, for membership columns -- spread over the
    folds within one row of each other, and, up to ``stratified_rows`` rows, each group's
    labels too."""
    groups = pred.require_groups()
    if groups.codes is not None:
        key = groups.codes.cpu().numpy()
    else:
        assert groups.membership is not None
        key = np.unique(groups.membership.cpu().numpy(), axis=0, return_inverse=True)[1]
    key = key.reshape(-1)
    if pred.n_samples <= stratified_rows:
        key = key * pred.n_classes + pred.require_labels().cpu().numpy()
    return stratified_folds(torch.as_tensor(key), n_folds, seed)[:held_out]


def fit_with_groups(
    auto: AutoCalibration,
    pred: Predictions,
    names: list[str],
    left_out: dict[str, str],
    folds: list[np.ndarray],
    prepare: Callable[[list[str]], None],
) -> None:
    """:class:`~selfcal.posthoc.AutoCalibration`'s fit with groups (module docstring):
    its candidates ``names`` (less those ``left_out``) and the group-aware ones, on ``folds``
    (:func:`group_folds`); ``prepare`` does the candidates' first-use imports."""
    extra, extra_left = group_candidates(pred)
    extra = [n for n in extra if n not in names]
    prepare([n for n in names + extra if n not in left_out and n not in extra_left])
    scored = auto._cross_validate(pred, names, left_out, folds)
    if scored is None:
        return
    outcomes, held_out = scored
    labels = pred.require_labels()[held_out]
    base = auto._choose()
    factories = {"groupwise": functools.partial(build_calibrator, "groupwise", base=base)}
    fitted_extra = [n for n in extra if n not in extra_left]
    outcomes += cross_validate(fitted_extra, pred, folds, auto.kind, auto._kept(), None, factories)
    every = names + extra
    results = auto._results(every, outcomes, {**left_out, **extra_left}, labels)
    scorers = {o.name: auto._scorer(o.kept, labels) for o in outcomes if o.kept is not None}
    against = paired_intervals(scorers, every, base, len(labels), auto.seed, labels.device)
    results.update({f"groupless_{key}": values for key, values in against.items()})
    group_rows = [r for r in pred.require_groups()[held_out].rows() if r.numel()]
    results["worst_group"] = _worst_groups(auto, every, outcomes, labels, group_rows)
    auto.cv_results_ = results
    auto.chosen_ = choose(results, base, extra, auto.selection)
    params: dict[str, Any] = {"base": base} if auto.chosen_ == "groupwise" else {}
    auto.calibrator_ = auto._refit(pred, **params)


def _worst_groups(
    auto: AutoCalibration,
    names: list[str],
    outcomes: list[Any],
    labels: torch.Tensor,
    group_rows: list[torch.Tensor],
) -> list[float]:
    """Each candidate's worst group's criterion on the held-out rows (``inf`` when it has no
    out-of-fold predictions)."""
    kept = {o.name: o.kept for o in outcomes if o.kept is not None}
    return [
        worst_group(auto, kept[name], labels, group_rows) if name in kept else float("inf")
        for name in names
    ]


def worst_group(
    auto: AutoCalibration, kept: torch.Tensor, labels: torch.Tensor, groups: list[torch.Tensor]
) -> float:
    """The largest of the criterion over each group's held-out rows (``groups``: their
    positions among the held-out rows)."""
    return max(float(auto._scorer(kept[rows], labels[rows])(None)) for rows in groups)


def choose(results: dict[str, list[Any]], base: str, extra: list[str], selection: str) -> str:
    """The module docstring's rule: ``base`` (the choice among the candidates that do not use
    groups) unless a group-aware one is significantly better on average and no worse on its
    worst group; ``selection="best"``: the lowest score of all."""
    names, score = results["candidate"], results["score"]
    if selection == "best":
        return names[int(np.argmin(score))]
    i_base = names.index(base)
    better = [
        i
        for i, name in enumerate(names)
        if name in extra
        and np.isfinite(score[i])
        and results["groupless_high"][i] < 0.0
        and results["worst_group"][i] <= results["worst_group"][i_base]
    ]
    return names[min(better, key=lambda i: score[i])] if better else base
