"""MNIST-1D (Greydanus & Steinbach, 2020/2024): ten 1-D digit templates, procedurally distorted.

Generated with the ``mnist1d`` package's own generator (``mnist1d.data.make_dataset``, imported
only when the dataset is loaded). The package can also download a pickled copy; that path
(``get_dataset``) is never called, so loading needs no network and writes no file.

Generator arguments: the package defaults (``mnist1d.data.get_dataset_args``) -- 5000 samples
(500 per class), 80 % / 20 % package train / test (4000 / 1000), template length 12, padding
36-60, scale coefficient 0.4, max translation 48, correlated noise 0.25, iid noise 0.02, shear
0.75, no sequence shuffle, final length 40 -- except ``seed``, which is OUR seed (the package
default is 42, so ``seed=42`` gives the package's default draw). The generator seeds NumPy's and
Python's global random state; we restore both afterwards, so loading leaves them untouched.

Splits: the package's test set is our test set; its train set is split stratified and random by
seed into train / validation with ``valid_fraction`` = 10 % validation (3600 / 400 / 1000 by
default). The package already centres and scales all 5000 signals with one global mean / std;
we standardise again with TRAINING statistics, one mean / std over all 40 positions (the signals
are translated at random, so positions are exchangeable; a per-position standardisation would
distort the shapes a 1-D convolution sees). Inputs have shape ``[n, 1, 40]``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from selfcal.data.core import (
    DataSplits,
    channel_standardization_stats,
    child_rngs,
    splits_from_parts,
    stratified_split_indices,
)
from selfcal.data.registry import register_dataset

N_CLASSES = 10
SEQUENCE_LENGTH = 40
DEFAULT_NUM_SAMPLES = 5000
"""The package default: 500 signals per class, 4000 package-train + 1000 package-test."""
DEFAULT_VALID_FRACTION = 0.1
MIN_NUM_SAMPLES = 100


@contextmanager
def _preserved_global_rngs() -> Iterator[None]:
    """Restore NumPy's and Python's global random state on exit (the generator reseeds them)."""
    numpy_state, python_state = np.random.get_state(), random.getstate()
    try:
        yield
    finally:
        np.random.set_state(numpy_state)
        random.setstate(python_state)


def generate_mnist1d(seed: int, num_samples: int = DEFAULT_NUM_SAMPLES) -> dict[str, Any]:
    """The package's ``make_dataset`` with its default arguments, ``seed`` and ``num_samples``.

    Returns its dict: ``x`` [n_train, 40], ``y``, ``x_test``, ``y_test`` (float64 / int64).
    """
    if isinstance(num_samples, bool) or not isinstance(num_samples, int):
        raise ValueError(f"num_samples must be an int, got {num_samples!r}")
    if num_samples < MIN_NUM_SAMPLES:
        raise ValueError(f"num_samples must be >= {MIN_NUM_SAMPLES}, got {num_samples}")
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.seed, args.num_samples = seed, num_samples
    with _preserved_global_rngs():
        generated: dict[str, Any] = make_dataset(args)
    return generated


def _check_fraction(valid_fraction: float) -> float:
    if not 0.0 < valid_fraction < 1.0:
        raise ValueError(f"valid_fraction must be in (0, 1), got {valid_fraction}")
    return float(valid_fraction)


@register_dataset("mnist1d")
def mnist1d(
    seed: int,
    *,
    valid_fraction: float = DEFAULT_VALID_FRACTION,
    num_samples: int = DEFAULT_NUM_SAMPLES,
) -> DataSplits:
    """MNIST-1D, ``[n, 1, 40]`` signals, 10 classes; 3600 / 400 / 1000 by default."""
    valid_fraction = _check_fraction(valid_fraction)
    generated = generate_mnist1d(seed, num_samples)
    x_pool, y_pool = np.asarray(generated["x"], np.float64), np.asarray(generated["y"], np.int64)
    n_val = round(valid_fraction * len(y_pool))
    train_idx, val_idx, _ = stratified_split_indices(
        y_pool, (len(y_pool) - n_val, n_val, 0), child_rngs(seed, 1)[0]
    )
    raw = {
        "train": x_pool[train_idx],
        "val": x_pool[val_idx],
        "test": np.asarray(generated["x_test"], np.float64),
    }
    labels = {"train": y_pool[train_idx], "val": y_pool[val_idx], "test": generated["y_test"]}
    mean, std = channel_standardization_stats(raw["train"][:, None, :])
    sizes = "/".join(str(len(labels[s])) for s in ("train", "val", "test"))
    description = (
        f"MNIST-1D: the mnist1d package's generator (make_dataset) with its default arguments, "
        f"seed {seed}, {num_samples} signals of length {SEQUENCE_LENGTH}, 10 classes; package "
        f"test set as test, package train set split stratified by seed into train/validation "
        f"({valid_fraction:.0%} validation): {sizes}. Inputs [n, 1, {SEQUENCE_LENGTH}] "
        "standardised with one training mean/std over all positions. Nothing is downloaded."
    )
    return splits_from_parts(
        name="mnist1d",
        raw={s: torch.from_numpy(r[:, None, :]) for s, r in raw.items()},
        labels=labels,
        n_classes=N_CLASSES,
        mean=mean,
        std=std,
        description=description,
        seed=seed,
        options={"valid_fraction": valid_fraction, "num_samples": num_samples},
    )
