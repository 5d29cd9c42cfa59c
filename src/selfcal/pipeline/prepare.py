"""From the user's tables to training tensors: the label mapping, the feature columns, the
standardisation and the meta-validation split.

Choices:

* **Labels.** The classes are the distinct labels of the training file (DATA), sorted
  (numerically for integers, lexicographically for strings); class ``k`` is the ``k``-th.
  Integers stay integers when every file's labels are integers; otherwise labels are compared
  as strings (``str(3) == "3"``). A VAL or TEST label that DATA does not have is an error, as
  is a DATA file with fewer than two classes.
* **Features.** Every file must have DATA's feature columns, by name (their order may differ;
  they are reordered to DATA's). A missing or an extra column is an error naming them.
  Features must be finite.
* **Standardisation.** ``(x - mean) / std`` per feature with DATA's mean and population std
  (:func:`selfcal.data.core.standardization_stats`: ddof 0, a constant column gets std 1),
  computed in float64 and stored as float32 (:func:`selfcal.data.core.standardize_features`),
  as the bundled tabular loaders do; the statistics are saved with the model.
* **Meta-validation.** Every method trains on DATA less a stratified, seeded 1/9 of it
  (``round(n / 9)`` rows), the held-out set CE-DECE, FLγ-SECE and BO4SC learn from -- the
  benchmark's split (the meta-learning papers' 8:1:1,
  :func:`selfcal.data.core.meta_split_indices`). The
  methods that do not use it lose those rows too, so that the reports of two methods trained
  on the same files with the same seed compare like with like. VAL is never trained on: it
  picks the checkpoint and the hyperparameters and fits the post-hoc calibrator and the
  abstention threshold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from selfcal.data.core import (
    META_FRACTION,
    meta_split_indices,
    standardization_stats,
    standardize_features,
)
from selfcal.pipeline.tables import FeatureTable

MIN_TRAIN_ROWS = 5
"""The fewest DATA rows that leave both a training and a meta-validation row."""


# ----------------------------------------------------------------------------- labels
@dataclass(frozen=True)
class LabelMap:
    """The classes in order: class ``k`` is ``classes[k]`` (ints or strings)."""

    classes: tuple[int, ...] | tuple[str, ...]

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    @property
    def is_integer(self) -> bool:
        return all(isinstance(c, int) for c in self.classes)

    @classmethod
    def from_tables(cls, train: np.ndarray, others: Sequence[np.ndarray] = ()) -> LabelMap:
        """DATA's distinct labels, sorted; integers if every array is integer (module doc)."""
        integer = all(a.dtype.kind in "iu" for a in (train, *others))
        values = np.unique(train if integer else train.astype(str))
        classes = tuple(int(v) for v in values) if integer else tuple(str(v) for v in values)
        return cls(classes)

    def encode(self, labels: np.ndarray, name: str) -> np.ndarray:
        """Class indices (int64) of ``labels``; a label outside the classes is an error."""
        indices, known = self.encode_known(labels)
        if not known.all():
            row = int(np.flatnonzero(~known)[0])
            raise ValueError(
                f"{name}: row {row} has label {labels[row].item()!r}, which the training data does "
                f"not have (classes: {self.shown_classes()})"
            )
        return indices

    def encode_known(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(indices, known)``: the class index of each label and whether the training data
        has it (an unknown label's index is meaningless: read it only where ``known``)."""
        if self.is_integer and labels.dtype.kind in "iu":
            keys: np.ndarray = np.asarray(self.classes, dtype=np.int64)
            values = labels.astype(np.int64)
        else:
            keys = np.asarray([str(c) for c in self.classes])
            values = labels.astype(str)
        order = np.argsort(keys, kind="stable")
        pos = np.searchsorted(keys[order], values).clip(0, len(keys) - 1)
        return order[pos].astype(np.int64), keys[order][pos] == values

    def shown_classes(self, limit: int = 10) -> str:
        """The first ``limit`` classes, for messages: ``'a', 'b', ...``."""
        more = ", ..." if self.n_classes > limit else ""
        return ", ".join(repr(c) for c in self.classes[:limit]) + more

    def decode(self, indices: np.ndarray) -> np.ndarray:
        """Class values of class indices (an int64 or str array)."""
        values = np.asarray(self.classes, dtype=np.int64 if self.is_integer else str)
        return values[indices]


# ----------------------------------------------------------------------------- features
@dataclass(frozen=True, eq=False)
class Standardizer:
    """``(x - mean) / std`` per feature, in float64, returned as float32."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(
        cls, x: np.ndarray, columns: Sequence[str] | None = None, name: str = "data"
    ) -> Standardizer:
        """DATA's statistics; a feature whose mean or std overflows float64 is an error
        naming it (``columns``, default ``x0 ..``) and the file ``name``."""
        x = np.asarray(x, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            mean, std = standardization_stats(x)
        bad = ~(np.isfinite(mean) & np.isfinite(std))
        if bad.any():
            col = int(np.flatnonzero(bad)[0])
            label = columns[col] if columns is not None else f"x{col}"
            biggest = float(np.max(np.abs(x[:, col])))
            raise ValueError(
                f"{name}: feature {label!r} has values too large to standardise (largest "
                f"magnitude {biggest:.3g}; its variance overflows float64); rescale the column"
            )
        return cls(np.asarray(mean, dtype=np.float64), np.asarray(std, dtype=np.float64))

    def transform(self, x: np.ndarray) -> torch.Tensor:
        return standardize_features(
            torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64)),
            torch.from_numpy(self.mean),
            torch.from_numpy(self.std),
        )

    def check(self, x: np.ndarray, columns: Sequence[str], name: str) -> None:
        """Every standardised feature of ``x`` fits float32: a value far outside DATA's range
        (which would become infinite) is an error naming the feature, the row and ``name``."""
        with np.errstate(over="ignore", invalid="ignore"):
            z = (np.asarray(x, dtype=np.float64) - self.mean) / self.std
            bad = ~np.isfinite(z.astype(np.float32))
        if bad.any():
            row, col = (int(i) for i in np.argwhere(bad)[0])
            raise ValueError(
                f"{name}: feature {columns[col]!r} in row {row} is {float(x[row, col]):.3g}, too "
                f"large to standardise with the training data's mean {self.mean[col]:.3g} and "
                f"std {self.std[col]:.3g}"
            )


def aligned_features(table: FeatureTable, columns: Sequence[str]) -> np.ndarray:
    """``table``'s features in the order of ``columns`` (every one present, no other),
    checked finite."""
    have, want = list(table.columns), list(columns)
    missing = [c for c in want if c not in have]
    extra = [c for c in have if c not in want]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(repr(c) for c in missing[:10])}")
        if extra:
            parts.append(f"unexpected {', '.join(repr(c) for c in extra[:10])}")
        raise ValueError(
            f"{table.name}: the feature columns differ from the training data's "
            f"({'; '.join(parts)})"
        )
    x = table.x if have == want else table.x[:, [have.index(c) for c in want]]
    check_finite(x, want, table.name)
    return x


def check_finite(x: np.ndarray, columns: Sequence[str], name: str) -> None:
    """Every feature is finite (a missing value reads as NaN)."""
    bad = ~np.isfinite(x)
    if bad.any():
        row, col = (int(i) for i in np.argwhere(bad)[0])
        value = x[row, col]
        what = "missing or NaN" if np.isnan(value) else repr(float(value))
        raise ValueError(
            f"{name}: feature {columns[col]!r} is not finite in row {row} ({what}); "
            f"{int(bad.any(axis=1).sum())} row(s) have non-finite features"
        )


# ----------------------------------------------------------------------------- the data
@dataclass(frozen=True, eq=False)
class PreparedData:
    """What training reads: standardised float32 features and int64 class indices of the
    training rows (DATA less the meta-validation rows), the meta-validation rows, VAL and
    (optionally) TEST, with the mapping and statistics that produced them."""

    columns: tuple[str, ...]
    labels: LabelMap
    standardizer: Standardizer
    train: tuple[torch.Tensor, torch.Tensor]
    meta: tuple[torch.Tensor, torch.Tensor]
    val: tuple[torch.Tensor, torch.Tensor]
    test: tuple[torch.Tensor, torch.Tensor] | None
    raw_val: np.ndarray
    raw_test: np.ndarray | None

    @property
    def n_features(self) -> int:
        return len(self.columns)

    @property
    def n_classes(self) -> int:
        return self.labels.n_classes

    def sizes(self) -> dict[str, int]:
        """Rows of each part."""
        out = {
            "train": len(self.train[1]),
            "meta_validation": len(self.meta[1]),
            "validation": len(self.val[1]),
        }
        if self.test is not None:
            out["test"] = len(self.test[1])
        return out


def prepare(
    data: FeatureTable, val: FeatureTable, test: FeatureTable | None = None, *, seed: int = 0
) -> PreparedData:
    """Check the tables against each other and build the training tensors (module doc)."""
    for table in (data, val, test):
        if table is not None and table.labels is None:
            raise ValueError(f"{table.name}: no labels")
    assert data.labels is not None and val.labels is not None  # checked above
    if data.n_rows < MIN_TRAIN_ROWS:
        raise ValueError(
            f"{data.name}: {data.n_rows} rows; training needs at least {MIN_TRAIN_ROWS} (one in "
            f"{META_FRACTION} is held out for meta-validation)"
        )
    columns = data.columns
    if len(set(columns)) != len(columns):
        raise ValueError(f"{data.name}: duplicate feature names")
    others = [t.labels for t in (val, test) if t is not None and t.labels is not None]
    labels = LabelMap.from_tables(data.labels, others)
    if labels.n_classes < 2:
        raise ValueError(
            f"{data.name}: every row has the label {labels.classes[0]!r}; a classifier needs "
            "at least 2 classes"
        )
    x = aligned_features(data, columns)
    y = labels.encode(data.labels, data.name)
    standardizer = Standardizer.fit(x, columns, data.name)
    kept, held_out = meta_split_indices(y, seed)
    z = standardizer.transform(x)
    y_t = torch.from_numpy(y)
    raw_val = aligned_features(val, columns)
    standardizer.check(raw_val, columns, val.name)
    val_pair = (
        standardizer.transform(raw_val),
        torch.from_numpy(labels.encode(val.labels, val.name)),
    )
    raw_test, test_pair = None, None
    if test is not None:
        assert test.labels is not None
        raw_test = aligned_features(test, columns)
        standardizer.check(raw_test, columns, test.name)
        test_pair = (
            standardizer.transform(raw_test),
            torch.from_numpy(labels.encode(test.labels, test.name)),
        )
    keep, meta = torch.from_numpy(kept), torch.from_numpy(held_out)
    return PreparedData(
        columns=tuple(columns),
        labels=labels,
        standardizer=standardizer,
        train=(z[keep], y_t[keep]),
        meta=(z[meta], y_t[meta]),
        val=val_pair,
        test=test_pair,
        raw_val=raw_val,
        raw_test=raw_test,
    )
