"""Shared helpers for the dataset tests (importable thanks to conftest.py)."""

from __future__ import annotations

import functools

import torch

from selfcal.data import DataSplits, load_dataset

SYNTHETIC = ("blobs-1.3", "blobs-1.7", "spiral-2.5", "spiral-3.5", "bac")
SKLEARN = {"breast-cancer": (569, 30, 2), "wine": (178, 13, 3), "digits": (1797, 64, 10)}
ALL_DATASETS = SYNTHETIC + tuple(SKLEARN)


@functools.cache
def cached(name: str, seed: int = 0) -> DataSplits:
    """``load_dataset(name, seed)`` once per test session (tests must not mutate the result)."""
    return load_dataset(name, seed)


def all_raw(data: DataSplits) -> torch.Tensor:
    """Raw features of train, val and test stacked."""
    return torch.cat([data.raw(s) for s in ("train", "val", "test")])


def all_labels(data: DataSplits) -> torch.Tensor:
    """Labels of train, val and test stacked (same order as :func:`all_raw`)."""
    return torch.cat([data.split(s).y for s in ("train", "val", "test")])
