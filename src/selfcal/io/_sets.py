"""Prediction sets: one model's validation and test predictions, what post-hoc calibration is
fitted on (validation) and judged on (test) -- the input of ``selfcal compare`` and of the
studies run on real models (``selfcal reproduce posthoc --sets DIR``).

A set is either

* a **folder** holding ``val.npz`` and ``test.npz``, each with the arrays ``logits`` *or*
  ``probs`` ``(N, C)``, ``labels`` ``(N,)`` and optionally ``groups`` ``(N,)`` (any values:
  a subject, a domain, a site -- what group-conditional coverage is reported by); or
* **one** ``.npz`` **file** with the same arrays suffixed ``_val`` and ``_test``
  (``logits_val``, ``labels_val``, ``logits_test``, ``labels_test``, ``groups_val``, ...).

Its name is the folder's or the file's (without ``.npz``), and names are unique: a folder
``a/`` beside a file ``a.npz`` (or two folders given with a set of one name each) is refused
by :func:`find_prediction_sets`, naming both, rather than one silently taking the other's
place. A folder of sets holds any number of either. ``$SELFCAL_PREDICTIONS`` names the folder
of sets used when none is given.

Sets come from anywhere, so every file is read by the one reader of untrusted array files
(:mod:`selfcal.io._files`: regular files only, every array's header read and its size bounded
before any data). A symbolic link to a regular file is followed -- gathering one's sets into
a folder by linking them is legitimate -- and the set records where it led
(:attr:`PredictionSet.resolved`, said by :meth:`PredictionSet.read_from`), for the reports; a
link to a device, FIFO or socket is refused. Scores are ``(N, C)`` with ``C >= 2``, one column
per class: a one-column array is refused rather than read as a binary positive-class score
(the convention of a plain predictions file, :mod:`selfcal.io`), since a set states its layout.

The kind of the scores comes from the array names, by the rule of every command that reads
scores (:func:`~selfcal.io.check_named_kind`): an array *named* logits whose every row is a
probability vector is refused, naming the array, unless ``kind="logits"`` (``--kind logits``)
says they are logits; ``kind`` also picks one of the two where a split holds both. Every
problem is a one-line ``ValueError`` (or ``FileNotFoundError``) naming the file: a missing
split or array, both or neither of ``logits`` / ``probs``, scores that fail the checks of
:class:`~selfcal.Predictions` (NaN or infinite values, probabilities that are not, labels out
of range), splits with different classes or kinds, groups of another length or in one split
only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from selfcal._inputs import as_groups
from selfcal._validation import check_choice
from selfcal.io._files import NpzArchive, open_npz
from selfcal.io._formats import KINDS, check_named_kind
from selfcal.predictions import Predictions

PREDICTIONS_ENV = "SELFCAL_PREDICTIONS"
"""The environment variable naming the default folder of prediction sets."""
KIND_ENV = "SELFCAL_PREDICTIONS_KIND"
"""The environment variable that, set to ``logits`` or ``probs``, is the ``kind`` the sets
under ``$SELFCAL_PREDICTIONS`` are read with (``selfcal reproduce NAME --sets DIR --kind K``
sets both); unset, the array names say it."""

SPLITS = ("val", "test")
LAYOUT = (
    "a set is a folder with val.npz and test.npz (arrays logits or probs, labels, optional "
    "groups), or one .npz with logits_val, labels_val, logits_test, labels_test"
)


@dataclass(frozen=True)
class PredictionSet:
    """Validation and test scores of one model with their labels (numpy, as stored); ``kind``
    says what the scores are (``"logits"`` or ``"probs"``); ``groups``, where the set has
    them, one value per row (e.g. the MMLU subject of each question); ``resolved``, for each
    file of the set reached through a symbolic link in the set (its folder or file, or a
    split's file), ``(the file as named, its real path)`` -- empty when none is."""

    kind: str
    val: np.ndarray
    val_labels: np.ndarray
    test: np.ndarray
    test_labels: np.ndarray
    name: str = ""
    val_groups: np.ndarray | None = None
    test_groups: np.ndarray | None = None
    resolved: tuple[tuple[Path, Path], ...] = ()

    def read_from(self) -> str:
        """``read from REAL, REAL`` where the set's files were reached through symbolic links
        (:attr:`resolved`), for a report to say where the data really came from; else ``""``.
        One line: a control character in a path (a newline) is written escaped."""
        if not self.resolved:
            return ""
        return "read from " + ", ".join(_printable(str(real)) for _, real in self.resolved)

    @property
    def n_classes(self) -> int:
        return int(self.val.shape[1])

    def predictions(self, split: str) -> Predictions:
        """The split (``"val"`` or ``"test"``) as validated :class:`~selfcal.Predictions`,
        with the split's groups where the set has them."""
        if split == "val":
            scores, labels, groups = self.val, self.val_labels, self.val_groups
        else:
            scores, labels, groups = self.test, self.test_labels, self.test_groups
        if self.kind == "logits":
            return Predictions.from_logits(scores, labels, groups)
        return Predictions.from_probs(scores, labels, groups)


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def default_sets_root() -> Path:
    """``$SELFCAL_PREDICTIONS``, or a ``ValueError`` saying to set it or pass a folder."""
    root = os.environ.get(PREDICTIONS_ENV)
    if not root:
        raise ValueError(
            f"no prediction sets given: pass a folder of sets, or set ${PREDICTIONS_ENV} to one "
            f"({LAYOUT})"
        )
    return Path(root)


def default_sets_kind() -> str | None:
    """``$SELFCAL_PREDICTIONS_KIND`` (checked), or ``None`` when unset or empty."""
    kind = os.environ.get(KIND_ENV) or None
    if kind is not None:
        check_choice(f"${KIND_ENV}", kind, KINDS)
    return kind


def find_prediction_sets(root: str | Path, *more: str | Path, unique: bool = True) -> list[Path]:
    """The prediction sets under ``root`` (and ``more`` roots, each after the one before):
    the root itself when it is one (a set's folder or anything not a folder, which the reader
    then accepts or refuses by name), else its sub-folders holding ``val.npz`` and its
    ``.npz`` entries that are not folders, each root's sorted by name. A missing root is a
    ``FileNotFoundError``; a folder holding no set a ``ValueError``; and (``unique``) so are
    two sets of one name anywhere among the roots, naming both (one set must never stand
    for another). ``unique=False`` lists them all, for a caller that refuses each duplicate
    on its own (:func:`duplicate_name`)."""
    found: dict[Path, None] = {}
    for path in (path for each in (root, *more) for path in _sets_under(Path(each))):
        found.setdefault(path)
    return _unique(list(found)) if unique else list(found)


def _sets_under(root: Path) -> list[Path]:
    if not os.path.lexists(root):
        raise FileNotFoundError(f"{root}: no such folder of prediction sets")
    if not root.is_dir() or os.path.lexists(root / "val.npz"):
        return [root]
    found = [p for p in root.iterdir() if p.is_dir() and os.path.lexists(p / "val.npz")]
    found += [p for p in root.glob("*.npz") if not p.is_dir()]
    if not found:
        raise ValueError(f"{root}: no prediction sets here ({LAYOUT})")
    return sorted(found, key=lambda p: set_name(p))


def _unique(paths: list[Path]) -> list[Path]:
    """``paths``, or a ``ValueError`` naming two of them that give one set name."""
    for i, path in enumerate(paths):
        message = duplicate_name(path, paths[:i])
        if message:
            raise ValueError(message)
    return paths


def duplicate_name(path: Path, before: list[Path]) -> str:
    """Why ``path`` cannot be read beside the sets ``before`` it -- one of them has its
    name -- or ``""``."""
    other = next((p for p in before if set_name(p) == set_name(path) and p != path), None)
    if other is None:
        return ""
    return (
        f"{path}: another prediction set is named {set_name(path)!r} ({other}); "
        "rename one (a set is named by its folder, or its file without .npz)"
    )


def set_name(path: Path) -> str:
    """A set's name: its folder's, or its file's without ``.npz``."""
    return path.name.removesuffix(".npz")


def load_prediction_set(path: str | Path, kind: str | None = None) -> PredictionSet:
    """Read and check the prediction set at ``path`` (a folder or a one-file set; module
    docstring). ``kind``: ``"logits"`` or ``"probs"``, which array to read, as the names
    cannot say (both present) or as they say it wrongly (logits that look like
    probabilities); ``None``: the names."""
    path = Path(path)
    if kind is not None:
        check_choice("kind", kind, KINDS)
    if not os.path.lexists(path):
        raise FileNotFoundError(f"{path}: no such prediction set ({LAYOUT})")
    if path.is_dir():
        parts = {split: _folder_split(path / f"{split}.npz", kind) for split in SPLITS}
    else:
        parts = _file_splits(path, kind)
    (kind, val, val_labels, val_groups), (test_kind, test, test_labels, test_groups) = (
        parts["val"],
        parts["test"],
    )
    where = path if path.is_file() else path / "test.npz"
    if test_kind != kind:
        raise ValueError(f"{where}: the test split holds {test_kind}, the validation split {kind}")
    if test.shape[1:] != val.shape[1:]:
        raise ValueError(
            f"{where}: the test split has {test.shape[1]} classes, the validation split "
            f"{val.shape[1]}"
        )
    if (val_groups is None) != (test_groups is None):
        raise ValueError(f"{where}: groups are given for one split only")
    return PredictionSet(
        kind,
        val,
        val_labels,
        test,
        test_labels,
        set_name(path),
        val_groups,
        test_groups,
        _resolved(path),
    )


def _resolved(path: Path) -> tuple[tuple[Path, Path], ...]:
    """``(file, real path)`` of each file of the set at ``path`` that a symbolic link in the
    set (its folder or file, or a split's file) leads elsewhere; links in the folders above
    the set are the user's layout, not the set's, and are not reported."""
    absolute = Path(os.path.abspath(path))
    named = Path(os.path.realpath(absolute.parent)) / absolute.name
    parts = [Path(f"{split}.npz") for split in SPLITS] if path.is_dir() else [Path()]
    found = ((path / part, Path(os.path.realpath(path / part)), named / part) for part in parts)
    return tuple((file, real) for file, real, expected in found if real != expected)


Split = tuple[str, np.ndarray, np.ndarray, np.ndarray | None]
"""``(kind, scores, labels, groups or None)`` of one split."""


def _folder_split(path: Path, kind: str | None) -> Split:
    if not os.path.lexists(path):
        raise FileNotFoundError(f"{path}: no such file ({LAYOUT})")
    with open_npz(path) as archive:
        return _split(path, archive, "", kind)


def _file_splits(path: Path, kind: str | None) -> dict[str, Split]:
    if path.suffix != ".npz":
        raise ValueError(f"{path}: not a prediction set ({LAYOUT})")
    with open_npz(path) as archive:
        return {split: _split(path, archive, f"_{split}", kind) for split in SPLITS}


def _split(path: Path, archive: NpzArchive, suffix: str, given: str | None) -> Split:
    """One split of ``path``: arrays ``<kind><suffix>``, ``labels<suffix>`` and optionally
    ``groups<suffix>``, their shapes checked from the headers before any data is read, then
    the values; ``given``: the kind to read (module docstring)."""
    kind = _split_kind(path, archive.names, suffix, given)
    names = [f"{kind}{suffix}", f"labels{suffix}", f"groups{suffix}"]
    if names[2] not in archive.names:
        names.pop()
    _check_shapes(path, archive, names)
    arrays = archive.read(names)
    scores, labels = arrays[names[0]], arrays[names[1]]
    groups = arrays.get(f"groups{suffix}")
    if given is None:
        check_named_kind(path, kind, scores, names[0])
    try:
        if kind == "logits":
            Predictions.from_logits(scores, labels)
        else:
            Predictions.from_probs(scores, labels)
        if groups is not None:
            as_groups(groups, scores.shape[0], name=names[-1])
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return kind, scores, np.asarray(labels, dtype=np.int64), groups


def _split_kind(path: Path, files: list[str], suffix: str, given: str | None) -> str:
    """The kind of the split's scores (``given``, or the one the names say), its labels
    present; else one line saying what is missing or ambiguous and what the file holds."""
    listed = ", ".join(files) or "none"
    present = [k for k in KINDS if f"{k}{suffix}" in files]
    if given is not None and given not in present:
        raise ValueError(f"{path}: no array '{given}{suffix}' (arrays: {listed})")
    if given is None and len(present) != 1:
        found = "both" if present else "neither"
        raise ValueError(
            f"{path}: needs exactly one of the arrays 'logits{suffix}' or 'probs{suffix}', found "
            f"{found} (arrays: {listed})" + ("; pass --kind to choose" if present else "")
        )
    if f"labels{suffix}" not in files:
        raise ValueError(f"{path}: no array 'labels{suffix}' (arrays: {listed})")
    return given or present[0]


def _check_shapes(path: Path, archive: NpzArchive, names: list[str]) -> None:
    """Scores ``(N, C)`` with ``C >= 2`` (one column per class), labels and groups one per
    row -- from the headers, so a set whose arrays disagree is refused before any is read."""
    scores = archive.header(names[0]).shape
    if len(scores) != 2:
        raise ValueError(f"{path}: '{names[0]}' must be (N, C), got shape {scores}")
    if scores[1] < 2:
        raise ValueError(
            f"{path}: '{names[0]}' has shape {scores}; a prediction set needs one column per "
            "class (at least 2: a binary model's scores for both classes)"
        )
    for name, what in zip(names[1:], ("label", "value")):
        shape = archive.header(name).shape
        if shape != (scores[0],):
            raise ValueError(
                f"{path}: '{name}' must hold one {what} per row ({scores[0]}), got shape {shape}"
            )
