"""The ``.npz`` and ``.npy`` readers of :mod:`selfcal.io`: arrays read without unpickling,
and the scores kind, scores and labels of a predictions archive or ``.npy`` pair."""

from __future__ import annotations

import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from selfcal.io._formats import KINDS

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
