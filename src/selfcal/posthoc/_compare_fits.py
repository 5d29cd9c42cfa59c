"""Fitting one calibrator of :func:`selfcal.posthoc.compare.compare` on a prediction set's
validation split and predicting its test split -- the step the post-hoc and conformal studies
share with ``compare`` -- and ``compare``'s default calibrators."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import torch

from selfcal.io import PredictionSet
from selfcal.posthoc._auto_groups import group_candidates
from selfcal.posthoc._base import Calibrator
from selfcal.posthoc._costs import TABLE_SCORES, memory_refusal
from selfcal.posthoc.auto import default_candidates
from selfcal.posthoc.registry import build_calibrator

SHOWN = ("venn-abers", "venn-abers-top")
"""Calibrators ``compare`` shows by default beside ``auto``'s candidates without being
candidates (the Venn-Abers predictors: :mod:`selfcal.posthoc.venn_abers` says why), each left
out past :data:`~selfcal.posthoc._costs.TABLE_SCORES` validation scores."""


def default_methods(data: PredictionSet) -> list[str]:
    """``auto``'s default candidates for the set's validation split (less those its size leaves
    out), then :data:`SHOWN`, then -- where both splits have groups -- the group-aware
    calibrators that apply to them, then ``auto`` itself."""
    val = data.predictions("val")
    names, left_out = default_candidates(val)
    if val.n_samples * val.n_classes <= TABLE_SCORES:
        names = names + [n for n in SHOWN if n not in names]
    if val.groups is not None and data.test_groups is not None:
        grouped, grouped_left_out = group_candidates(val)
        names, left_out = names + grouped, {**left_out, **grouped_left_out}
    return [n for n in names if n not in left_out] + ["auto"]


@dataclass(frozen=True)
class Fitted:
    """A calibrator fitted on a set's validation split: its test probabilities, the fit's
    seconds and warnings and the calibrator; or (``probs`` ``None``) why it could not be
    fitted."""

    probs: torch.Tensor | None
    seconds: float = float("nan")
    warnings: tuple[str, ...] = ()
    calibrator: Calibrator | None = None
    error: str = ""


def fit_predict(
    name: str, data: PredictionSet, criterion: str = "nll", *, with_groups: bool = False
) -> Fitted:
    """Calibrator ``name`` fitted on ``data``'s validation split (timed; its warnings kept
    as one-line messages, not shown) and predicting its test split; ``auto`` chooses by
    ``criterion``. A ``ValueError`` (e.g. a binary calibrator on more classes) is recorded as
    the reason, and so is the rule of memory (:func:`~selfcal.posthoc.auto.memory_refusal`:
    matrix scaling on 100,000 classes is not tried). A calibrator that uses groups
    (:attr:`~selfcal.posthoc.Calibrator.uses_groups`) -- and, ``with_groups``, one that accepts
    them (``accepts_groups``: ``auto``) -- is fitted with the validation split's groups, and
    predicts with the test split's where its fitted map needs them. The studies leave
    ``with_groups`` off, so their ``auto`` is the one without groups."""
    too_large = memory_refusal(name, data.n_classes)
    if too_large is not None:
        return Fitted(None, error=too_large)
    options = {"criterion": criterion} if name == "auto" else {}
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            cal = build_calibrator(name, kind=data.kind, **options)
            takes = cal.uses_groups or (with_groups and cal.accepts_groups)
            cal.fit(data.val, data.val_labels, groups=data.val_groups if takes else None)
            seconds = time.perf_counter() - start
            needs = cal.needs_groups()
            probs = cal.predict_proba(data.test, groups=data.test_groups if needs else None)
        except ValueError as error:
            return Fitted(None, error=str(error).splitlines()[0])
    said = tuple(" ".join(str(w.message).split()) for w in caught)
    return Fitted(torch.as_tensor(probs), seconds, said, cal)
