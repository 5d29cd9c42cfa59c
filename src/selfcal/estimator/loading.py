"""Reading an estimator back from its file: every field named when it is wrong.

A calibrator or conformal file is untrusted input (:mod:`selfcal.estimator.persistence` checks
its format and checksum). :func:`build` turns its document into the estimator field by field,
so that a wrong type or a missing key is a one-line ``ValueError`` naming the file and the
field (``params.mix``, ``fitted.temperature_``) instead of a ``KeyError`` from deep inside.
:func:`fitted_problem` is the schema every fitted value is then checked against: numbers (and
numeric arrays) are finite -- unless the estimator lists the value as possibly infinite -- and
lie in the range its class declares (:attr:`ScoreEstimator._fitted_ranges`). The estimator's
own hooks then check its hyperparameters as ``fit`` would, and what it computes (a calibrator
must map scores to probabilities).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

if TYPE_CHECKING:
    from selfcal.estimator import ScoreEstimator

T = TypeVar("T")


@dataclass(frozen=True)
class FittedRange:
    """Where every element of a fitted value lies: ``[low, high]``, ``(low, high]`` with
    ``low_open``."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False

    def describe(self) -> str:
        left = "(" if self.low_open else "["
        return f"in {left}{self.low:g}, {self.high:g}]"

    def holds(self, values: np.ndarray) -> bool:
        above = values > self.low if self.low_open else values >= self.low
        return bool(np.all(above & (values <= self.high)))


POSITIVE = FittedRange(0.0, math.inf, low_open=True)
NON_NEGATIVE = FittedRange(0.0)
UNIT = FittedRange(0.0, 1.0)


def field(path: str | Path, name: str, read: Callable[[], T]) -> T:
    """``read()``, with any error it raises turned into ``"PATH: NAME: reason"``."""
    try:
        return read()
    except RecursionError:
        raise ValueError(f"{path}: {name}: nested too deeply") from None
    except (
        KeyError,
        TypeError,
        ValueError,
        AttributeError,
        IndexError,
        OverflowError,
        RuntimeError,
    ) as exc:  # RuntimeError: torch on arrays of the wrong shape
        reason = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
        prefix = f"{path}: "
        reason = reason.removeprefix(prefix)  # a nested estimator's own message
        raise ValueError(f"{path}: {name}: {reason}") from None


def mapping(doc: Any, key: str, path: str | Path) -> dict[str, Any]:
    """``doc[key]``, which must be a JSON object."""
    value = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: {key} must be an object of named values")
    return value


def numeric(value: Any) -> np.ndarray | None:
    """``value`` as a float64 array when it is a number or a numeric array (``None`` for
    anything else: strings, mappings, estimators); booleans are not numbers here."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, float, np.integer, np.floating)):
        return np.asarray([value], dtype=np.float64)
    if isinstance(value, np.ndarray) and value.dtype.kind in "iuf":
        return value.astype(np.float64, copy=False)
    return None


def fitted_problem(value: Any, declared: FittedRange | None, may_be_infinite: bool) -> str | None:
    """What is wrong with one fitted value (``None``: nothing): a declared range needs a
    number; numbers must be finite (``may_be_infinite``: not NaN) and in the range."""
    values = numeric(value)
    if values is None:
        return None if declared is None else f"must be a number, got {type(value).__name__}"
    bad = np.isnan(values) if may_be_infinite else ~np.isfinite(values)
    if bad.any():
        return "must be finite" if not may_be_infinite else "must not be NaN"
    if declared is not None and not declared.holds(values):
        return f"must be {declared.describe()}"
    return None


def check_values(estimator: ScoreEstimator, path: str | Path) -> None:
    """Every fitted value of ``estimator`` against its class's schema, and ``n_classes_``."""
    n_classes = estimator.n_classes_  # type: ignore[attr-defined]
    if (
        isinstance(n_classes, bool)
        or not isinstance(n_classes, (int, np.integer))
        or (n_classes < 2)
    ):
        raise ValueError(f"{path}: fitted.n_classes_ must be an integer >= 2, got {n_classes!r}")
    ranges = {  # a class's declarations add to (and override) its bases'
        name: declared
        for klass in reversed(type(estimator).__mro__)
        for name, declared in vars(klass).get("_fitted_ranges", {}).items()
    }
    for name in estimator._all_fitted():
        problem = fitted_problem(
            getattr(estimator, name), ranges.get(name), name in estimator._may_be_infinite
        )
        if problem is not None:
            raise ValueError(f"{path}: fitted.{name} {problem}")


PROBE_LOGITS = (3.0, 30.0, -30.0)
"""The logit a probe row gives one class (the others 0): a modest one, and the extremes a
trained network's logits reach."""


def probe_logits(n_classes: int) -> np.ndarray:
    """Scores a loaded estimator is tried on: one uniform row and, for each class and each
    value of :data:`PROBE_LOGITS`, a row giving that class that logit."""
    rows = [np.zeros((1, n_classes))] + [v * np.eye(n_classes) for v in PROBE_LOGITS]
    return np.concatenate(rows)


def check_probabilities(p: np.ndarray) -> None:
    """``p`` must be finite probabilities whose rows sum to 1 (within 1e-6)."""
    ok = (
        p.ndim == 2
        and bool(np.isfinite(p).all())
        and bool((p >= -1e-12).all() and (p <= 1 + 1e-12).all())
        and bool(np.allclose(p.sum(axis=1), 1.0, rtol=0, atol=1e-6))
    )
    if not ok:
        raise ValueError(
            "the calibrator it holds does not map scores to probabilities (values outside "
            "[0, 1], not finite, or rows not summing to 1)"
        )
