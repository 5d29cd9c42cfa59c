"""The one rule for input *data* -- class labels and feature rows -- wherever selfcal reads them.

Every boundary that takes labels checks them here: :class:`selfcal.predictions.Predictions`
(:func:`~selfcal.predictions.validate_labels`), the training loop
(:func:`selfcal.training.prepare_run`), the losses (:mod:`selfcal.losses`),
:func:`selfcal.data.core.build_splits`, the region plots (:mod:`selfcal.plots.regions`) and
BO4SC's rows (:mod:`selfcal.bilevel`). So one label array is valid or invalid the same way
everywhere.

**Labels** (:func:`as_labels`): a 1-D array or tensor of length ``n`` whose dtype is an integer
type (signed or unsigned), ``bool`` (``False``/``True`` are classes 0/1), or a floating type
holding whole numbers (``2.0`` is class 2; ``2.5``, NaN and infinities are not); complex numbers
and strings (class *names*, :data:`STRING_LABELS`) are refused. Every label lies in
``[0, n_classes)`` (``[0, inf)`` where the boundary knows no class count, the plots). Each
violation is one ``ValueError`` line that starts with the argument's name:

* ``"{name} must be 1-D, got shape {shape}"``, ``"{name} has length {m}; expected one label per
  row ({n})"``;
* ``"{name} must be integers; row {i} has {value!r}"`` (``"..., got dtype {dtype}"`` for
  complex);
* ``"{name} must lie in [0, {n_classes}); row {i} has label {label}"``.

The result is a :class:`Labels`: the int64 values (exactly the given integers), on ``device``,
with the class count they were checked against. A loss given a :class:`Labels` reads no label
value (the check happened once, at the boundary: the training loop checks its data once a run,
not once a minibatch); given a raw tensor it checks it by this rule.

**Features** (:func:`as_features`): a numeric array or tensor with at least ``min_ndim``
dimensions and at least one row, cast to ``dtype`` where one is given (the training loop casts
floating inputs to the model's float dtype and leaves integer inputs, e.g. token ids, as they
are; BO4SC casts every input), and finite after the cast:
``"{name} must have shape (N, ...) with N >= 1, got {shape}"`` or
``"{name} contains NaN or infinity"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from selfcal._top_label import first_row

STRING_LABELS = (
    "labels must be integer class indices in [0, C), got class names (e.g. {example!r}); "
    "map each name to the index of its score column first"
)
"""The one message for string (or other non-numeric) labels, wherever labels are read."""


@dataclass(frozen=True, eq=False)
class Labels:
    """Class labels checked by :func:`as_labels`: ``values`` is an int64 ``(N,)`` tensor whose
    entries lie in ``[0, n_classes)`` (``n_classes`` ``None``: checked non-negative only).

    Build one with :func:`as_labels`; ``labels[rows]`` (an index tensor or slice) is the checked
    labels of those rows, read without a check. A loss given a ``Labels`` trusts it."""

    values: torch.Tensor
    n_classes: int | None

    def __len__(self) -> int:
        return int(self.values.shape[0])

    def __getitem__(self, rows: torch.Tensor | slice) -> Labels:
        return Labels(self.values[rows], self.n_classes)


def _non_numeric(arr: np.ndarray, name: str) -> ValueError:
    """The error for an array of strings or other objects."""
    flat = arr.reshape(-1)
    example = next((v for v in flat if isinstance(v, str)), None)
    if name == "labels" and (arr.dtype.kind in "US" or example is not None):
        return ValueError(STRING_LABELS.format(example=str(example if example else flat[0])))
    return ValueError(f"{name} must be numeric, got an array of {arr.dtype.name} values")


def to_tensor(x: Any, name: str) -> torch.Tensor:
    """Convert ``x`` to a torch tensor without copying where possible (strings and other
    non-numeric values raise ``ValueError``). A tensor comes out contiguous, so every memory
    layout of the same values takes the same reductions and gives the same bits (a transposed
    view once changed AdaECE's equal-mass edges on tied confidences)."""
    if isinstance(x, torch.Tensor):
        return x.contiguous()
    if x is None:
        raise ValueError(f"{name} is required")
    arr = np.asarray(x)
    if arr.dtype.kind not in "biuf":
        if arr.dtype.kind == "c":
            raise ValueError(f"{name} must be real numbers, got {arr.dtype}")
        if arr.dtype == object:
            try:  # a list of Python numbers with a None, or Decimal, ...
                arr = arr.astype(np.float64)
            except (TypeError, ValueError):
                raise _non_numeric(arr, name) from None
        else:
            raise _non_numeric(arr, name)
    if not arr.flags.writeable or not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr).copy()
    return torch.from_numpy(arr)


def as_labels(
    y: Any,
    n: int,
    n_classes: int | None,
    *,
    device: torch.device | str | None = None,
    name: str = "labels",
) -> Labels:
    """``y`` checked by the label rule (module doc) as :class:`Labels` on ``device`` (default:
    where ``y`` is). A :class:`Labels` checked against at most ``n_classes`` classes is
    accepted as it is (moved to ``device``), without reading its values.

    >>> as_labels([0, 2.0, True], 3, 3).values
    tensor([0, 2, 1])
    >>> as_labels([0, 3], 2, 3)
    Traceback (most recent call last):
    ...
    ValueError: labels must lie in [0, 3); row 1 has label 3
    """
    if isinstance(y, Labels) and _covers(y.n_classes, n_classes) and y.values.shape[0] == n:
        return y if device is None else Labels(y.values.to(device), y.n_classes)
    t = to_tensor(y.values if isinstance(y, Labels) else y, name)
    if t.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(t.shape)}")
    if t.shape[0] != n:
        raise ValueError(f"{name} has length {t.shape[0]}; expected one label per row ({n})")
    if t.is_complex():
        raise ValueError(f"{name} must be integers, got dtype {t.dtype}")
    if t.is_floating_point():
        bad = ~torch.isfinite(t) | (t != torch.round(t))
        if bool(bad.any()):
            i = first_row(bad)
            raise ValueError(f"{name} must be integers; row {i} has {t[i].item()!r}")
    t = t.to(device=t.device if device is None else device, dtype=torch.long)
    if n:
        low, high = torch.aminmax(t)
        outside = low < 0 if n_classes is None else (low < 0) | (high >= n_classes)
        if bool(outside):
            bad = t < 0 if n_classes is None else (t < 0) | (t >= n_classes)
            i = first_row(bad)
            upper = "inf" if n_classes is None else n_classes
            raise ValueError(f"{name} must lie in [0, {upper}); row {i} has label {int(t[i])}")
    return Labels(t, n_classes)


def _covers(checked: int | None, wanted: int | None) -> bool:
    """Whether labels checked against ``checked`` classes lie in ``[0, wanted)``."""
    return wanted is None or (checked is not None and checked <= wanted)


def as_features(
    x: Any, name: str, *, dtype: torch.dtype | None = None, min_ndim: int = 1
) -> torch.Tensor:
    """``x`` checked by the feature rule (module doc): at least ``min_ndim`` dimensions and one
    row, cast to ``dtype`` (if given), finite."""
    t = to_tensor(x, name)
    if t.ndim < min_ndim or t.ndim == 0 or t.shape[0] < 1:
        raise ValueError(f"{name} must have shape (N, ...) with N >= 1, got {tuple(t.shape)}")
    if dtype is not None:
        t = t.to(dtype)
    if t.is_floating_point() and not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains NaN or infinity")
    return t


def label_values(labels: torch.Tensor | Labels) -> torch.Tensor:
    """The label tensor of ``labels``, checked (:class:`Labels`) or not."""
    return labels.values if isinstance(labels, Labels) else labels
