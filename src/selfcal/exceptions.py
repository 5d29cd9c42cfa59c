"""Every exception selfcal raises on purpose, in one place.

The public ones are ``ValueError`` subclasses (the package's error for bad input or a bad
state), so ``except ValueError`` catches any of them; each also derives from the built-in error that
names what happened (``RuntimeError``, ``FileNotFoundError``) where one fits. The warnings,
:class:`CalibrationNotConverged`, :class:`DegenerateCalibration` and :class:`LikelyProbabilities`,
are ``UserWarning`` subclasses.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from selfcal.training.history import History

__all__ = [
    "CalibrationNotConverged",
    "DatasetNotFoundError",
    "DegenerateCalibration",
    "LikelyProbabilities",
    "NotFittedError",
    "StaleResults",
    "TrainingDiverged",
]


class NotFittedError(ValueError, AttributeError, RuntimeError):
    """An estimator (a post-hoc calibrator, :class:`~selfcal.bilevel.BO4SC`) was used before
    its ``fit``.

    A ``ValueError`` and an ``AttributeError``, as scikit-learn's ``NotFittedError`` (and a
    ``RuntimeError``, as before). What selfcal raises is built by :func:`not_fitted`: where
    scikit-learn is installed, an instance of a subclass of both this class and
    ``sklearn.exceptions.NotFittedError``, so ``except sklearn.exceptions.NotFittedError``
    catches it too. (scikit-learn is optional and slow to import, so it is imported only when
    the error is raised.)"""


def not_fitted(message: str) -> NotFittedError:
    """A :class:`NotFittedError` with ``message`` that scikit-learn's ``except`` clause catches
    too, when scikit-learn is installed."""
    return _not_fitted_class()(message)


@functools.cache
def _not_fitted_class() -> type[NotFittedError]:
    try:
        from sklearn.exceptions import NotFittedError as SklearnNotFitted
    except ImportError:
        return NotFittedError
    return type("NotFittedError", (NotFittedError, SklearnNotFitted), {"__module__": __name__})


class CalibrationNotConverged(UserWarning):
    """A warning, not an error: a calibrator's fit stopped at its iteration cap (``max_iter``)
    before meeting its tolerance -- typically because the validation scores are separable and
    the unregularised likelihood has no minimum. The fitted values are the last iterate, which
    is finite and better than the start; scikit-learn's ``ConvergenceWarning`` is the model.
    Silence it with ``warnings.simplefilter("ignore", CalibrationNotConverged)`` or make it
    an error with ``"error"``."""


class DegenerateCalibration(UserWarning):
    """A warning: the validation data cannot identify a calibrator's parameters -- every
    prediction is correct (no minimum: the fit would make every confidence 1), a class is
    missing from the labels, or the likelihood keeps falling to the edge of the search
    interval (scores no better than uniform, an absurd logit). The fit then returns the
    bounded result its class documents (e.g. temperature scaling's Laplace temperature) and
    this warning names the cause, what was returned, and the remedy. Where nothing sensible
    exists (a single class in the labels) ``fit`` raises ``ValueError`` instead. The rule is
    stated in the conventions page of the documentation."""


class LikelyProbabilities(UserWarning):
    """A warning: scores passed by name as ``logits=`` lie in ``[0, 1]`` with every row summing
    to 1 -- the evidence that they are probabilities. selfcal believes a kind given by name (it
    never guesses), so the scores are read as logits and the result is almost surely wrong: a
    metric of softmax(probabilities), a temperature fitted to them. Pass ``probs=`` if they are
    probabilities. (The command line, which reads a file's array names, refuses the same
    array unless ``--kind logits`` says they really are logits.)"""


class UnseenLabels(UserWarning):
    """A warning: rows given to a trained model carry labels its training data did not have.
    Those rows are still predicted (the model can only name the classes it learnt); they are
    left out of every score that needs a label the model could predict -- the accuracy of the
    accepted rows, the coverage of the prediction sets -- and the warning says how many."""


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


class ChangedResults(ValueError):
    """A stored run no longer matches the checksum written with it: its metrics or arrays
    were changed after it ran. The message names the run and how to run it again."""


class NonFinite(Exception):
    """Internal: something became NaN/inf inside a training epoch. The training loop turns it
    into :class:`TrainingDiverged` with the epoch and the history so far; it never reaches a
    caller."""


def one_line(error: BaseException | str, about: object = None) -> str:
    """What a user reads of an error (or of a warning's text): one line -- each run of
    whitespace one space -- led by ``about: `` (the file or prediction set it concerns) unless it
    names ``about`` already, whole or by its last part as a word of its own (a set named ``s``
    is not named by "scaling"). An ``OSError`` reads ``filename: strerror``, a ``KeyError`` its
    key (not the key's repr), an error without a message its class name. The one rule of the
    command line's ``error:`` lines, ``selfcal compare``'s failed sets and the ``--sets``
    studies' failed runs."""
    if isinstance(error, KeyError) and error.args:
        text = str(error.args[0])
    elif isinstance(error, OSError) and error.strerror and error.filename:
        text = f"{error.filename}: {error.strerror}"
    elif isinstance(error, BaseException):
        text = str(error) or type(error).__name__
    else:
        text = error
    text = " ".join(text.split())
    if about is None or _names(text, str(about)):
        return text
    return f"{about}: {text}"


def _names(text: str, about: str) -> bool:
    """Whether ``text`` names ``about``, whole or by its last part, as a word of its own (not
    inside a longer name)."""
    import os
    import re

    for name in (about, os.path.basename(about.rstrip("/"))):
        if name and re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", text):
            return True
    return False
