"""The one reader and writer of ``.csv`` / ``.parquet`` columns (:func:`read_columns`,
:func:`write_table`; pyarrow, or Python's ``csv`` module without it), and the score and label
columns of a predictions table (the naming rules of :mod:`selfcal.io`)."""

from __future__ import annotations

import csv
import importlib.util
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from selfcal.io._formats import KINDS, format_of

_PREFIX = {"logit": "logits", "logits": "logits", "prob": "probs", "probs": "probs"}
_SCORE_COLUMN = re.compile(r"^(logits?|probs?)(?:_(\d+))?$")
_NEEDS_PYARROW = "{} needs pyarrow: pip install pyarrow (or selfcal[full])"


def check_pyarrow(purpose: str) -> None:
    """``ValueError: {purpose} needs pyarrow: ...`` when pyarrow is not installed (found
    without importing it)."""
    if importlib.util.find_spec("pyarrow") is None:
        raise ValueError(_NEEDS_PYARROW.format(purpose))


def read_columns(path: str | Path) -> tuple[list[str], dict[str, np.ndarray]]:
    """The column names of a ``.csv`` / ``.parquet`` file, in file order, and each column as
    a numpy array: integers and floats as numbers (a missing value in a numeric column as NaN),
    booleans as 0 / 1, anything else as an object array of Python values (``None`` where
    missing). Read with pyarrow; without it a CSV is read by Python's ``csv`` module (the same
    values), a parquet file cannot be. Duplicate column names are an error."""
    path = Path(path)
    parquet = format_of(path) == "parquet"
    try:
        import pyarrow as pa
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq
    except ImportError:
        if parquet:
            raise ValueError(_NEEDS_PYARROW.format("reading .parquet files")) from None
        return _csv_columns(path)
    try:
        table = pq.read_table(path) if parquet else pacsv.read_csv(path)
    except Exception as exc:  # pyarrow.lib.ArrowInvalid and friends
        what = "read parquet" if parquet else "parse CSV"
        raise ValueError(f"{path}: cannot {what}: {str(exc).splitlines()[0]}") from None
    names = [str(n) for n in table.column_names]
    _check_unique(names, path)
    return names, {name: _arrow_array(table.column(name), pa) for name in names}


def _arrow_array(col: Any, pa: Any) -> np.ndarray:
    if pa.types.is_integer(col.type) or pa.types.is_floating(col.type):
        return (col.cast(pa.float64()) if col.null_count else col).to_numpy()
    if pa.types.is_boolean(col.type) and not col.null_count:
        return col.to_numpy(zero_copy_only=False).astype(np.int64)
    if pa.types.is_null(col.type):
        return np.full(len(col), np.nan)
    return np.asarray(col.to_pylist(), dtype=object)


def _check_unique(names: list[str], path: Path) -> None:
    if len(set(names)) != len(names):
        if first_row_is_data(path, names):
            raise ValueError(data_row_message(path, names))
        raise ValueError(f"{path}: duplicate column names")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def first_row_is_data(path: Path, names: list[str]) -> bool:
    """Whether ``path`` is a CSV whose every column name parses as a number: a file without
    a header (``np.savetxt``'s), whose first row was read as the names."""
    return format_of(path) == "csv" and bool(names) and all(_is_number(n) for n in names)


def data_row_message(path: Path, names: list[str]) -> str:
    """The one line for :func:`first_row_is_data`: what was read and the header to add."""
    shown = ", ".join(names[:2]) + (", …" if len(names) > 2 else "")
    header = f"logit_0..logit_{len(names) - 2}, label" if len(names) > 1 else "logit, label"
    return (
        f"{path}: the first row looks like data, not column names ({shown}): add a header "
        f"({header}; prob_* for probabilities), e.g. np.savetxt(..., delimiter=',', "
        "header='logit_0,...,label', comments='')"
    )


def _csv_columns(path: Path) -> tuple[list[str], dict[str, np.ndarray]]:
    """Fallback CSV reader (no pyarrow): numbers where every cell parses, else strings."""
    with open(path, encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        raise ValueError(f"{path}: empty file")
    names, body = [c.strip() for c in rows[0]], [r for r in rows[1:] if r]
    _check_unique(names, path)
    for i, row in enumerate(body):
        if len(row) != len(names):
            raise ValueError(f"{path}: row {i} has {len(row)} fields, the header {len(names)}")
    return names, {n: _parse_column([r[j] for r in body]) for j, n in enumerate(names)}


def _parse_column(cells: list[str]) -> np.ndarray:
    stripped = [c.strip() for c in cells]
    try:
        return np.asarray([int(c) for c in stripped], dtype=np.int64)
    except ValueError:
        pass
    try:
        return np.asarray([float(c) if c else np.nan for c in stripped], dtype=np.float64)
    except ValueError:
        return np.asarray([c if c else None for c in stripped], dtype=object)


def _score_columns(
    names: list[str], label_column: str, kind: str | None, other: tuple[str, ...] = ()
) -> tuple[str, list[str]]:
    """Kind and ordered score column names of a table (see the module docstring); ``other``:
    columns that are not scores either (the group columns)."""
    by_kind: dict[str, dict[int | None, str]] = {"logits": {}, "probs": {}}
    for name in names:
        match = _SCORE_COLUMN.match(name)
        if match and name != label_column and name not in other:
            idx = None if match.group(2) is None else int(match.group(2))
            by_kind[_PREFIX[match.group(1)]][idx] = name
    present = [k for k in KINDS if by_kind[k]]
    if len(present) > 1 and kind is None:
        raise ValueError("found both logit_* and prob_* columns; pass --kind to choose")
    if kind is not None and present and kind not in present:
        raise ValueError(f"--kind is {kind!r} but the columns are named {present[0]}")
    if not present:
        if kind is None:
            raise ValueError(
                "no score columns: name them logit_0.. or prob_0.. (or a single 'logit'/'prob' "
                "column for binary), or pass --kind to use every non-label column"
            )
        cols = [n for n in names if n != label_column and n not in other]
        if not cols:
            raise ValueError("no score columns besides the label and group columns")
        return kind, cols
    kind = kind or present[0]
    return kind, _ordered(by_kind[kind], kind)


def _ordered(columns: dict[int | None, str], kind: str) -> list[str]:
    """Score columns sorted by class index; indices must be exactly ``0 .. C-1``."""
    if None in columns:
        if len(columns) > 1:
            raise ValueError(f"mix of indexed and unindexed {kind} columns")
        return [columns[None]]
    idx = sorted(k for k in columns if k is not None)
    if idx != list(range(len(idx))):
        raise ValueError(
            f"{kind} columns must be numbered 0..{len(idx) - 1} without gaps; got indices "
            f"{idx[:10]}{'...' if len(idx) > 10 else ''}"
        )
    return [columns[i] for i in idx]


def _numeric(columns: dict[str, np.ndarray], name: str) -> np.ndarray:
    values = columns[name]
    if values.dtype.kind not in "biuf":
        raise ValueError(f"column {name!r} must be numeric, got text")
    return values


def _read_tabular(
    path: Path, kind: str | None, label_column: str, group_columns: tuple[str, ...] = ()
) -> tuple[str, np.ndarray, np.ndarray | None, Any]:
    """Kind, scores, labels and groups of a table; the labels as read (validated with the
    scores, so that class names get the one message of
    :data:`selfcal.predictions.STRING_LABELS`); the groups by :func:`table_groups`."""
    names, columns = read_columns(path)
    if (
        label_column not in names
        and first_row_is_data(path, names)
        # with --kind, a header of plain class indices (0, 1, ...) is a header
        and (kind is None or not all(n.strip().isdigit() for n in names))
    ):
        raise ValueError(data_row_message(path, names))
    try:
        kind, cols = _score_columns(names, label_column, kind, group_columns)
        scores = np.column_stack([_numeric(columns, c) for c in cols])
        groups = table_groups(columns, group_columns, label_column)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    labels = columns[label_column] if label_column in names else None
    return kind, scores, labels, groups


def table_groups(columns: dict[str, np.ndarray], chosen: tuple[str, ...], label: str) -> Any:
    """The groups of the columns ``chosen`` (``--groups COLUMN``, repeatable): one column's
    values as they are (one group a row); several columns as overlapping groups, one for
    each value of each column, named ``column=value`` (a row lies in one group of each
    column). ``None`` when none is chosen. A column that is missing, is the label column or
    is chosen twice, or a missing value in one (checked by the group rule), is one line."""
    from selfcal._inputs import as_groups

    if not chosen:
        return None
    for name in chosen:
        if name not in columns:
            raise ValueError(f"no group column {name!r}; columns: {', '.join(columns)}")
        if name == label or chosen.count(name) > 1:
            what = "the label column" if name == label else "given twice"
            raise ValueError(f"group column {name!r} is {what}")
    n = len(columns[chosen[0]])
    out: dict[str, np.ndarray] = {}
    for name in chosen:
        checked = as_groups(columns[name], n, name=f"group column {name!r}")
        assert checked.codes is not None
        codes = checked.codes.numpy()
        out |= {f"{name}={value}": codes == g for g, value in enumerate(checked.names)}
    return columns[chosen[0]] if len(chosen) == 1 else out


def write_table(path: str | Path, columns: Mapping[str, Any]) -> Path:
    """Write named 1-D columns to ``.csv`` or ``.parquet`` (pyarrow; without it a CSV through
    Python's ``csv`` module, floats written with ``repr``, which round-trips). Returns the
    path written."""
    path = Path(path)
    if format_of(path) not in ("csv", "parquet"):
        raise ValueError(f"{path}: write a table as .csv or .parquet")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import pyarrow as pa
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq
    except ImportError:
        if format_of(path) == "parquet":
            raise ValueError(_NEEDS_PYARROW.format("writing .parquet files")) from None
        _write_csv_plain(path, columns)
        return path
    table = pa.table({name: pa.array(np.asarray(values)) for name, values in columns.items()})
    if format_of(path) == "parquet":
        pq.write_table(table, path)
    else:
        pacsv.write_csv(table, path)
    return path


def _write_csv_plain(path: Path, columns: Mapping[str, Any]) -> None:
    names = list(columns)
    values = [np.asarray(columns[n]).tolist() for n in names]
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(names)
        writer.writerows(zip(*values))
