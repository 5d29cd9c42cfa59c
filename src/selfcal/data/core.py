"""The data model every loader returns, and the two steps every loader shares: a seeded stratified
train/validation/test split and standardisation with training-set statistics.

Choices (the same for every dataset built with :func:`build_splits`):

* **Split.** Stratified and random by seed: within each class the samples are put in a random
  order, each gets the key ``(rank_within_class + 0.5) / class_size``, and all samples sorted by
  that key (random tie-break) are cut into consecutive train / validation / test blocks of the
  requested sizes. Split sizes are exact; each class's share of a split is within one sample of
  proportional. Each block is then shuffled so the order carries no class pattern.
* **Standardisation.** ``x = (x_raw - mean) / std`` per feature, where ``mean`` and the
  population standard deviation (ddof = 0, as scikit-learn's ``StandardScaler``) come from the
  TRAINING split only, so no validation or test information leaks into the inputs. A constant
  training column gets ``std = 1`` (it is only centred). Columns a loader marks as not
  standardised (one-hot or binary codes) get ``mean = 0, std = 1`` and pass through unchanged.
* **Precision.** Raw features are kept in float64; ``mean``/``std`` are float64; model inputs
  are computed in float64 and stored as float32, so ``standardize(raw("train"))`` reproduces
  ``train.x`` bit for bit.
* **Images and sequences** (``x`` of shape ``[n, C, ...]``, built with
  :func:`splits_from_parts`) are standardised per CHANNEL (one mean/std per channel over all
  positions, shape ``[C, 1, ...]``), the ``transforms.Normalize`` convention; their raw features
  may be the stored ``uint8`` pixels (compact; ``standardize`` converts to float64 first).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import torch

from selfcal._inputs import as_labels
from selfcal._validation import check_int
from selfcal.exceptions import DatasetNotFoundError

SPLIT_NAMES = ("train", "val", "test")
"""The three split names, in the order loaders build them."""

CONSTANT_STD_RTOL = 1e-12
"""A training column whose std is below ``CONSTANT_STD_RTOL * max(1, |mean|)`` is constant."""


@dataclass(frozen=True, repr=False, eq=False)
class Split:
    """One split: model inputs ``x`` (float32, ``[n, ...]``) and labels ``y`` (int64, ``[n]``)."""

    x: torch.Tensor
    y: torch.Tensor

    def __post_init__(self) -> None:
        if not isinstance(self.x, torch.Tensor) or not isinstance(self.y, torch.Tensor):
            raise ValueError("Split.x and Split.y must be torch tensors")
        if self.x.dtype != torch.float32:
            raise ValueError(f"Split.x must be float32, got {self.x.dtype}")
        if self.y.dtype != torch.int64:
            raise ValueError(f"Split.y must be int64, got {self.y.dtype}")
        if self.x.ndim < 2 or self.y.ndim != 1 or self.x.shape[0] != self.y.shape[0]:
            raise ValueError(
                f"Split needs x of shape [n, ...] and y of shape [n], got "
                f"{tuple(self.x.shape)} and {tuple(self.y.shape)}"
            )
        if not bool(torch.isfinite(self.x).all()):
            raise ValueError("Split.x contains NaN or infinite values")

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def __repr__(self) -> str:
        return f"Split(n={len(self)}, x={tuple(self.x.shape)})"


@dataclass(frozen=True, repr=False, eq=False)
class DataSplits:
    """A dataset split into train / validation / test, with its standardisation.

    ``train.x`` etc. are model inputs, already standardised with the training statistics
    ``mean``/``std`` (float64, broadcastable against one sample). :meth:`raw` gives the features
    before standardisation (for plots over the original plane) and :meth:`standardize` maps any
    raw features -- e.g. a plotting grid -- to model inputs. ``description`` states the generator
    and every choice made; ``options`` records the loader's keyword options (``seed`` excluded).
    ``feature_names`` may be empty for inputs that are not feature vectors (e.g. images).
    ``extra`` holds further named held-out splits a protocol needs beyond the three (e.g. the
    ``"meta_val"`` split of the 8:1:1 meta-learning protocol); :meth:`split` and :meth:`raw`
    accept their names, and ``raw_features`` must hold them too.
    """

    name: str
    train: Split
    val: Split
    test: Split
    n_classes: int
    feature_names: tuple[str, ...]
    description: str
    mean: torch.Tensor
    std: torch.Tensor
    seed: int
    raw_features: Mapping[str, torch.Tensor]
    options: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Split] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_int("n_classes", self.n_classes, minimum=2)
        self._check_extra()
        if set(self.raw_features) != set(self.split_names):
            raise ValueError(f"raw_features needs exactly the keys {self.split_names}")
        if not bool((self.std > 0).all()):
            raise ValueError("std must be positive")
        object.__setattr__(self, "raw_features", MappingProxyType(dict(self.raw_features)))
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))
        object.__setattr__(self, "extra", MappingProxyType(dict(self.extra)))
        for name in self.split_names:
            self._check_split(name)

    def _check_extra(self) -> None:
        named_twice = set(self.extra) & set(SPLIT_NAMES)
        if named_twice or not all(isinstance(p, Split) for p in self.extra.values()):
            raise ValueError(f"extra must map new split names (not {SPLIT_NAMES}) to Split objects")

    def _check_split(self, name: str) -> None:
        part = self.split(name)
        if self.raw_features[name].shape != part.x.shape:
            raise ValueError(f"raw features of {name!r} do not match the shape of its inputs")
        if part.x.shape[1:] != self.train.x.shape[1:]:
            raise ValueError(f"{name!r} has a different sample shape from 'train'")
        if self.feature_names and len(self.feature_names) != part.x.shape[1]:
            n_names, n_features = len(self.feature_names), part.x.shape[1]
            raise ValueError(f"{n_names} feature names for {n_features} features")
        as_labels(part.y, len(part), self.n_classes, name=f"labels of {name!r}")

    @property
    def split_names(self) -> tuple[str, ...]:
        """``("train", "val", "test")`` followed by the names of the ``extra`` splits."""
        return SPLIT_NAMES + tuple(self.extra)

    @property
    def n_features(self) -> int:
        """Number of input features (size of the second axis of ``x``)."""
        return int(self.train.x.shape[1])

    def split(self, split_name: str) -> Split:
        """The split called ``"train"``, ``"val"``, ``"test"`` or one of the ``extra`` names."""
        if split_name not in self.split_names:
            raise ValueError(f"unknown split {split_name!r}; expected one of {self.split_names}")
        if split_name in self.extra:
            return self.extra[split_name]
        part: Split = getattr(self, split_name)
        return part

    def raw(self, split_name: str) -> torch.Tensor:
        """Un-standardised features of one split (float64; images may keep uint8 pixels)."""
        self.split(split_name)
        return self.raw_features[split_name]

    def standardize(self, x_raw: Any) -> torch.Tensor:
        """Raw features (array or tensor, ``[n, ...]``) -> float32 inputs ``(x - mean) / std``."""
        x = x_raw if isinstance(x_raw, torch.Tensor) else torch.as_tensor(np.asarray(x_raw))
        if x.ndim != self.train.x.ndim or x.shape[1:] != self.train.x.shape[1:]:
            raise ValueError(
                f"raw features must have shape [n, {', '.join(map(str, self.train.x.shape[1:]))}]"
                f", got {tuple(x.shape)}"
            )
        x64 = x.to(torch.float64)
        if not bool(torch.isfinite(x64).all()):
            raise ValueError("raw features contain NaN or infinite values")
        return standardize_features(x64, self.mean.to(x.device), self.std.to(x.device))

    def __repr__(self) -> str:
        sizes = ", ".join(f"{s}={len(self.split(s))}" for s in self.split_names)
        return (
            f"DataSplits(name={self.name!r}, seed={self.seed}, {sizes}, "
            f"n_features={self.n_features}, n_classes={self.n_classes})"
        )


def child_rngs(seed: int, n: int) -> list[np.random.Generator]:
    """``n`` independent generators derived from ``seed`` (``SeedSequence(seed).spawn(n)``).

    Loaders draw the samples and the split from separate streams, so changing how many samples
    are generated never silently reuses the split's random numbers.
    """
    return [np.random.default_rng(child) for child in np.random.SeedSequence(seed).spawn(n)]


def standardize_features(
    x_raw: torch.Tensor, mean: torch.Tensor, std: torch.Tensor
) -> torch.Tensor:
    """``(x_raw - mean) / std`` in float64, returned as float32 (the one code path for inputs)."""
    return ((x_raw.to(torch.float64) - mean) / std).to(torch.float32)


def split_sizes_from_fractions(n: int, fractions: Sequence[float]) -> tuple[int, int, int]:
    """``n`` samples -> (train, val, test) counts: rounded train and val, test takes the rest."""
    if len(fractions) != 3 or any(f < 0 for f in fractions) or abs(sum(fractions) - 1) > 1e-9:
        raise ValueError(f"fractions must be 3 non-negative numbers summing to 1, got {fractions}")
    n_train, n_val = round(fractions[0] * n), round(fractions[1] * n)
    return n_train, n_val, n - n_train - n_val


def check_sizes(sizes: Sequence[int]) -> tuple[int, int, int]:
    """Validate (train, val, test) sizes: three positive integers."""
    if len(sizes) != 3 or any(not isinstance(s, int | np.integer) or s < 1 for s in sizes):
        raise ValueError(f"sizes must be three positive integers (train, val, test), got {sizes}")
    return int(sizes[0]), int(sizes[1]), int(sizes[2])


def stratified_split_indices(
    labels: np.ndarray, sizes: Sequence[int], rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random stratified (train, val, test) index arrays with exactly ``sizes`` elements.

    Each class is spread evenly over one random ordering of all samples (key = ``(rank within
    class + 0.5) / class size``), which is then cut into consecutive blocks; see the module
    docstring.
    """
    labels = np.asarray(labels)
    if sum(sizes) != labels.shape[0]:
        raise ValueError(f"split sizes {tuple(sizes)} do not add up to {labels.shape[0]} samples")
    keys = np.empty(labels.shape[0])
    for cls in np.unique(labels):
        members = np.flatnonzero(labels == cls)
        keys[rng.permutation(members)] = (np.arange(members.size) + 0.5) / members.size
    tie_break = rng.permutation(labels.shape[0])
    order = tie_break[np.argsort(keys[tie_break], kind="stable")]
    bounds = np.cumsum(sizes)[:-1]
    train, val, test = np.split(order, bounds)
    return rng.permutation(train), rng.permutation(val), rng.permutation(test)


META_FRACTION = 9
"""The meta-validation set is ``round(n / 9)`` of the training rows (the meta-learning papers'
8:1:1 between train and meta-validation)."""


def meta_split_indices(labels: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted ``(kept, held_out)`` indices of the training rows: a stratified, seeded
    ``round(n / 9)`` held out as the meta-validation set that CE-DECE, FLγ-SECE and BO4SC
    learn from (:func:`stratified_split_indices` on ``child_rngs(seed, 2)[1]``); the split of
    the benchmark, the image studies and ``selfcal train``."""
    n = len(labels)
    n_meta = round(n / META_FRACTION)
    kept, held_out, _ = stratified_split_indices(
        np.asarray(labels), (n - n_meta, n_meta, 0), child_rngs(seed, 2)[1]
    )
    return np.sort(kept), np.sort(held_out)


def standardization_stats(
    x_train: np.ndarray, standardized: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per-column (mean, std) of the training features, ddof = 0, constant columns -> std 1.

    ``standardized`` is a boolean mask of the columns to standardise; the others get mean 0 and
    std 1 (passed through unchanged).
    """
    mean = x_train.mean(axis=0)
    std = x_train.std(axis=0)
    constant = std < CONSTANT_STD_RTOL * np.maximum(1.0, np.abs(mean))
    std = np.where(constant, 1.0, std)
    if standardized is not None:
        mean = np.where(standardized, mean, 0.0)
        std = np.where(standardized, std, 1.0)
    return mean, std


def build_splits(
    *,
    name: str,
    x_raw: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    sizes: Sequence[int],
    rng: np.random.Generator,
    feature_names: Sequence[str],
    description: str,
    seed: int,
    options: Mapping[str, Any] | None = None,
    standardized: Sequence[bool] | None = None,
) -> DataSplits:
    """Split ``(x_raw, y)`` stratified by ``rng``, standardise with train stats, wrap it up.

    ``x_raw`` is ``[n, d]`` and finite; ``y`` holds labels in ``[0, n_classes)`` by the one label
    rule (:func:`selfcal._inputs.as_labels`: integers, bools or whole-valued floats);
    ``standardized`` marks the columns to standardise (default: all).
    """
    x_raw = np.asarray(x_raw, dtype=np.float64)
    y = np.asarray(y)
    if x_raw.ndim != 2:  # y's shape: the label rule below
        raise ValueError(f"need x_raw [n, d] and y [n], got {x_raw.shape} and {y.shape}")
    if not np.isfinite(x_raw).all():
        raise ValueError("x_raw contains NaN or infinite values")
    y = as_labels(y, x_raw.shape[0], n_classes).values.numpy()
    mask = None if standardized is None else np.asarray(standardized, dtype=bool)
    if mask is not None and mask.shape != (x_raw.shape[1],):
        raise ValueError(f"standardized needs one flag per column ({x_raw.shape[1]})")
    parts = stratified_split_indices(y, check_sizes(sizes), rng)
    raw = {s: x_raw[idx] for s, idx in zip(SPLIT_NAMES, parts, strict=True)}
    mean_np, std_np = standardization_stats(raw["train"], mask)
    mean, std = torch.from_numpy(mean_np), torch.from_numpy(std_np)
    raw_t = {s: torch.from_numpy(r) for s, r in raw.items()}
    splits = {
        s: Split(
            x=standardize_features(raw_t[s], mean, std),
            y=torch.from_numpy(y[idx].astype(np.int64)),
        )
        for s, idx in zip(SPLIT_NAMES, parts, strict=True)
    }
    return _assemble_splits(
        splits, raw_t, mean, std, name, n_classes, feature_names, description, seed, options
    )


def _assemble_splits(
    parts: Mapping[str, Split],
    raw: Mapping[str, torch.Tensor],
    mean: torch.Tensor,
    std: torch.Tensor,
    name: str,
    n_classes: int,
    feature_names: Sequence[str],
    description: str,
    seed: int,
    options: Mapping[str, Any] | None,
) -> DataSplits:
    """The :class:`DataSplits` of built splits ``parts`` (``"train"``, ``"val"``, ``"test"``
    and any extra names, which go to ``DataSplits.extra``) with their raw features, the
    standardisation ``mean``/``std`` and the loader's description -- the one place both
    :func:`build_splits` and :func:`splits_from_parts` construct the result."""
    return DataSplits(
        name=name,
        train=parts["train"],
        val=parts["val"],
        test=parts["test"],
        n_classes=n_classes,
        feature_names=tuple(feature_names),
        description=description,
        mean=mean,
        std=std,
        seed=seed,
        raw_features=dict(raw),
        options=dict(options or {}),
        extra={s: p for s, p in parts.items() if s not in SPLIT_NAMES},
    )


STANDARDIZE_CHUNK = 4096
"""Samples standardised at a time by :func:`splits_from_parts` (bounds the float64 temporary)."""


def channel_standardization_stats(x_train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (mean, std) of ``[n, C, ...]`` training inputs, ddof = 0, float64.

    Each channel's statistics pool all samples and positions (the ``transforms.Normalize``
    convention); they are shaped ``[C, 1, ...]`` to broadcast against one sample. A constant
    channel gets ``std = 1`` (it is only centred).
    """
    x = np.asarray(x_train, dtype=np.float64)
    if x.ndim < 3 or x.shape[0] == 0:
        raise ValueError(f"need training inputs of shape [n >= 1, C, ...], got {x.shape}")
    axes = (0, *range(2, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)[0]
    std = x.std(axis=axes, keepdims=True)[0]
    constant = std < CONSTANT_STD_RTOL * np.maximum(1.0, np.abs(mean))
    return mean, np.where(constant, 1.0, std)


def _standardize_in_chunks(
    x_raw: torch.Tensor, mean: torch.Tensor, std: torch.Tensor
) -> torch.Tensor:
    """:func:`standardize_features` over blocks of samples: the same values, less memory."""
    if x_raw.shape[0] <= STANDARDIZE_CHUNK:
        return standardize_features(x_raw, mean, std)
    return torch.cat([standardize_features(c, mean, std) for c in x_raw.split(STANDARDIZE_CHUNK)])


def splits_from_parts(
    *,
    name: str,
    raw: Mapping[str, torch.Tensor],
    labels: Mapping[str, np.ndarray],
    n_classes: int,
    mean: np.ndarray,
    std: np.ndarray,
    description: str,
    seed: int,
    options: Mapping[str, Any] | None = None,
    feature_names: Sequence[str] = (),
) -> DataSplits:
    """Wrap already split raw inputs (``[n, ...]`` tensors, any numeric dtype) into DataSplits.

    For loaders whose split is fixed by a protocol (official test sets, reference index
    shuffles) rather than drawn by :func:`stratified_split_indices`. ``raw`` and ``labels`` hold
    ``"train"``, ``"val"``, ``"test"`` and optionally extra split names (stored in
    ``DataSplits.extra``); inputs are ``(raw - mean) / std`` computed in float64, stored float32.
    Splits given the same raw tensor object and the same labels object (e.g. a protocol that
    uses one set as validation and test) share one :class:`Split`, so it is stored once.
    """
    if set(raw) != set(labels) or not set(SPLIT_NAMES) <= set(raw):
        raise ValueError(f"raw and labels need the same keys, including {SPLIT_NAMES}")
    mean_t = torch.from_numpy(np.asarray(mean, np.float64))
    std_t = torch.from_numpy(np.asarray(std, np.float64))
    built: dict[tuple[int, int], Split] = {}
    parts: dict[str, Split] = {}
    for s in raw:
        key = (id(raw[s]), id(labels[s]))
        if key not in built:
            built[key] = Split(
                x=_standardize_in_chunks(raw[s], mean_t, std_t),
                y=as_labels(
                    labels[s], len(raw[s]), n_classes, name=f"labels of {s!r}"
                ).values.clone(),
            )
        parts[s] = built[key]
    return _assemble_splits(
        parts, raw, mean_t, std_t, name, n_classes, feature_names, description, seed, options
    )


DATA_ENV_VAR = "SELFCAL_DATA"
"""Environment variable naming the directory that holds datasets read from disk."""


def locate_dataset_dir(
    folder: str, root: str | os.PathLike[str] | None, required: Sequence[str], source: str
) -> Path:
    """The directory holding a dataset's files; never downloads anything.

    Lookup order: the ``root`` option if given, else ``$SELFCAL_DATA``. Inside it, ``folder``
    (e.g. ``cifar-10-batches-py``, as torchvision's ``root``), or ``root`` itself if it directly
    holds every ``required`` entry. Raises :class:`DatasetNotFoundError` naming the layout and
    ``source`` (where to get the archive) when neither exists.
    """
    base = root if root is not None else os.environ.get(DATA_ENV_VAR)
    layout = f"{folder}/ with {', '.join(required)}"
    if base is None or str(base) == "":
        raise DatasetNotFoundError(
            f"no data directory: pass root=... or set ${DATA_ENV_VAR} to a directory holding "
            f"{layout}; get it from {source}"
        )
    for candidate in (Path(base) / folder, Path(base)):
        if all((candidate / entry).exists() for entry in required):
            return candidate
    raise DatasetNotFoundError(
        f"dataset not found under {str(base)!r}: expected {layout} (in that directory or "
        f"directly in it); get it from {source} and unpack it there (nothing is downloaded)"
    )
