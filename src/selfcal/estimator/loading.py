"""Reading an estimator back from its file: every field named when it is wrong.

A calibrator or conformal file is untrusted input (:mod:`selfcal.estimator.persistence` checks
its format and checksum, and decodes its values strictly). :func:`field` reads it field by
field, so that a wrong type or a missing key is a one-line ``ValueError`` naming the file and
the field (``params.mix``, ``fitted.temperature_``) instead of a ``KeyError`` from deep inside.
:func:`fitted_problem` is the schema every fitted value is then checked against
(:attr:`ScoreEstimator._fitted_schema`, :class:`Fitted`): its type -- a number unless its
class declares otherwise (a float64 array, an integer count, a string...) -- and, for numbers
and numeric arrays, finite (unless declared possibly infinite) and within the declared range.
The estimator's own hooks then check its hyperparameters as ``fit`` would, and what it
computes (a calibrator must map scores to probabilities).
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


@dataclass(frozen=True)
class FittedType:
    """The type of a fitted value as read from its file: ``accepts`` says whether a value is
    one, ``name`` says what it must be in a message; ``numeric`` values are then checked for
    finiteness and range."""

    name: str
    accepts: Callable[[Any], bool]
    numeric: bool = True


def is_number(value: Any) -> bool:
    """A JSON number: an ``int`` or a ``float`` -- not a ``bool``, which Python counts as an
    ``int`` but JSON's ``true`` never means a number."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _array_of(dtype: type) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, np.ndarray) and value.dtype == dtype


NUMBER = FittedType("a number", is_number)
INTEGER = FittedType("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool))
FLOATS = FittedType("a float64 array", _array_of(np.float64))
INTEGERS = FittedType("an int64 array", _array_of(np.int64))
NUMBER_OR_FLOATS = FittedType(
    "a number or a float64 array", lambda v: is_number(v) or FLOATS.accepts(v)
)
TEXT = FittedType("a string", lambda v: isinstance(v, str), numeric=False)
TEXTS = FittedType(
    "a list of distinct non-empty strings",
    lambda v: (
        isinstance(v, list)
        and all(isinstance(x, str) and x.strip() for x in v)
        and len(set(v)) == len(v)
    ),
    numeric=False,
)
MAPPING = FittedType("an object of named values", lambda v: isinstance(v, dict), numeric=False)


@dataclass(frozen=True)
class Fitted:
    """The schema of one fitted value: its type (a number unless declared otherwise), where
    every element lies (``None``: anywhere finite), and whether elements may be infinite
    (never NaN)."""

    type: FittedType = NUMBER
    range: FittedRange | None = None
    infinite: bool = False


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


def fitted_problem(value: Any, schema: Fitted) -> str | None:
    """What is wrong with one fitted value (``None``: nothing): it must be of the schema's
    type; a number or numeric array must be finite (``schema.infinite``: not NaN) and in the
    schema's range."""
    if not schema.type.accepts(value):
        return f"must be {schema.type.name}, got {_described(value)}"
    if not schema.type.numeric:
        return None
    try:
        values = np.asarray(value, dtype=np.float64).reshape(-1)
    except OverflowError:  # an integer beyond float64
        return "must be finite"
    bad = np.isnan(values) if schema.infinite else ~np.isfinite(values)
    if bad.any():
        return "must not be NaN" if schema.infinite else "must be finite"
    if schema.range is not None and not schema.range.holds(values):
        return f"must be {schema.range.describe()}"
    return None


def _described(value: Any) -> str:
    """A value's type as a message names it (``bool``, ``an int8 array``)."""
    if isinstance(value, np.ndarray):
        return f"a {value.dtype} array"
    return type(value).__name__


def check_values(estimator: ScoreEstimator, path: str | Path) -> None:
    """Every fitted value of ``estimator`` against its class's schema
    (:attr:`~selfcal.estimator.ScoreEstimator._fitted_schema`, merged along its bases: a
    class's declarations add to and override its bases'; an undeclared value is a number)."""
    schema = {
        name: declared
        for klass in reversed(type(estimator).__mro__)
        for name, declared in vars(klass).get("_fitted_schema", {}).items()
    }
    for name in estimator._all_fitted():
        problem = fitted_problem(getattr(estimator, name), schema.get(name, Fitted()))
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
