"""The scores kind, scores, labels and groups of a predictions archive or ``.npy`` pair, read
by the one array reader (:mod:`selfcal.io._files`: regular files only, sizes bounded before any
data, nothing unpickled)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from selfcal.io._files import open_npz, read_npy
from selfcal.io._formats import KINDS

GROUP_ARRAYS = ("groups", "group_names")
"""The optional arrays of a predictions archive that say each row's group: ``groups``, one
label a row ``(N,)`` or a 0/1 membership matrix ``(N, G)``, and for the matrix its column
names ``group_names`` ``(G,)``."""

Read = tuple[str, np.ndarray, np.ndarray | None, Any]
"""``(kind, scores, labels or None, groups or None)`` as stored (groups: an array, or
``{name: column}`` for membership columns with names)."""


def _read_npz(path: Path, kind: str | None) -> Read:
    """Scores kind, scores, labels (or ``None``) and groups (or ``None``, :data:`GROUP_ARRAYS`)
    from an ``.npz`` archive."""
    with open_npz(path) as archive:
        kind = _npz_kind(path, archive.names, kind)
        wanted = (kind, "labels", *GROUP_ARRAYS)
        arrays = archive.read([name for name in wanted if name in archive.names])
    return kind, arrays[kind], arrays.get("labels"), _npz_groups(path, arrays)


def _npz_groups(path: Path, arrays: dict[str, np.ndarray]) -> Any:
    """The archive's groups: ``groups`` as it is, or a 2-D ``groups`` named by
    ``group_names`` as ``{name: column}``; ``group_names`` without ``groups``, or beside a
    1-D ``groups``, or of another length, is one line."""
    groups, names = arrays.get("groups"), arrays.get("group_names")
    if names is None:
        return groups
    if groups is None or groups.ndim != 2:
        raise ValueError(
            f"{path}: 'group_names' names the columns of a 2-D 'groups' membership matrix, "
            "and there is none"
        )
    if names.shape != (groups.shape[1],):
        raise ValueError(
            f"{path}: 'group_names' has shape {names.shape}; 'groups' has {groups.shape[1]} columns"
        )
    return {str(name): groups[:, j] for j, name in enumerate(names.tolist())}


def _npz_kind(path: Path, files: list[str], kind: str | None) -> str:
    """The kind to read: ``kind`` when given and present, else the one of :data:`KINDS`
    the archive holds (neither or both: an error saying so)."""
    listed = ", ".join(files) or "none"
    present = [k for k in KINDS if k in files]
    if kind is not None and kind not in present:
        raise ValueError(f"{path}: no {kind!r} array (arrays: {listed})")
    if kind is None and len(present) != 1:
        found = "both 'logits' and 'probs'" if present else "neither 'logits' nor 'probs'"
        raise ValueError(
            f"{path}: needs exactly one of the arrays 'logits' or 'probs', found {found}"
            f" (arrays: {listed})" + ("; pass --kind to choose" if present else "")
        )
    return kind or present[0]


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


def _read_npy(path: Path, kind: str | None) -> Read:
    """Kind, scores, labels and groups of an ``.npy`` pair (``NAME.groups.npy`` beside it,
    where there is one, holds the groups)."""
    scores_path, file_kind, labels_path = _npy_parts(path)
    if kind is not None and kind != file_kind:
        raise ValueError(f"{scores_path}: the file name says {file_kind!r} but --kind is {kind!r}")
    if not scores_path.exists():
        raise FileNotFoundError(f"{scores_path}: no such file")
    scores = read_npy(scores_path)
    labels = read_npy(labels_path) if labels_path.exists() else None
    stem = labels_path.name.removesuffix(".labels.npy")
    groups_path = labels_path.with_name(f"{stem}.groups.npy")
    groups = read_npy(groups_path) if groups_path.exists() else None
    return file_kind, scores, labels, groups
