"""Argument checks for the whole package: one function per rule, one wording per rule.

Every check raises ``ValueError`` naming the argument and the value it got, and returns the
value in its canonical type, so a caller writes ``self.epochs = check_int("epochs", epochs)``.
The wordings:

* ``check_int``: ``"{name} must be an integer >= {minimum}, got {value!r}"``; numpy integers
  are integers, ``bool`` is not (``True`` is a flag, never a count).
* ``check_real``: ``"{name} must be a finite number in {interval}, got {value!r}"``, e.g.
  ``[0, inf)`` or ``(0, 1]``; NaN and infinities are rejected, ``bool`` too.
* ``check_choice``: ``"{name} must be one of {a, b, c}; got {value!r}"``, with the closest
  choice where one is close.
* ``check_flag``: ``"{name} must be True or False, got {value!r}"`` (numpy booleans too).
* ``check_hyper``: as ``check_real``, but a 0-d tensor (a hyperparameter traced by
  ``torch.func.vmap`` or differentiated) is accepted unchecked.

Input *data* (scores, labels, features) is checked where it is read: :mod:`selfcal.predictions`
for predictions, the training loop for ``(x, y)`` pairs.
"""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Iterable
from typing import TypeVar

import numpy as np
import torch

INF = math.inf
C = TypeVar("C")


def is_int(value: object) -> bool:
    """Whether ``value`` is an integer: a Python ``int`` or a numpy integer scalar (any
    :class:`numbers.Integral`; ``bool`` and ``numpy.bool_`` excluded)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def check_int(name: str, value: object, minimum: int = 1) -> int:
    """An integer ``>= minimum`` (numpy integers accepted), as a Python ``int``."""
    if not is_int(value) or value < minimum:  # type: ignore[operator]
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)  # type: ignore[call-overload]


def check_optional_int(name: str, value: object, minimum: int = 1) -> int | None:
    """``None`` or an integer ``>= minimum`` (as :func:`check_int`)."""
    if value is None:
        return None
    if not is_int(value) or value < minimum:  # type: ignore[operator]
        raise ValueError(f"{name} must be None or an integer >= {minimum}, got {value!r}")
    return int(value)  # type: ignore[call-overload]


def interval(low: float, high: float, low_open: bool = False, high_open: bool = False) -> str:
    """``[low, high]`` with round brackets on open (and infinite) ends."""
    left = "(" if low_open or low == -INF else "["
    right = ")" if high_open or high == INF else "]"
    return f"{left}{_number(low)}, {_number(high)}{right}"


def _number(x: float) -> str:
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return str(int(x)) if float(x).is_integer() else str(x)


def check_real(
    name: str,
    value: object,
    low: float = -INF,
    high: float = INF,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """A finite real number (``int``, ``float`` or a numpy number -- any :class:`numbers.Real`;
    not ``bool``) in the interval, as ``float``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(
            f"{name} must be a finite number in {interval(low, high, low_open, high_open)}, "
            f"got {value!r}"
        )
    x = float(value)
    above = x >= high if high_open else x > high
    below = x <= low if low_open else x < low
    if not math.isfinite(x) or above or below:
        raise ValueError(
            f"{name} must be a finite number in {interval(low, high, low_open, high_open)}, "
            f"got {value!r}"
        )
    return x


def check_positive(name: str, value: object) -> float:
    """A finite number ``> 0``."""
    return check_real(name, value, 0.0, low_open=True)


def check_nonnegative(name: str, value: object) -> float:
    """A finite number ``>= 0``."""
    return check_real(name, value, 0.0)


def check_fraction(name: str, value: object) -> float:
    """A number in ``(0, 1]`` (a coverage, a share of the data)."""
    return check_real(name, value, 0.0, 1.0, low_open=True)


def check_choice(name: str, value: C, choices: Iterable[C]) -> C:
    """One of ``choices``; otherwise ``"NAME must be one of a, b, c; got 'x' (did you mean
    'y'?)"``, the suggestion from :func:`difflib.get_close_matches` where one is close."""
    options = tuple(choices)
    if value not in options:
        listed = ", ".join(str(o) for o in options)
        close = difflib.get_close_matches(str(value), [str(o) for o in options], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"{name} must be one of {listed}; got {value!r}{hint}")
    return value


def check_hyper(
    name: str, value: object, low: float = -INF, high: float = INF, *, high_open: bool = False
) -> None:
    """A Python number in ``[low, high]`` (``[low, high)`` with ``high_open``), or a 0-d tensor
    (traced or differentiated values are not inspected)."""
    if isinstance(value, torch.Tensor):
        if value.ndim != 0:
            raise ValueError(
                f"{name} must be a number or a 0-d tensor, got shape {tuple(value.shape)}"
            )
        return
    check_real(name, value, low, high, high_open=high_open)


def check_flag(name: str, value: object) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
