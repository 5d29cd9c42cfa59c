"""Metrics of prediction sets (methods §10.5): coverage, size, singletons, per-class and
size-stratified coverage, and their bootstrap intervals.

Every function takes a boolean ``(N, C)`` mask ``sets`` (``sets[i, k]``: label ``k`` is in
row ``i``'s set, as :meth:`selfcal.conformal.SplitConformal.predict_set` returns it) as a
numpy array or a torch tensor, and, where it needs them, integer labels ``(N,)``. A scalar
comes back as a Python float for numpy input and as a float64 0-d tensor on the input's
device for torch input (as every selfcal metric); an array likewise. Bad input (not
boolean, not 2-D, no rows, labels of another length or outside ``[0, C)``) is a one-line
``ValueError``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from selfcal._validation import check_choice, check_int, check_real
from selfcal.metrics.bootstrap import (
    INTERVAL_METHODS,
    Interval,
    interval_bounds,
    resampled_values,
)
from selfcal.predictions import ArrayLike, validate_labels

__all__ = [
    "average_set_size",
    "class_conditional_coverage",
    "conformal_summary",
    "set_coverage",
    "singleton_rate",
    "size_stratified_coverage",
    "worst_class_coverage",
]


def _sets(sets: ArrayLike) -> tuple[torch.Tensor, bool]:
    """The mask as a bool tensor, and whether it came as numpy."""
    numpy_in = not isinstance(sets, torch.Tensor)
    t = sets if isinstance(sets, torch.Tensor) else torch.as_tensor(np.asarray(sets))
    if t.dtype != torch.bool:
        raise ValueError(f"sets must be a boolean (N, C) mask, got dtype {t.dtype}")
    if t.ndim != 2:
        raise ValueError(f"sets must be a 2-D (N, C) mask, got shape {tuple(t.shape)}")
    if t.shape[0] == 0:
        raise ValueError("sets is empty: need at least one row")
    if t.shape[1] < 1:
        raise ValueError("sets has no label columns")
    return t, numpy_in


def _with_labels(sets: ArrayLike, labels: ArrayLike) -> tuple[torch.Tensor, torch.Tensor, bool]:
    s, numpy_in = _sets(sets)
    y = validate_labels(labels, s.shape[0], s.shape[1], s.device)
    return s, y, numpy_in


def _out(value: torch.Tensor, numpy_in: bool) -> Any:
    if not numpy_in:
        return value
    return float(value) if value.ndim == 0 else value.cpu().numpy()


def _covered(s: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``(N,)`` float64 indicator that the label is in the set."""
    return s.gather(1, y.unsqueeze(1)).squeeze(1).double()


def set_coverage(sets: ArrayLike, labels: ArrayLike) -> Any:
    """The share of rows whose set holds their label (the marginal coverage)."""
    s, y, numpy_in = _with_labels(sets, labels)
    return _out(_covered(s, y).mean(), numpy_in)


def average_set_size(sets: ArrayLike) -> Any:
    """The mean number of labels per set."""
    s, numpy_in = _sets(sets)
    return _out(s.sum(1).double().mean(), numpy_in)


def singleton_rate(sets: ArrayLike) -> Any:
    """The share of sets with exactly one label."""
    s, numpy_in = _sets(sets)
    return _out((s.sum(1) == 1).double().mean(), numpy_in)


def _class_coverage(covered: torch.Tensor, y: torch.Tensor, n_classes: int, w: Any = None) -> Any:
    """``(..., C)`` coverage among the rows of each class (NaN for a class without rows);
    ``w`` is an optional ``(B, N)`` weight matrix of bootstrap resamples."""
    onehot = torch.nn.functional.one_hot(y, n_classes).double()
    if w is None:
        hits, rows = covered @ onehot, onehot.sum(0)
    else:
        hits, rows = (w * covered) @ onehot, w @ onehot
    return torch.where(rows > 0, hits / rows.clamp_min(1e-300), math.nan)


def class_conditional_coverage(sets: ArrayLike, labels: ArrayLike) -> Any:
    """``(C,)`` coverage among the rows of each true class (NaN for a class absent from
    ``labels``), float64."""
    s, y, numpy_in = _with_labels(sets, labels)
    return _out(_class_coverage(_covered(s, y), y, s.shape[1]), numpy_in)


def _nanmin(values: torch.Tensor) -> torch.Tensor:
    return values.nan_to_num(nan=math.inf).amin(-1)


def worst_class_coverage(sets: ArrayLike, labels: ArrayLike) -> Any:
    """The smallest class-conditional coverage over the classes present in ``labels``."""
    s, y, numpy_in = _with_labels(sets, labels)
    return _out(_nanmin(_class_coverage(_covered(s, y), y, s.shape[1])), numpy_in)


def size_stratified_coverage(sets: ArrayLike, labels: ArrayLike) -> dict[int, tuple[float, int]]:
    """``{size: (coverage, rows)}`` for every set size that occurs: the coverage among the rows
    whose set has that many labels (sizes ascending; a host-side dict)."""
    s, y, _ = _with_labels(sets, labels)
    sizes = s.sum(1)
    covered = _covered(s, y)
    rows = torch.bincount(sizes, minlength=s.shape[1] + 1)
    hits = torch.bincount(sizes, weights=covered, minlength=s.shape[1] + 1)
    out: dict[int, tuple[float, int]] = {}
    for size, (n, h) in enumerate(zip(rows.tolist(), hits.tolist(), strict=True)):
        if n:
            out[size] = (h / n, int(n))
    return out


SUMMARY = ("coverage", "average_set_size", "singleton_rate", "worst_class_coverage")
"""The metrics of :func:`conformal_summary`, in its order."""


def conformal_summary(
    sets: ArrayLike,
    labels: ArrayLike,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    method: str = "centred",
) -> dict[str, Interval]:
    """Each metric of :data:`SUMMARY` with a bootstrap interval (an
    :class:`~selfcal.metrics.Interval`, as :func:`~selfcal.metrics.bootstrap_ci` returns):
    ``{"coverage", "average_set_size", "singleton_rate", "worst_class_coverage"}``. The rows
    are resampled as by :func:`~selfcal.metrics.bootstrap_ci` (the same seeded multiplicities
    for every metric); ``method`` is ``"centred"``, ``"percentile"`` or ``"basic"``. A class
    that a resample leaves out does not count in that resample's worst-class coverage.

    >>> import numpy as np
    >>> from selfcal.metrics import conformal_summary
    >>> sets = np.array([[True, False], [True, True], [False, True]])
    >>> conformal_summary(sets, np.array([0, 1, 0]), n_resamples=200)["coverage"].value
    0.6666666666666666
    """
    check_int("n_resamples", n_resamples)
    check_real("confidence", confidence, 0.0, 1.0, low_open=True, high_open=True)
    check_choice("method", method, INTERVAL_METHODS)
    s, y, _ = _with_labels(sets, labels)
    covered = _covered(s, y)
    size = s.sum(1).double()
    single = (size == 1).double()
    n_classes = s.shape[1]

    def values(w: torch.Tensor) -> torch.Tensor:  # (b, N) multiplicities -> (b, 4)
        total = w.sum(1)
        worst = _nanmin(_class_coverage(covered, y, n_classes, w))
        return torch.stack(
            [w @ covered / total, w @ size / total, w @ single / total, worst], dim=1
        )

    with torch.no_grad():
        point = values(torch.ones(1, s.shape[0], dtype=torch.float64, device=s.device))[0]
        vals = resampled_values(values, s.shape[0], n_resamples, seed, s.device)
        lo, hi = interval_bounds(vals, point, confidence, method)
    return {
        name: Interval(float(point[i]), float(lo[i]), float(hi[i]), confidence, n_resamples, method)
        for i, name in enumerate(SUMMARY)
    }
