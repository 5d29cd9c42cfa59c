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

**Groups** (:func:`as_groups`): which group each row belongs to -- an MMLU subject, a site, a
device -- carried beside the scores and labels (:class:`selfcal.predictions.Predictions`
``groups``) and read from files by :mod:`selfcal.io`. Either *one label a row* (strings,
integers, booleans, or floats holding whole numbers: a partition of the rows; an integer
label is named by its decimal form, ``3.0`` as ``"3"``) or *overlapping membership columns*
(a ``(N, G)`` 0/1 or boolean matrix with ``G`` names, or a mapping ``{name: column}``: a row
may lie in several groups or in none). A group is known by its name, a non-empty string;
names are distinct. Each violation is one ``ValueError`` line starting with the argument's
name: a length other than ``N`` (``"{name} has length {m}; expected one group per row
({n})"``), a missing label (``None``, NaN: ``"{name} must name a group in every row; row {i}
has None"``), an empty or blank name, a non-integral float, a membership value other than
0/1, two columns of one name.

A group with no rows (a membership column of zeros, or a group of fit time absent from new
data) is kept, with size 0; the metrics report it as such (:mod:`selfcal.metrics.groups`).
A *group unseen at fit time* -- present in new data, absent from the data a fitted object
saw -- is found by :meth:`Groups.unseen` and coded ``-1`` by :meth:`Groups.codes_in`; the
metrics have no fit time and report every group of the data they are given.
"""

from __future__ import annotations

from collections.abc import Mapping
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


# ------------------------------------------------------------------------------------ groups
GROUPS_FORMS = (
    "one group label per row (strings or integers), a (N, G) 0/1 membership matrix, or a "
    "mapping {name: (N,) membership column}"
)
"""What :func:`as_groups` accepts, as its errors say it."""


@dataclass(frozen=True, eq=False)
class Groups:
    """Groups of rows checked by :func:`as_groups`: ``names`` (``G`` distinct non-empty
    strings) and either ``codes``, an int64 ``(N,)`` tensor giving each row its one group
    (``names[codes[i]]``: a *partition*), or ``membership``, a bool ``(N, G)`` tensor where a
    row may lie in several groups or none (*overlapping* groups). Exactly one of the two is
    set. ``groups[rows]`` is the groups of those rows (names kept, so a group may be empty)."""

    names: tuple[str, ...]
    codes: torch.Tensor | None = None
    membership: torch.Tensor | None = None

    def __len__(self) -> int:
        held = self.codes if self.codes is not None else self.membership
        assert held is not None
        return int(held.shape[0])

    @property
    def n_groups(self) -> int:
        return len(self.names)

    @property
    def overlapping(self) -> bool:
        """Whether the groups are membership columns (a row in any number of groups)."""
        return self.membership is not None

    def __getitem__(self, rows: torch.Tensor | slice) -> Groups:
        if self.codes is not None:
            return Groups(self.names, codes=self.codes[rows])
        assert self.membership is not None
        return Groups(self.names, membership=self.membership[rows])

    def to(self, device: torch.device | str) -> Groups:
        """The same groups on ``device``."""
        if self.codes is not None:
            return Groups(self.names, codes=self.codes.to(device))
        assert self.membership is not None
        return Groups(self.names, membership=self.membership.to(device))

    def rows(self) -> list[torch.Tensor]:
        """Each group's row indices (int64, increasing), in the order of :attr:`names`; an
        empty tensor for a group with no row here. ``O(N log N)`` for a partition (one stable
        sort), ``O(N G)`` for membership columns."""
        if self.codes is not None:
            order = torch.argsort(self.codes, stable=True)
            sizes = torch.bincount(self.codes, minlength=self.n_groups).tolist()
            return list(order.split(sizes))
        assert self.membership is not None
        return [column.nonzero().squeeze(1) for column in self.membership.T]

    def sizes(self) -> torch.Tensor:
        """``(G,)`` int64 rows per group."""
        if self.codes is not None:
            return torch.bincount(self.codes, minlength=self.n_groups)
        assert self.membership is not None
        return self.membership.sum(0)

    def unseen(self, known: tuple[str, ...] | list[str]) -> tuple[str, ...]:
        """The names of groups here that have rows and are not in ``known`` (e.g. the groups
        a calibrator saw when it was fitted), in the order of :attr:`names`."""
        have, seen = self.sizes().tolist(), set(known)
        return tuple(n for n, size in zip(self.names, have) if size and n not in seen)

    def codes_in(self, known: tuple[str, ...] | list[str]) -> torch.Tensor:
        """A partition's codes re-expressed as indices into ``known`` (the group names of
        fit time), ``-1`` for a row whose group is not among them (:meth:`unseen`): what is
        done with those rows is the reader's rule, stated where it reads them."""
        if self.codes is None:
            raise ValueError("codes_in needs one group a row, not membership columns")
        position = {name: i for i, name in enumerate(known)}
        table = torch.tensor([position.get(n, -1) for n in self.names], dtype=torch.long)
        return table.to(self.codes.device)[self.codes]


def as_groups(
    groups: Any,
    n: int,
    *,
    device: torch.device | str | None = None,
    names: list[str] | tuple[str, ...] | None = None,
    name: str = "groups",
) -> Groups:
    """``groups`` checked by the group rule (module doc) as :class:`Groups` on ``device``.

    Accepted: a 1-D array, tensor or sequence of group labels, one per row (strings,
    integers, booleans, or floats holding whole numbers; integer labels are named by their
    decimal form and ordered numerically, strings lexicographically); a 2-D ``(N, G)``
    membership matrix of booleans or 0/1 numbers (columns named ``names``, else ``"0" ..
    "G-1"``); a mapping ``{name: (N,) membership column}``; or :class:`Groups` of ``n`` rows.
    Each violation is one ``ValueError`` line starting with ``name``.

    >>> as_groups(["b", "a", "b"], 3).codes
    tensor([1, 0, 1])
    >>> as_groups(["b", None, "b"], 3)
    Traceback (most recent call last):
    ...
    ValueError: groups must name a group in every row; row 1 has None
    """
    if isinstance(groups, Groups):
        if len(groups) != n:
            raise ValueError(f"{name} has {len(groups)} rows; expected one per row ({n})")
        return groups if device is None else groups.to(device)
    if groups is None:
        raise ValueError(f"{name} is required")
    if isinstance(groups, Mapping):
        keys = [str(k) for k in groups]
        columns = [_membership_column(groups[k], n, f"{name}[{k!r}]") for k in groups]
        if not columns:
            raise ValueError(f"{name} is an empty mapping: give at least one group")
        return _membership(torch.stack(columns, 1), keys, name, device)
    arr = groups.detach().cpu().numpy() if isinstance(groups, torch.Tensor) else None
    arr = np.asarray(groups if arr is None else arr)
    if arr.ndim == 2:
        return _membership(_membership_matrix(arr, n, name), names, name, device)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one label a row) or 2-D (N, G); got {arr.shape}")
    if arr.shape[0] != n:
        raise ValueError(f"{name} has length {arr.shape[0]}; expected one group per row ({n})")
    found, codes = _group_labels(arr, name)
    return Groups(found, codes=torch.from_numpy(codes).to(device or "cpu"))


def _group_labels(arr: np.ndarray, name: str) -> tuple[tuple[str, ...], np.ndarray]:
    """Names (sorted as the labels sort) and int64 codes of 1-D group labels."""
    kind = arr.dtype.kind
    if kind == "c":
        raise ValueError(f"{name} must be strings or integers, got dtype {arr.dtype}")
    if kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            i = int(np.argmax(bad))
            missing = "NaN (a missing group)" if np.isnan(arr[i]) else repr(float(arr[i]))
            raise ValueError(f"{name} must name a group in every row; row {i} has {missing}")
        arr = arr.astype(np.int64)
    elif kind in "SO":
        arr = np.asarray([_group_name(v, i, name) for i, v in enumerate(arr)], dtype=str)
    if arr.dtype.kind == "U":
        blank = np.char.strip(arr) == ""
        if blank.any():
            raise ValueError(f"{name} has an empty group name in row {int(np.argmax(blank))}")
    values, codes = np.unique(arr, return_inverse=True)
    return tuple(str(v) for v in values.tolist()), codes.reshape(-1).astype(np.int64)


def _group_name(value: Any, row: int, name: str) -> str:
    """One group label of an object or bytes array as its name (module doc)."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        return value
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating) and np.isfinite(value) and value == round(value):
        return str(int(value))
    missing = isinstance(value, float | np.floating) and np.isnan(value)
    shown = "NaN (a missing group)" if missing else repr(value)
    raise ValueError(f"{name} must name a group in every row; row {row} has {shown}")


def _membership_column(column: Any, n: int, name: str) -> torch.Tensor:
    """One ``(N,)`` membership column as bool (0/1 numbers or booleans)."""
    arr = np.asarray(column.detach().cpu() if isinstance(column, torch.Tensor) else column)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{name} must be one 0/1 membership value per row ({n}), got {arr.shape}")
    return _membership_matrix(arr[:, None], n, name)[:, 0]


def _membership_matrix(arr: np.ndarray, n: int, name: str) -> torch.Tensor:
    """A ``(N, G)`` 0/1 or boolean matrix as a bool tensor; one line for anything else."""
    if arr.shape[0] != n:
        raise ValueError(f"{name} has {arr.shape[0]} rows; expected one per row ({n})")
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{name}: a 2-D membership matrix must hold 0/1 or booleans")
    bad = (arr != 0) & (arr != 1)
    if bad.any():
        i, j = (int(k) for k in np.argwhere(bad)[0])
        value = arr[i, j].item()
        raise ValueError(
            f"{name}: membership must be 0/1 or booleans; row {i}, column {j} has {value!r}"
        )
    return torch.from_numpy(np.ascontiguousarray(arr == 1))


def _membership(
    matrix: torch.Tensor,
    names: list[str] | tuple[str, ...] | None,
    name: str,
    device: torch.device | str | None,
) -> Groups:
    """:class:`Groups` of a checked bool ``(N, G)`` matrix, its column names checked."""
    g = matrix.shape[1]
    if g == 0:
        raise ValueError(f"{name} has no membership columns: give at least one group")
    names = [str(j) for j in range(g)] if names is None else [str(k) for k in names]
    if len(names) != g:
        raise ValueError(f"{name} has {g} membership columns but {len(names)} names")
    blank = next((j for j, k in enumerate(names) if not k.strip()), None)
    if blank is not None:
        raise ValueError(f"{name}: membership column {blank} has an empty group name")
    if len(set(names)) != g:
        twice = next(k for k in names if names.count(k) > 1)
        raise ValueError(f"{name}: the group name {twice!r} is given to two columns")
    return Groups(tuple(names), membership=matrix.to(device or "cpu"))
