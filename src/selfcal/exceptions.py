"""Every exception selfcal raises on purpose, in one place.

The public ones are ``ValueError`` subclasses (the package's error for bad input or a bad
state), so ``except ValueError`` catches any of them; each also derives from the built-in error that
names what happened (``RuntimeError``, ``FileNotFoundError``) where one fits. The one warning,
:class:`CalibrationNotConverged`, is a ``UserWarning``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from selfcal.training.history import History

__all__ = [
    "CalibrationNotConverged",
    "DatasetNotFoundError",
    "NotFittedError",
    "StaleResults",
    "TrainingDiverged",
]


class NotFittedError(ValueError, RuntimeError):
    """An estimator (a post-hoc calibrator, :class:`~selfcal.bilevel.BO4SC`) was used before
    its ``fit``."""


class CalibrationNotConverged(UserWarning):
    """A warning, not an error: a calibrator's fit stopped at its iteration cap (``max_iter``)
    before meeting its tolerance -- typically because the validation scores are separable and
    the unregularised likelihood has no minimum. The fitted values are the last iterate, which
    is finite and better than the start; scikit-learn's ``ConvergenceWarning`` is the model.
    Silence it with ``warnings.simplefilter("ignore", CalibrationNotConverged)`` or make it
    an error with ``"error"``."""


class TrainingDiverged(ValueError):
    """The training loss (or a parameter, or a validation logit) became NaN or infinite.

    ``epoch`` is the epoch in which it happened; ``history`` holds the completed epochs before
    it, so an experiment runner can record the failed run."""

    def __init__(self, epoch: int, what: str, history: History) -> None:
        super().__init__(f"training diverged in epoch {epoch}: {what}")
        self.epoch = epoch
        self.history = history


class DatasetNotFoundError(FileNotFoundError, ValueError):
    """A dataset read from disk is not where it was looked for.

    Both a ``FileNotFoundError`` (what happened) and a ``ValueError`` (the package's error for
    bad input), so either ``except`` clause catches it. The message names the expected layout.
    """


class StaleResults(ValueError):
    """A committed report was made by another version of its study or protocol."""


class NonFinite(Exception):
    """Internal: something became NaN/inf inside a training epoch. The training loop turns it
    into :class:`TrainingDiverged` with the epoch and the history so far; it never reaches a
    caller."""
