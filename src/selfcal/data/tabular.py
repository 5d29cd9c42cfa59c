"""scikit-learn's bundled classification sets behind the same interface: ``breast-cancer``
(569 x 30, 2 classes), ``wine`` (178 x 13, 3 classes), ``digits`` (1797 x 64, 10 classes).

Split: stratified and random by seed into 35 % / 15 % / 50 % train / validation / test, the
proportions of the BO4SC 700/300/1000 protocol (train and validation counts rounded, test takes
the rest). All features standardised with train statistics (constant digit pixels only centred).
scikit-learn is imported only when one of these sets is loaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from selfcal._optional import require
from selfcal.data.core import DataSplits, build_splits, split_sizes_from_fractions
from selfcal.data.registry import register_dataset

DEFAULT_FRACTIONS = (0.35, 0.15, 0.5)


def _bunch(loader_name: str) -> Any:
    datasets = require("sklearn.datasets", "a bundled tabular dataset", "scikit-learn")
    return getattr(datasets, loader_name)()


def _sklearn_splits(
    name: str, loader_name: str, seed: int, fractions: Sequence[float]
) -> DataSplits:
    bunch = _bunch(loader_name)
    x, y = np.asarray(bunch.data, dtype=np.float64), np.asarray(bunch.target, dtype=np.int64)
    sizes = split_sizes_from_fractions(len(y), fractions)
    n_classes = int(y.max()) + 1
    description = (
        f"{name}: scikit-learn's bundled sklearn.datasets.{loader_name}() ({len(y)} samples, "
        f"{x.shape[1]} features, {n_classes} classes). Stratified random split "
        f"{sizes[0]}/{sizes[1]}/{sizes[2]} (fractions {tuple(fractions)}) by seed; all features "
        "standardised with train statistics (constant columns only centred)."
    )
    feature_names = getattr(bunch, "feature_names", None)
    names = [str(f) for f in feature_names] if feature_names is not None else []
    return build_splits(
        name=name,
        x_raw=x,
        y=y,
        n_classes=n_classes,
        sizes=sizes,
        rng=np.random.default_rng(seed),
        feature_names=names or [f"x{i}" for i in range(x.shape[1])],
        description=description,
        seed=seed,
        options={"fractions": tuple(fractions)},
    )


@register_dataset("breast-cancer")
def breast_cancer(seed: int, *, fractions: Sequence[float] = DEFAULT_FRACTIONS) -> DataSplits:
    """Wisconsin diagnostic breast cancer (sklearn ``load_breast_cancer``), 2 classes."""
    return _sklearn_splits("breast-cancer", "load_breast_cancer", seed, fractions)


@register_dataset("wine")
def wine(seed: int, *, fractions: Sequence[float] = DEFAULT_FRACTIONS) -> DataSplits:
    """UCI wine recognition (sklearn ``load_wine``), 3 classes."""
    return _sklearn_splits("wine", "load_wine", seed, fractions)


@register_dataset("digits")
def digits(seed: int, *, fractions: Sequence[float] = DEFAULT_FRACTIONS) -> DataSplits:
    """8x8 handwritten digits (sklearn ``load_digits``), 10 classes."""
    return _sklearn_splits("digits", "load_digits", seed, fractions)
