"""Reading a user's feature tables (the columns through :func:`selfcal.io.read_columns`).

Formats (by suffix):

``.csv`` / ``.parquet`` (``.pq``)
    One row per sample; the label column (``label`` unless told otherwise) and one numeric
    column per feature -- **every other column is a feature**, in file order. Feature columns
    must be numeric (integers, floats or booleans); a missing value is a non-finite feature.
    CSV and parquet are read by :func:`selfcal.io.read_columns` (pyarrow; without it a CSV is
    read by Python's ``csv`` module, the same values, and a parquet file cannot be).
``.npz``
    Array ``x`` (``(N, d)`` numbers) and, for labelled files, array ``y`` (``(N,)``); optional
    ``feature_names`` (``(d,)`` strings), else the features are named ``x0 .. x{d-1}``. Read with
    ``allow_pickle=False``: object arrays are refused.

Labels may be integers (booleans count as 0 / 1; floats must be integral) or strings; a
missing label is an error. Row numbers in messages count data rows from 0 (a CSV header line
is not a row), as :mod:`selfcal.io` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from selfcal.io import read_columns, read_npz

FORMATS = (".csv", ".parquet", ".pq", ".npz")


@dataclass(frozen=True, eq=False)
class FeatureTable:
    """One file's features and labels, as read: ``x`` float64 ``(N, d)`` (not yet checked
    for finiteness), ``columns`` the feature names in order, ``labels`` the raw label values
    (int64 or str array, ``(N,)``) or ``None``; ``name`` says which file it is in messages."""

    name: str
    columns: tuple[str, ...]
    x: np.ndarray
    labels: np.ndarray | None

    @property
    def n_rows(self) -> int:
        return int(self.x.shape[0])

    @classmethod
    def from_arrays(
        cls,
        x: Any,
        labels: Any = None,
        *,
        columns: Sequence[str] | None = None,
        name: str = "data",
    ) -> FeatureTable:
        """A table from in-memory arrays (``columns`` default ``x0 .. x{d-1}``)."""
        xa = _feature_matrix(np.asarray(x), name)
        cols = tuple(columns) if columns is not None else default_columns(xa.shape[1])
        if len(cols) != xa.shape[1]:
            raise ValueError(f"{name}: {len(cols)} column names for {xa.shape[1]} features")
        y = None if labels is None else label_array(np.asarray(labels), name)
        if y is not None and y.shape[0] != xa.shape[0]:
            raise ValueError(f"{name}: {y.shape[0]} labels for {xa.shape[0]} rows")
        return cls(name, cols, xa, y)


def default_columns(d: int) -> tuple[str, ...]:
    """The feature names of an ``.npz`` without ``feature_names``: ``x0 .. x{d-1}``."""
    return tuple(f"x{j}" for j in range(d))


# ----------------------------------------------------------------------------- reading
def read_table(
    path: str | Path, *, label_column: str = "label", require_labels: bool = True
) -> FeatureTable:
    """The features and labels of ``path`` (module docstring). Raises ``ValueError`` naming the
    file for bad content (no label column where one is required, a non-numeric feature, no
    rows) and ``FileNotFoundError`` for a missing file."""
    path = Path(path)
    suffix = path.suffix.lower()
    if path.is_dir():
        raise ValueError(f"{path}: is a folder, not a file")
    if suffix not in FORMATS:
        raise ValueError(
            f"{path}: unknown file type {suffix or '(no extension)'!r}; use .csv, .parquet or .npz"
        )
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if suffix == ".npz":
        table = _read_npz(path, require_labels)
    else:
        table = _read_columns(path, label_column, require_labels)
    if table.n_rows == 0:
        raise ValueError(f"{path}: no rows")
    return table


def _read_npz(path: Path, require_labels: bool) -> FeatureTable:
    name = str(path)
    _, arrays = read_npz(path)
    if "x" not in arrays:
        raise ValueError(
            f"{path}: needs an array 'x' of features (arrays: {', '.join(arrays) or 'none'})"
        )
    x = _feature_matrix(arrays["x"], name)
    if "y" not in arrays and require_labels:
        raise ValueError(f"{path}: no labels (array 'y' not found)")
    labels = label_array(arrays["y"], name) if "y" in arrays else None
    if labels is not None and labels.shape[0] != x.shape[0]:
        raise ValueError(f"{path}: 'y' has {labels.shape[0]} labels but 'x' has {x.shape[0]} rows")
    columns = default_columns(x.shape[1])
    if "feature_names" in arrays:
        names = arrays["feature_names"]
        if names.dtype.kind != "U" or names.shape != (x.shape[1],):
            raise ValueError(f"{path}: 'feature_names' must hold {x.shape[1]} strings")
        columns = tuple(str(n) for n in names)
    return FeatureTable(name, columns, x, labels)


def _feature_matrix(x: np.ndarray, name: str) -> np.ndarray:
    if x.ndim != 2 or x.shape[1] < 1:
        raise ValueError(f"{name}: 'x' must be 2-D (rows, features), got shape {x.shape}")
    if x.dtype.kind not in "biuf":
        raise ValueError(f"{name}: features must be numbers, got dtype {x.dtype}")
    return x.astype(np.float64)


def label_array(values: np.ndarray, name: str) -> np.ndarray:
    """Labels as an int64 array (integers, booleans, integral floats) or a str array."""
    if values.ndim != 1:
        raise ValueError(f"{name}: labels must be 1-D, got shape {values.shape}")
    kind = values.dtype.kind
    if kind in "biu":
        return values.astype(np.int64)
    if kind == "f":
        bad = ~np.isfinite(values) | (values != np.round(values))
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            what = (
                "missing" if np.isnan(values[row]) else f"not an integer ({values[row].item()!r})"
            )
            raise ValueError(f"{name}: the label of row {row} is {what}")
        return values.astype(np.int64)
    if kind in "US":
        return values.astype(str)
    if kind == "O":
        missing = [i for i, v in enumerate(values) if v is None]
        if missing:
            raise ValueError(f"{name}: the label of row {missing[0]} is missing")
        return np.asarray([str(v) for v in values], dtype=str)
    raise ValueError(f"{name}: labels must be integers or strings, got dtype {values.dtype}")


def _read_columns(path: Path, label_column: str, require_labels: bool) -> FeatureTable:
    """CSV / parquet: every column but ``label_column`` is a feature, in file order."""
    names, columns = read_columns(path)
    if label_column not in names and require_labels:
        raise ValueError(
            f"{path}: no label column {label_column!r} (columns: {', '.join(names)}); "
            "name it with --label-column"
        )
    features = [n for n in names if n != label_column]
    if not features:
        raise ValueError(f"{path}: no feature columns besides the label column {label_column!r}")
    x = np.column_stack([_numeric(columns[n], n, path) for n in features])
    labels = label_array(columns[label_column], str(path)) if label_column in names else None
    return FeatureTable(str(path), tuple(features), x, labels)


def _numeric(values: np.ndarray, column: str, path: Path) -> np.ndarray:
    if values.dtype.kind not in "biuf":
        raise ValueError(
            f"{path}: feature column {column!r} is not numeric ({values.dtype}); encode "
            "categorical columns as numbers first (every column but the label column is a "
            "feature)"
        )
    return values.astype(np.float64)
