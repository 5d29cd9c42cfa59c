"""The scores kind, scores and labels of a predictions archive or ``.npy`` pair, read by the
one array reader (:mod:`selfcal.io._files`: regular files only, sizes bounded before any data,
nothing unpickled)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from selfcal.io._files import open_npz, read_npy
from selfcal.io._formats import KINDS


def _read_npz(path: Path, kind: str | None) -> tuple[str, np.ndarray, np.ndarray | None]:
    """Scores kind, scores and labels (or ``None``) from an ``.npz`` archive."""
    with open_npz(path) as archive:
        kind = _npz_kind(path, archive.names, kind)
        arrays = archive.read([name for name in (kind, "labels") if name in archive.names])
    return kind, arrays[kind], arrays.get("labels")


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


def _read_npy(path: Path, kind: str | None) -> tuple[str, np.ndarray, np.ndarray | None]:
    scores_path, file_kind, labels_path = _npy_parts(path)
    if kind is not None and kind != file_kind:
        raise ValueError(f"{scores_path}: the file name says {file_kind!r} but --kind is {kind!r}")
    if not scores_path.exists():
        raise FileNotFoundError(f"{scores_path}: no such file")
    scores = read_npy(scores_path)
    labels = read_npy(labels_path) if labels_path.exists() else None
    return file_kind, scores, labels
