"""Data of the image studies: the datasets with the protocol's options, the CIFAR sets present
locally, and the meta-validation split every method of a study trains beside."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

import torch

from selfcal.studies._images.recipe import CIFAR, CIFAR_FOLDERS, ImageProtocol


class Sized(Protocol):
    """A protocol with MNIST-1D's sizes (the image studies' and the benchmark's)."""

    @property
    def mnist1d_sizes(self) -> tuple[int, int, int]: ...


def available_cifar() -> tuple[str, ...]:
    """The CIFAR sets whose files are present locally (``$SELFCAL_DATA``); never downloads."""
    from selfcal.data.core import DATA_ENV_VAR

    root = os.environ.get(DATA_ENV_VAR)
    if not root:
        return ()
    return tuple(name for name in CIFAR if (Path(root) / CIFAR_FOLDERS[name]).is_dir())


def sweep_datasets(protocol: ImageProtocol) -> tuple[str, ...]:
    """The protocol's datasets, plus (``full`` only) the CIFAR sets present locally."""
    return tuple(protocol.datasets) + (available_cifar() if protocol.name == "full" else ())


def load(protocol: Sized, dataset: str, seed: int, **options: Any) -> Any:
    """The dataset with the protocol's options (MNIST-1D's sizes)."""
    from selfcal.data import load_dataset

    if dataset == "mnist1d":
        options = {"sizes": protocol.mnist1d_sizes, **options}
    return load_dataset(dataset, seed, **options)


def meta_split(data: Any, seed: int) -> tuple[tuple, tuple]:
    """``(train, meta_val)``: a stratified, seeded 1/9 of the training split held out
    (:func:`selfcal.data.core.meta_split_indices`)."""
    from selfcal.data.core import meta_split_indices

    kept, held_out = meta_split_indices(data.train.y.numpy(), seed)
    keep, meta = torch.from_numpy(kept), torch.from_numpy(held_out)
    x = data.train.x
    return (x[keep], data.train.y[keep]), (x[meta], data.train.y[meta])


def load_splits(protocol: Sized, dataset: str, seed: int) -> tuple[Any, tuple, tuple]:
    """``(data, train, meta_val)``: the loader's splits and a meta-validation set carved from
    the training split (a stratified, seeded 1/9 of it: the 8:1:1 of the meta-learning papers
    between train and meta-validation); every method of a study trains on the same reduced
    training set. CIFAR: the reference 40k / 5k / 5k split of the 50k training images
    (``split="meta"``), test = the official 10k."""
    if dataset in CIFAR:
        data = load(protocol, dataset, seed, split="meta")
        meta = data.split("meta_val")
        return data, (data.train.x, data.train.y), (meta.x, meta.y)
    data = load(protocol, dataset, seed)
    return data, *meta_split(data, seed)
