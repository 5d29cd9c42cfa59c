"""What the validation data cover, and the warnings of the fits they do not identify.

:class:`Coverage` says which classes the validation labels hold and how many predictions are
correct -- what :meth:`selfcal.posthoc.Calibrator.fit` reads to apply the one rule for
degenerate fits (a bounded, documented result and a
:class:`~selfcal.exceptions.DegenerateCalibration` warning naming :data:`REMEDY`);
:func:`recorded_degenerate_fits` collects those warnings in a sweep.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from selfcal.exceptions import DegenerateCalibration
from selfcal.predictions import Predictions

REMEDY = (
    "Fit on more validation rows: stratified, so that every class and some of the model's "
    "errors appear"
)
"""The remedy every :class:`~selfcal.exceptions.DegenerateCalibration` warning names."""


@dataclass(frozen=True)
class Coverage:
    """What the validation labels and predictions cover: ``n`` rows, the classes with no
    example (``missing``), and how many predictions are correct."""

    n: int
    n_classes: int
    missing: tuple[int, ...]
    n_correct: int
    single: tuple[int, ...] = ()
    """Classes with exactly one validation row."""
    n_tied_errors: int = 0
    """Wrong predictions whose label shares the top score (an exact tie, e.g. in float32),
    counted only when asked (``Coverage.of(pred, ties=True)``) and when some row's scores differ
    (constant scores: no map can sharpen)."""

    @classmethod
    def of(cls, pred: Predictions, ties: bool = False) -> Coverage:
        """The coverage of validated predictions with labels; ``ValueError`` when the labels
        hold a single class (nothing about the others can be learned). ``ties``: also count
        the errors that are exact ties (a pass over the scores, for the calibrators that
        warn about them)."""
        labels = pred.require_labels()
        counts = torch.bincount(labels, minlength=pred.n_classes).cpu()
        present = torch.nonzero(counts).squeeze(1).tolist()
        if len(present) == 1:
            raise ValueError(
                f"the validation labels hold only class {present[0]} of {pred.n_classes} "
                f"({pred.n_samples} rows): a calibrator needs examples of at least two "
                "classes; fit on a validation split with several classes"
            )
        missing = tuple(int(j) for j in torch.nonzero(counts == 0).squeeze(1).tolist())
        single = tuple(int(j) for j in torch.nonzero(counts == 1).squeeze(1).tolist())
        correct = pred.correct.bool()
        n_correct = int(correct.sum())
        tied = (
            _tied_errors(pred.scores, labels, correct) if ties and n_correct < len(correct) else 0
        )
        return cls(pred.n_samples, pred.n_classes, missing, n_correct, single, tied)

    @property
    def all_correct(self) -> bool:
        return self.n_correct == self.n

    @property
    def errors_all_tied(self) -> bool:
        """Some prediction is wrong, but every wrong one only by an exact tie: no row is
        confidently wrong, so (as when all are correct) nothing says how confident to be."""
        return 0 < self.n_tied_errors == self.n - self.n_correct

    def single_text(self) -> str:
        shown = ", ".join(map(str, self.single[:10])) + (", ..." if len(self.single) > 10 else "")
        return f"class {shown} has a single validation row"

    def missing_text(self) -> str:
        shown = ", ".join(map(str, self.missing[:10])) + (", ..." if len(self.missing) > 10 else "")
        return (
            f"the validation labels hold {self.n_classes - len(self.missing)} of the "
            f"{self.n_classes} classes (none of class {shown})"
        )


def _tied_errors(scores: torch.Tensor, labels: torch.Tensor, correct: torch.Tensor) -> int:
    """Wrong rows whose label shares the top score; 0 when every row's scores are equal
    (constant scores: no map can sharpen them)."""
    top = scores.amax(dim=1)
    if not bool((top > scores.amin(dim=1)).any()):
        return 0
    return int((label_on_top(scores, labels) & ~correct).sum())


def label_on_top(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``(N,)`` bool: the row's label has the top score (alone, or tied with others)."""
    return scores.gather(1, labels.unsqueeze(1)).squeeze(1) == scores.amax(dim=1)


@contextmanager
def recorded_degenerate_fits() -> Iterator[list[str]]:
    """Collect the :class:`~selfcal.exceptions.DegenerateCalibration` messages of the fits in
    the block into the yielded list (filled when the block ends) instead of showing them --
    for sweeps that record per run what a calibrator could not identify; other warnings pass
    through."""
    messages: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield messages
    for w in caught:
        if issubclass(w.category, DegenerateCalibration):
            messages.append(str(w.message))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
