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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
import torch

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

    def __post_init__(self) -> None:
        if self.n_classes < 2:
            raise ValueError(f"n_classes must be >= 2, got {self.n_classes}")
        if set(self.raw_features) != set(SPLIT_NAMES):
            raise ValueError(f"raw_features needs exactly the keys {SPLIT_NAMES}")
        if not bool((self.std > 0).all()):
            raise ValueError("std must be positive")
        object.__setattr__(self, "raw_features", MappingProxyType(dict(self.raw_features)))
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))
        for name in SPLIT_NAMES:
            self._check_split(name)

    def _check_split(self, name: str) -> None:
        part = self.split(name)
        if self.raw_features[name].shape != part.x.shape:
            raise ValueError(f"raw features of {name!r} do not match the shape of its inputs")
        if part.x.shape[1:] != self.train.x.shape[1:]:
            raise ValueError(f"{name!r} has a different sample shape from 'train'")
        if self.feature_names and len(self.feature_names) != part.x.shape[1]:
            n_names, n_features = len(self.feature_names), part.x.shape[1]
            raise ValueError(f"{n_names} feature names for {n_features} features")
        if len(part) and (int(part.y.min()) < 0 or int(part.y.max()) >= self.n_classes):
            raise ValueError(f"labels of {name!r} outside [0, {self.n_classes})")

    @property
    def n_features(self) -> int:
        """Number of input features (size of the second axis of ``x``)."""
        return int(self.train.x.shape[1])

    def split(self, split_name: str) -> Split:
        """The split called ``"train"``, ``"val"`` or ``"test"``."""
        if split_name not in SPLIT_NAMES:
            raise ValueError(f"unknown split {split_name!r}; expected one of {SPLIT_NAMES}")
        part: Split = getattr(self, split_name)
        return part

    def raw(self, split_name: str) -> torch.Tensor:
        """Un-standardised features (float64) of one split, e.g. the original 2-D plane."""
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
        sizes = ", ".join(f"{s}={len(self.split(s))}" for s in SPLIT_NAMES)
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

    ``x_raw`` is ``[n, d]`` and finite; ``y`` holds integer labels in ``[0, n_classes)``;
    ``standardized`` marks the columns to standardise (default: all).
    """
    x_raw = np.asarray(x_raw, dtype=np.float64)
    y = np.asarray(y)
    if x_raw.ndim != 2 or y.shape != (x_raw.shape[0],):
        raise ValueError(f"need x_raw [n, d] and y [n], got {x_raw.shape} and {y.shape}")
    if not np.isfinite(x_raw).all():
        raise ValueError("x_raw contains NaN or infinite values")
    if not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"labels must be integers, got dtype {y.dtype}")
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
    return DataSplits(
        name=name,
        **splits,
        n_classes=n_classes,
        feature_names=tuple(feature_names),
        description=description,
        mean=mean,
        std=std,
        seed=seed,
        raw_features=raw_t,
        options=dict(options or {}),
    )
