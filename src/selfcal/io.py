"""Reading predictions from files and writing calibrated probabilities; the one reader and
writer of ``.csv`` / ``.parquet`` columns (:func:`read_columns`, :func:`write_table`) that the
feature tables of ``selfcal train`` use too.

Supported formats (the kind of scores -- logits or probabilities -- always comes from a name,
never from the values):

``.npz``
    Arrays ``logits`` *or* ``probs`` (shape ``(N, C)``, or ``(N,)`` / ``(N, 1)`` for a binary
    positive-class score) and ``labels`` (shape ``(N,)``). A file holding both ``logits`` and
    ``probs`` is ambiguous unless ``kind`` picks one.
``.npy`` pair
    ``NAME.logits.npy`` or ``NAME.probs.npy`` holds the scores and ``NAME.labels.npy``, in the
    same folder, the labels. Pass the scores file (or the labels file, if exactly one scores
    file sits beside it); the middle suffix gives the kind.
``.csv`` / ``.parquet``
    One column per class, named ``logit_0 .. logit_{C-1}`` or ``prob_0 .. prob_{C-1}``
    (``logits_``/``probs_`` also accepted), or a single unindexed ``logit`` / ``prob`` column for
    a binary positive-class score; plus a label column (``label`` by default). With ``kind``
    given and no such names, every column other than the label column is a score column, in
    file order.

Scores *named* logits whose every row lies in ``[0, 1]`` and sums to 1 are refused by
:func:`load_predictions` (a contradiction between name and values, reported with the
evidence) unless ``kind="logits"`` says they really are logits. Labels are integer class
indices: class names (strings) get the one message of
:data:`selfcal.predictions.STRING_LABELS`, since score columns have no names.

Errors are ``ValueError`` (or ``FileNotFoundError``) whose message starts with the file:
an empty file, a file that is not a valid ``.npz`` / ``.npy``, an object array (nothing is
unpickled), a folder, missing labels (naming the arrays or columns there are).
Row numbers in error messages count data rows from 0 (a CSV header line is not a row).
``example:NAME`` stands for a bundled example file (see :mod:`selfcal.examples`).
"""

from __future__ import annotations

import csv
import re
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from selfcal._validation import check_choice
from selfcal.predictions import Predictions, looks_like_probabilities

KINDS = ("logits", "probs")
TABULAR = (".csv", ".parquet")
_PREFIX = {"logit": "logits", "logits": "logits", "prob": "probs", "probs": "probs"}
_SCORE_COLUMN = re.compile(r"^(logits?|probs?)(?:_(\d+))?$")


# ----------------------------------------------------------------------------- path handling
def resolve_path(path: str | Path) -> Path:
    """``example:NAME`` -> the bundled file; otherwise ``path`` as a :class:`Path`."""
    text = str(path)
    if text.startswith("example:"):
        from selfcal.examples import example_path

        return example_path(text.removeprefix("example:"))
    return Path(path)


def _format_of(path: Path) -> str:
    """The format key of ``path``: ``npz``, ``npy``, ``csv`` or ``parquet``."""
    suffix = path.suffix.lower()
    if suffix in (".npz", ".npy", ".csv", ".parquet"):
        return suffix[1:]
    if suffix == ".pq":
        return "parquet"
    raise ValueError(
        f"{path}: unknown file type {suffix or '(no extension)'!r}; "
        "use .npz, .npy (NAME.logits.npy + NAME.labels.npy), .csv or .parquet"
    )


# ----------------------------------------------------------------------------- readers
_NPY_MAGIC = b"\x93NUMPY"


def _check_not_empty(path: Path) -> None:
    if path.stat().st_size == 0:
        raise ValueError(f"{path}: the file is empty (0 bytes)")


def _array_error(path: Path, name: str | None, exc: Exception) -> ValueError:
    """The one-line error for an array numpy could not load (object arrays named as such);
    ``name``: the member of an ``.npz``, ``None`` for an ``.npy`` file."""
    what = "the file" if name is None else f"the array {name!r}"
    if "allow_pickle" in str(exc):
        return ValueError(
            f"{path}: {what} holds non-numeric (object) values, which selfcal does not load "
            "(nothing is unpickled)"
        )
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return ValueError(f"{path}: cannot read {what} ({first})")


def read_npz(
    path: str | Path, names: Iterable[str] | None = None
) -> tuple[list[str], dict[str, np.ndarray]]:
    """The array names of the ``.npz`` archive ``path`` and the arrays among ``names`` (every
    array when ``None``), read without unpickling. An empty file, a file that is not a zip
    archive, an object array or a damaged member is a ``ValueError`` naming the file."""
    path = Path(path)
    _check_not_empty(path)
    if not zipfile.is_zipfile(path):
        with open(path, "rb") as fh:
            npy = fh.read(len(_NPY_MAGIC)) == _NPY_MAGIC
        what = "a single .npy array" if npy else "not a zip file"
        raise ValueError(f"{path}: not a valid .npz archive ({what})")
    try:
        with np.load(path, allow_pickle=False) as data:
            files = list(data.files)
            wanted = files if names is None else [n for n in names if n in files]
            return files, {name: _npz_member(data, name, path) for name in wanted}
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise ValueError(f"{path}: not a valid .npz archive ({exc})") from None


def _npz_member(data: Any, name: str, path: Path) -> np.ndarray:
    try:
        value = data[name]
    except (ValueError, EOFError, zipfile.BadZipFile, OSError) as exc:
        raise _array_error(path, name, exc) from None
    if not isinstance(value, np.ndarray):
        raise ValueError(f"{path}: the member {name!r} is not a NumPy array")
    return value


def read_npy(path: str | Path) -> np.ndarray:
    """The array in the ``.npy`` file ``path``, read without unpickling (errors as
    :func:`read_npz`)."""
    path = Path(path)
    _check_not_empty(path)
    with open(path, "rb") as fh:
        if fh.read(len(_NPY_MAGIC)) != _NPY_MAGIC:
            raise ValueError(f"{path}: not a valid .npy file (no NumPy header)")
    try:
        return np.asarray(np.load(path, allow_pickle=False))
    except (ValueError, EOFError, OSError) as exc:
        raise _array_error(path, None, exc) from None


def _read_npz(path: Path, kind: str | None) -> tuple[str, np.ndarray, np.ndarray | None]:
    """Scores kind, scores and labels (or ``None``) from an ``.npz`` archive."""
    files, _ = read_npz(path, ())
    listed = ", ".join(files) or "none"
    present = [k for k in KINDS if k in files]
    if kind is not None and kind not in present:
        raise ValueError(f"{path}: no {kind!r} array (arrays: {listed})")
    if kind is None:
        if len(present) != 1:
            found = "both 'logits' and 'probs'" if present else "neither 'logits' nor 'probs'"
            raise ValueError(
                f"{path}: needs exactly one of the arrays 'logits' or 'probs', found {found}"
                f" (arrays: {listed})" + ("; pass --kind to choose" if present else "")
            )
        kind = present[0]
    _, arrays = read_npz(path, (kind, "labels"))
    return kind, arrays[kind], arrays.get("labels")


def _npy_parts(path: Path) -> tuple[Path, str, Path]:
    """``(scores file, kind, labels file)`` of an ``.npy`` pair given either member."""
    name = path.name
    for kind in KINDS:
        if name.endswith(f".{kind}.npy"):
            stem = name.removesuffix(f".{kind}.npy")
            return path, kind, path.with_name(f"{stem}.labels.npy")
    if name.endswith(".labels.npy"):
        stem = name.removesuffix(".labels.npy")
        found = [k for k in KINDS if path.with_name(f"{stem}.{k}.npy").exists()]
        if len(found) != 1:
            raise ValueError(
                f"{path}: expected exactly one of {stem}.logits.npy / {stem}.probs.npy beside it,"
                f" found {len(found)}"
            )
        return path.with_name(f"{stem}.{found[0]}.npy"), found[0], path
    raise ValueError(
        f"{path}: a .npy file must be named NAME.logits.npy or NAME.probs.npy "
        "(with labels in NAME.labels.npy)"
    )


def _read_npy(path: Path, kind: str | None) -> tuple[str, np.ndarray, np.ndarray | None]:
    scores_path, file_kind, labels_path = _npy_parts(path)
    if kind is not None and kind != file_kind:
        raise ValueError(f"{scores_path}: the file name says {file_kind!r} but --kind is {kind!r}")
    if not scores_path.exists():
        raise FileNotFoundError(f"{scores_path}: no such file")
    scores = read_npy(scores_path)
    labels = read_npy(labels_path) if labels_path.exists() else None
    return file_kind, scores, labels


_NEEDS_PYARROW = "{} needs pyarrow: pip install pyarrow (or selfcal[full])"


def read_columns(path: str | Path) -> tuple[list[str], dict[str, np.ndarray]]:
    """The column names of a ``.csv`` / ``.parquet`` file, in file order, and each column as
    a numpy array: integers and floats as numbers (a missing value in a numeric column as NaN),
    booleans as 0 / 1, anything else as an object array of Python values (``None`` where
    missing). Read with pyarrow; without it a CSV is read by Python's ``csv`` module (the same
    values), a parquet file cannot be. Duplicate column names are an error."""
    path = Path(path)
    parquet = _format_of(path) == "parquet"
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
        raise ValueError(f"{path}: duplicate column names")


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


def _score_columns(names: list[str], label_column: str, kind: str | None) -> tuple[str, list[str]]:
    """Kind and ordered score column names of a table (see the module docstring)."""
    by_kind: dict[str, dict[int | None, str]] = {"logits": {}, "probs": {}}
    for name in names:
        match = _SCORE_COLUMN.match(name)
        if match and name != label_column:
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
        cols = [n for n in names if n != label_column]
        if not cols:
            raise ValueError("no score columns besides the label column")
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
    path: Path, kind: str | None, label_column: str
) -> tuple[str, np.ndarray, np.ndarray | None]:
    """Kind, scores and labels of a table; the labels as read (validated with the scores, so
    that class names get the one message of :data:`selfcal.predictions.STRING_LABELS`)."""
    names, columns = read_columns(path)
    try:
        kind, cols = _score_columns(names, label_column, kind)
        scores = np.column_stack([_numeric(columns, c) for c in cols])
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    labels = columns[label_column] if label_column in names else None
    return kind, scores, labels


# ----------------------------------------------------------------------------- public API
def read_arrays(
    path: str | Path, *, kind: str | None = None, label_column: str = "label"
) -> tuple[str, np.ndarray, np.ndarray | None]:
    """``(kind, scores, labels-or-None)`` as stored in ``path``, without validation."""
    if kind is not None:
        check_choice("kind", kind, KINDS)
    path = resolve_path(path)
    if path.is_dir():
        raise ValueError(f"{path}: is a folder, not a file; pass one predictions file")
    fmt = _format_of(path)
    if fmt != "npy" and not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if fmt == "npz":
        return _read_npz(path, kind)
    if fmt == "npy":
        return _read_npy(path, kind)
    return _read_tabular(path, kind, label_column)


def load_predictions(
    path: str | Path,
    *,
    kind: str | None = None,
    label_column: str = "label",
    require_labels: bool = True,
) -> Predictions:
    """Read and validate predictions from ``path`` (format by extension; see module docstring).

    ``kind`` (``"logits"`` / ``"probs"``) is needed only where the file's names do not say it;
    given, it overrides them. Scores *named* logits whose every row is a probability vector
    are refused (:func:`check_named_kind`) unless ``kind="logits"`` says they are logits.
    Raises ``ValueError`` (bad content, including every :mod:`selfcal.predictions` validation
    error) or ``FileNotFoundError``; messages start with the file path.
    """
    path = resolve_path(path)
    found, scores, labels = read_arrays(path, kind=kind, label_column=label_column)
    if kind is None:
        check_named_kind(path, found, scores)
    if labels is None and require_labels:
        raise ValueError(f"{path}: no labels ({_labels_where(path, label_column)})")
    try:
        if found == "logits":
            return Predictions.from_logits(scores, labels)
        return Predictions.from_probs(scores, labels)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _labels_where(path: Path, label_column: str) -> str:
    """Where the labels of ``path`` were looked for (and, for ``.npz``, what is there)."""
    fmt = _format_of(path)
    if fmt in ("csv", "parquet"):
        names, _ = read_columns(path)
        return f"column {label_column!r} not found; columns: {', '.join(names)}"
    if fmt == "npz":
        files, _ = read_npz(path, ())
        return f"array 'labels' not found; arrays: {', '.join(files)}"
    return "a NAME.labels.npy file beside it not found"


def check_named_kind(path: str | Path, kind: str, scores: np.ndarray) -> None:
    """Refuse scores whose *name* says logits while every row lies in ``[0, 1]`` and sums
    to 1 (:func:`selfcal.predictions.looks_like_probabilities`): one line naming the
    evidence and both ways out. selfcal never guesses; this is a contradiction, not a guess."""
    if kind != "logits" or not looks_like_probabilities(scores):
        return
    path = Path(path)
    one_column = scores.ndim == 1 or scores.shape[1] == 1
    evidence = (
        "every value lies in [0, 1]" if one_column else "every row lies in [0, 1] and sums to 1"
    )
    fmt = _format_of(path)
    if fmt == "npz":
        what, fix = "the array 'logits' holds", "rename it 'probs'"
    elif fmt == "npy":
        what, fix = "the scores named .logits.npy hold", "rename the file NAME.probs.npy"
    elif one_column:
        what, fix = "the 'logit' column holds", "rename it 'prob'"
    else:
        last = scores.shape[1] - 1
        what, fix = "the logit_* columns hold", f"rename them prob_0 .. prob_{last}"
    raise ValueError(
        f"{path}: {what} probabilities ({evidence}); {fix}, or pass --kind logits "
        "(kind='logits' in Python) if these really are logits"
    )


def _to_numpy(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def save_probs(path: str | Path, probs: Any, labels: Any = None) -> Path:
    """Write ``(N, C)`` probabilities (and labels, if given) to ``path``.

    Formats: ``.npz`` (arrays ``probs``, ``labels``), ``NAME.probs.npy`` (labels to
    ``NAME.labels.npy``), ``.csv`` / ``.parquet`` (columns ``prob_0..`` and ``label``).
    Returns the path written.
    """
    path = Path(path)
    p = _to_numpy(probs)
    if p.ndim == 1:
        p = np.stack([1 - p, p], axis=1)
    y = None if labels is None else _to_numpy(labels).astype(np.int64)
    fmt = _format_of(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "npz":
        if y is None:
            np.savez(path, probs=p)
        else:
            np.savez(path, probs=p, labels=y)
    elif fmt == "npy":
        if not path.name.endswith(".probs.npy"):
            raise ValueError(f"{path}: name the output NAME.probs.npy")
        np.save(path, p)
        if y is not None:
            np.save(path.with_name(path.name.removesuffix(".probs.npy") + ".labels.npy"), y)
    else:
        columns = {f"prob_{j}": p[:, j] for j in range(p.shape[1])}
        write_table(path, columns if y is None else {**columns, "label": y})
    return path


def write_table(path: str | Path, columns: Mapping[str, Any]) -> Path:
    """Write named 1-D columns to ``.csv`` or ``.parquet`` (pyarrow; without it a CSV through
    Python's ``csv`` module, floats written with ``repr``, which round-trips). Returns the
    path written."""
    path = Path(path)
    if _format_of(path) not in ("csv", "parquet"):
        raise ValueError(f"{path}: write a table as .csv or .parquet")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import pyarrow as pa
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq
    except ImportError:
        if _format_of(path) == "parquet":
            raise ValueError(_NEEDS_PYARROW.format("writing .parquet files")) from None
        _write_csv_plain(path, columns)
        return path
    table = pa.table({name: pa.array(np.asarray(values)) for name, values in columns.items()})
    if _format_of(path) == "parquet":
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
