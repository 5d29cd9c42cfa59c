"""MNIST-1D (Greydanus 2020; Greydanus & Kobak, ICML 2024): ten 1-D digit templates, distorted.

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
default). With ``sizes=(train, val, test)`` the generator instead draws exactly that many signals
(their sum must be a multiple of 10: the generator makes equal classes) and all of them are split
stratified by seed: the package's own train/test cut is a cut of one shuffled i.i.d. draw, so
pooling it loses nothing, and validation and test sets can be as large as a study needs (e.g.
2,000 and 10,000 rows, where 400 and 1,000 cannot separate methods). Generating is slow next to
training on the signals, so draws are cached in the process (:data:`CACHE_DRAWS` most recent).

The package already centres and scales all the signals with one global mean / std; we
standardise again with TRAINING statistics, one mean / std over all 40 positions (the signals
are translated at random, so positions are exchangeable; a per-position standardisation would
distort the shapes a 1-D convolution sees). Inputs have shape ``[n, 1, 40]``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import numpy as np
import torch

from selfcal._optional import require
from selfcal._validation import check_int, check_real
from selfcal.data.core import (
    DataSplits,
    channel_standardization_stats,
    check_sizes,
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
CACHE_DRAWS = 4


@contextmanager
def _preserved_global_rngs() -> Iterator[None]:
    """Restore NumPy's and Python's global random state on exit (the generator reseeds them)."""
    numpy_state, python_state = np.random.get_state(), random.getstate()
    try:
        yield
    finally:
        np.random.set_state(numpy_state)
        random.setstate(python_state)


def generate_mnist1d(
    seed: int, num_samples: int = DEFAULT_NUM_SAMPLES, **overrides: float
) -> dict[str, Any]:
    """The package's ``make_dataset`` with its default arguments, ``seed``, ``num_samples``
    and any other argument in ``overrides`` (e.g. ``iid_noise_scale``; shifted test sets).

    Returns its dict: ``x`` [n_train, 40], ``y``, ``x_test``, ``y_test`` (float64 / int64).
    """
    check_int("num_samples", num_samples, minimum=MIN_NUM_SAMPLES)
    generator = require("mnist1d.data", "MNIST-1D", "mnist1d")
    args = generator.get_dataset_args()
    unknown = set(overrides) - set(vars(args))
    if unknown:
        raise ValueError(f"unknown mnist1d generator arguments: {sorted(unknown)}")
    for name, value in overrides.items():
        setattr(args, name, value)
    args.seed, args.num_samples = seed, num_samples
    with _preserved_global_rngs():
        generated: dict[str, Any] = generator.make_dataset(args)
    return generated


@lru_cache(maxsize=CACHE_DRAWS)
def _draw(seed: int, num_samples: int) -> tuple[np.ndarray, ...]:
    """:func:`generate_mnist1d`'s arrays (``x``, ``y``, ``x_test``, ``y_test``), read-only and
    cached: studies load the same draw for many runs."""
    generated = generate_mnist1d(seed, num_samples)
    arrays = (
        np.asarray(generated["x"], np.float64),
        np.asarray(generated["y"], np.int64),
        np.asarray(generated["x_test"], np.float64),
        np.asarray(generated["y_test"], np.int64),
    )
    for array in arrays:
        array.flags.writeable = False
    return arrays


def _check_sizes(sizes: Sequence[int]) -> tuple[int, int, int]:
    values = check_sizes(sizes)
    if sum(values) % N_CLASSES:
        raise ValueError(
            f"sizes must add up to a multiple of {N_CLASSES} (equal classes), got {sum(values)}"
        )
    return values


@register_dataset("mnist1d")
def mnist1d(
    seed: int,
    *,
    valid_fraction: float = DEFAULT_VALID_FRACTION,
    num_samples: int = DEFAULT_NUM_SAMPLES,
    sizes: Sequence[int] | None = None,
) -> DataSplits:
    """MNIST-1D, ``[n, 1, 40]`` signals, 10 classes; 3600 / 400 / 1000 by default, or exactly
    ``sizes=(train, val, test)`` (module doc)."""
    valid_fraction = check_real(
        "valid_fraction", valid_fraction, 0.0, 1.0, low_open=True, high_open=True
    )
    if sizes is None:
        x_pool, y_pool, x_test, y_test = _draw(seed, num_samples)
        n_val = round(valid_fraction * len(y_pool))
        train_idx, val_idx, _ = stratified_split_indices(
            y_pool, (len(y_pool) - n_val, n_val, 0), child_rngs(seed, 1)[0]
        )
        options: dict[str, Any] = {"valid_fraction": valid_fraction, "num_samples": num_samples}
        how = (
            f"package test set as test, package train set split stratified by seed into "
            f"train/validation ({valid_fraction:.0%} validation)"
        )
    else:
        if (valid_fraction, num_samples) != (DEFAULT_VALID_FRACTION, DEFAULT_NUM_SAMPLES):
            raise ValueError("give sizes, or num_samples / valid_fraction, not both")
        sizes = _check_sizes(sizes)
        num_samples = sum(sizes)
        x_all, y_all, x_rest, y_rest = _draw(seed, num_samples)
        x_pool, y_pool = np.concatenate([x_all, x_rest]), np.concatenate([y_all, y_rest])
        train_idx, val_idx, test_idx = stratified_split_indices(
            y_pool, sizes, child_rngs(seed, 1)[0]
        )
        x_test, y_test = x_pool[test_idx], y_pool[test_idx]
        options = {"sizes": sizes}
        how = "all signals pooled and split stratified by seed into train/validation/test"
    raw = {"train": x_pool[train_idx], "val": x_pool[val_idx], "test": np.array(x_test)}
    labels = {"train": y_pool[train_idx], "val": y_pool[val_idx], "test": np.array(y_test)}
    mean, std = channel_standardization_stats(raw["train"][:, None, :])
    counts = "/".join(str(len(labels[s])) for s in ("train", "val", "test"))
    description = (
        f"MNIST-1D: the mnist1d package's generator (make_dataset) with its default arguments, "
        f"seed {seed}, {num_samples} signals of length {SEQUENCE_LENGTH}, 10 classes; {how}: "
        f"{counts}. Inputs [n, 1, {SEQUENCE_LENGTH}] standardised with one training mean/std "
        "over all positions. Nothing is downloaded."
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
        options=options,
    )
