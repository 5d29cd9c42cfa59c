"""Reading predictions from files and writing calibrated probabilities; the one reader and
writer of ``.csv`` / ``.parquet`` columns (:func:`read_columns`, :func:`write_table`) that the
feature tables of ``selfcal train`` use too.

Supported formats (the kind of scores -- logits or probabilities -- always comes from a name,
never from the values):

``.npz``
    Arrays ``logits`` *or* ``probs`` (shape ``(N, C)``, or ``(N,)`` / ``(N, 1)`` for a binary
    positive-class score) and ``labels`` (shape ``(N,)``); optionally ``groups``, one group
    label a row ``(N,)`` (strings or integers: an MMLU subject, a site), or a 0/1 membership
    matrix ``(N, G)`` of overlapping groups with their names in ``group_names`` ``(G,)``. A
    file holding both ``logits`` and ``probs`` is ambiguous unless ``kind`` picks one.
``.npy`` pair
    ``NAME.logits.npy`` or ``NAME.probs.npy`` holds the scores and ``NAME.labels.npy``, in the
    same folder, the labels (and ``NAME.groups.npy``, where there is one, the groups). Pass the
    scores file (or the labels file, if exactly one scores file sits beside it); the middle
    suffix gives the kind.
``.csv`` / ``.parquet``
    One column per class, named ``logit_0 .. logit_{C-1}`` or ``prob_0 .. prob_{C-1}``
    (``logits_``/``probs_`` also accepted), or a single unindexed ``logit`` / ``prob`` column for
    a binary positive-class score; plus a label column (``label`` by default). Groups come
    from the columns named by ``group_columns`` (``--groups COLUMN``): one column gives one
    group a row, several give overlapping groups ``column=value``
    (:func:`~selfcal.io._tables.table_groups`). With ``kind`` given and no such names, every
    column other than the label and group columns is a score column, in file order.

Groups are checked by the one group rule (:func:`selfcal._inputs.as_groups`) when the
predictions are built: a missing or empty group name, or groups of another length, is one
line naming the file.

Scores *named* logits whose every row lies in ``[0, 1]`` and sums to 1 are refused by
:func:`load_predictions` (a contradiction between name and values, reported with the
evidence) unless ``kind="logits"`` says they really are logits. Labels are integer class
indices: class names (strings) get the one message of
:data:`selfcal.predictions.STRING_LABELS`, since score columns have no names.

Errors are ``ValueError`` (or ``FileNotFoundError``) whose message starts with the file:
an empty file, a file that is not a valid ``.npz`` / ``.npy``, an object array (nothing is
unpickled), a folder, missing labels (naming the arrays or columns there are).
``.npz`` and ``.npy`` files are untrusted input, read by the one reader of
:mod:`selfcal.io._files`: regular files only (a device, FIFO or socket, directly or through a
symbolic link, is refused before it is opened), every array's header read and refused before
any data when its dtype is not plain (booleans, integers, float16/32/64, fixed-width strings),
it has more than 2 dimensions, or it takes more than ``$SELFCAL_MAX_ARRAY_BYTES`` (default
4 GiB, counted as 64-bit values); zip members must hold exactly what they declare.
Row numbers in error messages count data rows from 0 (a CSV header line is not a row).
Prediction sets -- a model's validation and test predictions together -- are read by
:func:`load_prediction_set` (:mod:`selfcal.io._sets`).
``example:NAME`` stands for a bundled example file (see :mod:`selfcal.examples`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from selfcal._validation import check_choice
from selfcal.io._arrays import _read_npy, _read_npz
from selfcal.io._files import open_npz, read_npy, read_npz, read_npz_required
from selfcal.io._formats import KINDS, TABULAR, check_named_kind, format_of, resolve_path
from selfcal.io._regular import MAX_BYTES_ENV, file_digest, max_array_bytes
from selfcal.io._sets import (
    KIND_ENV,
    PREDICTIONS_ENV,
    PredictionSet,
    default_sets_kind,
    default_sets_root,
    find_prediction_sets,
    load_prediction_set,
)
from selfcal.io._tables import _read_tabular, check_pyarrow, read_columns, write_table
from selfcal.predictions import Predictions

__all__ = [
    "KINDS",
    "KIND_ENV",
    "MAX_BYTES_ENV",
    "PREDICTIONS_ENV",
    "TABULAR",
    "PredictionSet",
    "check_named_kind",
    "check_probs_output",
    "default_sets_kind",
    "default_sets_root",
    "file_digest",
    "find_prediction_sets",
    "load_prediction_set",
    "load_predictions",
    "max_array_bytes",
    "open_npz",
    "read_arrays",
    "read_columns",
    "read_inputs",
    "read_npy",
    "read_npz",
    "read_npz_required",
    "resolve_path",
    "save_probs",
    "write_table",
]


def read_arrays(
    path: str | Path, *, kind: str | None = None, label_column: str = "label"
) -> tuple[str, np.ndarray, np.ndarray | None]:
    """``(kind, scores, labels-or-None)`` as stored in ``path``, without validation."""
    return read_inputs(path, kind=kind, label_column=label_column)[:3]


def read_inputs(
    path: str | Path,
    *,
    kind: str | None = None,
    label_column: str = "label",
    group_columns: tuple[str, ...] = (),
) -> tuple[str, np.ndarray, np.ndarray | None, Any]:
    """``(kind, scores, labels-or-None, groups-or-None)`` as stored in ``path``, without
    validation (groups: an array, or ``{name: membership column}``; module docstring).
    ``group_columns`` name a table's group columns; they are refused for other formats,
    whose groups are the ``groups`` array (or ``NAME.groups.npy``)."""
    if kind is not None:
        check_choice("kind", kind, KINDS)
    path = resolve_path(path)
    if path.is_dir():
        raise ValueError(f"{path}: is a folder, not a file; pass one predictions file")
    fmt = format_of(path)
    if fmt != "npy" and not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if group_columns and fmt not in ("csv", "parquet"):
        raise ValueError(
            f"{path}: --groups names columns of a .csv or .parquet table; a .npz holds its "
            "groups as the array 'groups' (a NAME.*.npy pair as NAME.groups.npy), read as is"
        )
    if fmt == "npz":
        return _read_npz(path, kind)
    if fmt == "npy":
        return _read_npy(path, kind)
    return _read_tabular(path, kind, label_column, group_columns)


def load_predictions(
    path: str | Path,
    *,
    kind: str | None = None,
    label_column: str = "label",
    require_labels: bool = True,
    group_columns: tuple[str, ...] = (),
) -> Predictions:
    """Read and validate predictions from ``path`` (format by extension; see module docstring),
    with their groups where the file has them (``group_columns``: a table's group columns).

    ``kind`` (``"logits"`` / ``"probs"``) is needed only where the file's names do not say it;
    given, it overrides them. Scores *named* logits whose every row is a probability vector
    are refused (:func:`check_named_kind`) unless ``kind="logits"`` says they are logits.
    Raises ``ValueError`` (bad content, including every :mod:`selfcal.predictions` validation
    error) or ``FileNotFoundError``; messages start with the file path.
    """
    path = resolve_path(path)
    found, scores, labels, groups = read_inputs(
        path, kind=kind, label_column=label_column, group_columns=group_columns
    )
    if kind is None:
        check_named_kind(path, found, scores)
    if labels is None and require_labels:
        raise ValueError(f"{path}: no labels ({_labels_where(path, label_column)})")
    try:
        if found == "logits":
            return Predictions.from_logits(scores, labels, groups)
        return Predictions.from_probs(scores, labels, groups)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _labels_where(path: Path, label_column: str) -> str:
    """Where the labels of ``path`` were looked for (and, for ``.npz``, what is there)."""
    fmt = format_of(path)
    if fmt in ("csv", "parquet"):
        names, _ = read_columns(path)
        return f"column {label_column!r} not found; columns: {', '.join(names)}"
    if fmt == "npz":
        files, _ = read_npz(path, ())
        return f"array 'labels' not found; arrays: {', '.join(files)}"
    return "a NAME.labels.npy file beside it not found"


def _to_numpy(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


PROBS_OUTPUTS = ".npz, .csv, .parquet or NAME.probs.npy"
"""What :func:`save_probs` writes, as its errors say it."""


def check_probs_output(path: str | Path) -> Path:
    """``path`` as a :class:`Path` when :func:`save_probs` can write it, else the
    ``ValueError`` it would raise -- checked before any work (a folder, an extension it does
    not write, a ``.npy`` not named ``NAME.probs.npy``, ``.parquet`` without pyarrow)."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path}: is a folder; name an output file ({PROBS_OUTPUTS})")
    try:
        fmt = format_of(path)
    except ValueError:
        suffix = path.suffix or "(no extension)"
        raise ValueError(f"{path}: unknown output type {suffix!r}; write {PROBS_OUTPUTS}") from None
    if fmt == "npy" and not path.name.endswith(".probs.npy"):
        raise ValueError(f"{path}: name the output NAME.probs.npy")
    if fmt == "parquet":
        check_pyarrow("writing .parquet files")
    return path


def save_probs(path: str | Path, probs: Any, labels: Any = None) -> Path:
    """Write ``(N, C)`` probabilities (and labels, if given) to ``path``.

    Formats: ``.npz`` (arrays ``probs``, ``labels``), ``NAME.probs.npy`` (labels to
    ``NAME.labels.npy``), ``.csv`` / ``.parquet`` (columns ``prob_0..`` and ``label``);
    anything else is refused by :func:`check_probs_output`. Returns the path written.
    """
    path = check_probs_output(path)
    p = _to_numpy(probs)
    if p.ndim == 1:
        p = np.stack([1 - p, p], axis=1)
    y = None if labels is None else _to_numpy(labels).astype(np.int64)
    fmt = format_of(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "npz":
        with open(path, "wb") as fh:  # np.savez would append .npz to a name ending .NPZ
            if y is None:
                np.savez(fh, probs=p)
            else:
                np.savez(fh, probs=p, labels=y)
    elif fmt == "npy":
        np.save(path, p)
        if y is not None:
            np.save(path.with_name(path.name.removesuffix(".probs.npy") + ".labels.npy"), y)
    else:
        columns = {f"prob_{j}": p[:, j] for j in range(p.shape[1])}
        write_table(path, columns if y is None else {**columns, "label": y})
    return path
