"""CIFAR-10 / CIFAR-100 read from a LOCAL copy of the official "python version" (never downloaded).

Where the files are looked for (:func:`selfcal.data.core.locate_dataset_dir`): the ``root``
option if given, else the ``$SELFCAL_DATA`` environment variable; inside it the unpacked
archive folder ``cifar-10-batches-py/`` (``data_batch_1`` .. ``data_batch_5``, ``test_batch``)
or ``cifar-100-python/`` (``train``, ``test``), as torchvision's ``root``; ``root`` may also be
that folder itself. The archives are ``cifar-10-python.tar.gz`` / ``cifar-100-python.tar.gz``
from https://www.cs.toronto.edu/~kriz/cifar.html. A missing folder raises
:class:`~selfcal.exceptions.DatasetNotFoundError` (a ``FileNotFoundError`` and a ``ValueError``)
naming that layout.

The batch files are Python pickles of ``{data: uint8 [n, 3072] (R, G, B planes of 32x32, row
major), labels | fine_labels: list[int], ...}``. They are read with an unpickler that only
resolves the NumPy array constructors such files need, so a tampered file cannot run code.

Splits (methods §0.3):

* ``split="standard"`` ([FLC]/[GRA]): the reference code's index logic -- ``indices =
  list(range(50000))``, ``np.random.seed(1); np.random.shuffle(indices)``, ``n_val =
  floor(0.1 * 50000)``; validation = the first ``n_val`` shuffled indices, train = the rest
  (45k / 5k), test = the official 10k test batch. Replicated with ``RandomState(1).shuffle``,
  which draws the same permutation without touching NumPy's global state.
* ``split="meta"`` ([MC]/[MetaReg], "8:1:1"): the same shuffle; validation = the first 5k,
  meta-validation (``data.split("meta_val")``, in ``DataSplits.extra``) = the next 5k, i.e.
  ``indices[5000:floor((1 + 1) * 0.1 * 50000)]``, train = the remaining 40k; test = official.

The split seed is 1 for every training seed, as in the papers (``split_seed=None`` uses the
loader's ``seed`` instead); the loader's ``seed`` is only recorded otherwise.

Normalisation (methods §7.2): ``(pixel / 255 - mean) / std`` with the reference code's mean
(0.4914, 0.4822, 0.4465) and std (0.2023, 0.1994, 0.2010) per channel -- fixed constants, not
training statistics (the std triple is the one the references use, not the true pixel std
~(0.247, 0.243, 0.261)). Raw features are the stored uint8 pixels, so ``DataSplits.mean`` /
``std`` are those constants x 255 (``standardize(raw)`` gives the same inputs).

Memory: float32 inputs of all 60k images take 737 MB, the uint8 raw pixels 184 MB more.
Augmentation (random crop 32 / padding 4 + horizontal flip) is applied per batch by
:func:`selfcal.data.augment.random_crop_flip`, not stored.
"""

from __future__ import annotations

import functools
import io
import math
import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from selfcal._validation import check_choice, check_optional_int, check_real
from selfcal.data.core import DataSplits, locate_dataset_dir, splits_from_parts
from selfcal.data.registry import register_dataset

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2023, 0.1994, 0.2010)
PIXEL_MAX = 255.0
IMAGE_SHAPE = (3, 32, 32)
SOURCE = "https://www.cs.toronto.edu/~kriz/cifar.html ('CIFAR-... python version' archive)"
REFERENCE_SPLIT_SEED = 1
DEFAULT_VALID_FRACTION = 0.1
SPLITS = ("standard", "meta")

_ALLOWED_GLOBALS = frozenset(
    {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }
)
"""The only globals a CIFAR pickle (written by Python 2 or 3, any protocol) refers to."""


@dataclass(frozen=True)
class CifarLayout:
    """One CIFAR variant: its dataset name, where its files are and which pickle key holds its
    labels."""

    name: str
    folder: str
    train_files: tuple[str, ...]
    test_file: str
    label_key: str
    n_classes: int


CIFAR10 = CifarLayout(
    "cifar10",
    "cifar-10-batches-py",
    tuple(f"data_batch_{i}" for i in range(1, 6)),
    "test_batch",
    "labels",
    10,
)
CIFAR100 = CifarLayout("cifar100", "cifar-100-python", ("train",), "test", "fine_labels", 100)


class _ArraysOnlyUnpickler(pickle.Unpickler):
    """Resolves only :data:`_ALLOWED_GLOBALS`; anything else is a ``ValueError``."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED_GLOBALS:
            raise ValueError(f"unexpected object {module}.{name} in a CIFAR pickle")
        return super().find_class(module, name)


def read_cifar_file(path: str | os.PathLike[str], label_key: str) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR pickle -> (images uint8 ``[n, 3, 32, 32]``, labels int64 ``[n]``)."""
    raw = Path(path).read_bytes()
    try:
        content = _ArraysOnlyUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError) as err:
        raise ValueError(f"{path} is not a CIFAR python-version pickle: {err}") from None
    if not isinstance(content, dict):
        raise ValueError(f"{path} is not a CIFAR python-version pickle (no dict inside)")
    batch = {k.decode() if isinstance(k, bytes) else k: v for k, v in content.items()}
    if "data" not in batch or label_key not in batch:
        raise ValueError(f"{path} lacks the keys 'data' and {label_key!r}")
    data, labels = np.asarray(batch["data"]), np.asarray(batch[label_key])
    n_pixels = math.prod(IMAGE_SHAPE)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != n_pixels:
        raise ValueError(
            f"{path}: data must be uint8 [n, {n_pixels}], got {data.dtype} {data.shape}"
        )
    if labels.shape != (data.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{path}: need one integer label per image")
    return data.reshape(-1, *IMAGE_SHAPE), labels.astype(np.int64)


def read_cifar(
    directory: Path, layout: CifarLayout
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """((train images, labels), (test images, labels)) of one unpacked CIFAR folder."""
    parts = [read_cifar_file(directory / f, layout.label_key) for f in layout.train_files]
    train = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    return train, read_cifar_file(directory / layout.test_file, layout.label_key)


def reference_split_indices(
    n: int, valid_fraction: float, split_seed: int, meta: bool = False
) -> dict[str, np.ndarray]:
    """The [FLC]/[GRA] (``meta=False``) or [MC] (``meta=True``) train/val(/meta_val) indices.

    ``indices = arange(n)`` shuffled by ``RandomState(split_seed)`` (the permutation
    ``np.random.seed(s); np.random.shuffle(list(range(n)))`` produces), ``n_val = floor(f n)``:
    val = ``indices[:n_val]``; without meta, train = ``indices[n_val:]``; with meta (its size
    equal to val's, [MC]'s ``meta_val_size=1``), ``n_meta = floor((1 + 1) f n)``, meta_val =
    ``indices[n_val:n_meta]`` and train = ``indices[n_meta:]``.
    """
    check_real("valid_fraction", valid_fraction, 0.0, 1.0, low_open=True, high_open=True)
    indices = np.arange(n)
    np.random.RandomState(split_seed).shuffle(indices)
    n_val = int(np.floor(valid_fraction * n))
    if not meta:
        return {"train": indices[n_val:], "val": indices[:n_val]}
    n_meta = int(np.floor((1 + 1.0) * valid_fraction * n))
    return {"train": indices[n_meta:], "val": indices[:n_val], "meta_val": indices[n_val:n_meta]}


def check_split_options(split: str, split_seed: int | None) -> None:
    """``split`` is one of :data:`SPLITS`; ``split_seed`` is a non-negative int or None."""
    check_choice("split", split, SPLITS)
    check_optional_int("split_seed", split_seed, minimum=0)


def normalization_in_raw_units(
    mean: tuple[float, ...], std: tuple[float, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """``[C, 1, 1]`` float64 mean/std for uint8 pixels ``p``: ``(p - 255 m) / (255 s)``."""
    column = (len(mean), 1, 1)
    return (
        np.asarray(mean, np.float64).reshape(column) * PIXEL_MAX,
        np.asarray(std, np.float64).reshape(column) * PIXEL_MAX,
    )


def split_options(
    root: str | os.PathLike[str] | None, split: str, valid_fraction: float, split_seed: int | None
) -> dict[str, Any]:
    """The options a loader with a reference split records in ``DataSplits.options``."""
    return {
        "root": None if root is None else str(root),
        "split": split,
        "valid_fraction": valid_fraction,
        "split_seed": split_seed,
    }


def pool_and_test_parts(
    x_pool: np.ndarray,
    y_pool: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    index: dict[str, np.ndarray] | None,
) -> tuple[dict[str, torch.Tensor], dict[str, np.ndarray]]:
    """Raw parts and labels: the pool's rows ``index[s]`` for each split ``s`` of
    :func:`reference_split_indices`, then ``"test"``; ``index=None`` is the [FLC]/[GRA]
    reference protocol (train = the whole pool, val = test, one shared tensor)."""
    test = torch.from_numpy(x_test)
    if index is None:
        return {"train": torch.from_numpy(x_pool), "val": test, "test": test}, {
            "train": y_pool,
            "val": y_test,
            "test": y_test,
        }
    raw = {s: torch.from_numpy(x_pool[i]) for s, i in index.items()} | {"test": test}
    return raw, {s: y_pool[i] for s, i in index.items()} | {"test": y_test}


def pixel_splits(
    name: str,
    parts: tuple[dict[str, torch.Tensor], dict[str, np.ndarray]],
    n_classes: int,
    normalization: tuple[tuple[float, ...], tuple[float, ...]],
    description: str,
    seed: int,
    options: dict[str, Any],
) -> DataSplits:
    """DataSplits of uint8 pixel ``parts`` (raw, labels) with the fixed per-channel
    ``normalization`` ``(mean, std)`` of ``pixel / 255`` (:func:`normalization_in_raw_units`)."""
    raw, labels = parts
    mean, std = normalization_in_raw_units(*normalization)
    return splits_from_parts(
        name=name,
        raw=raw,
        labels=labels,
        n_classes=n_classes,
        mean=mean,
        std=std,
        description=description,
        seed=seed,
        options=options,
    )


def load_cifar(
    layout: CifarLayout,
    seed: int,
    *,
    root: str | os.PathLike[str] | None = None,
    split: str = "standard",
    valid_fraction: float = DEFAULT_VALID_FRACTION,
    split_seed: int | None = REFERENCE_SPLIT_SEED,
) -> DataSplits:
    """CIFAR in ``layout`` from ``root`` / ``$SELFCAL_DATA``: 45k / 5k / 10k (``split="meta"``:
    40k / 5k / 10k plus ``meta_val`` 5k); see the module docstring."""
    check_split_options(split, split_seed)
    required = (*layout.train_files, layout.test_file)
    directory = locate_dataset_dir(layout.folder, root, required, SOURCE)
    (x_pool, y_pool), (x_test, y_test) = read_cifar(directory, layout)
    used_seed = seed if split_seed is None else split_seed
    index = reference_split_indices(len(y_pool), valid_fraction, used_seed, meta=split == "meta")
    raw, labels = pool_and_test_parts(x_pool, y_pool, x_test, y_test, index)
    sizes = ", ".join(f"{s} {len(v)}" for s, v in labels.items())
    description = (
        f"{layout.name}: the official python-version batches read from disk ({layout.folder}/), "
        f"{layout.n_classes} classes, 3x32x32. Split {split!r} by the reference index shuffle "
        f"(RandomState({used_seed}), validation fraction {valid_fraction}): {sizes}; test = "
        f"official test set. Inputs (pixel/255 - {CIFAR_MEAN}) / {CIFAR_STD} per channel."
    )
    options = split_options(root, split, valid_fraction, split_seed)
    normalization = (CIFAR_MEAN, CIFAR_STD)
    return pixel_splits(
        layout.name, (raw, labels), layout.n_classes, normalization, description, seed, options
    )


cifar10 = register_dataset("cifar10")(functools.partial(load_cifar, CIFAR10))
"""CIFAR-10 from ``root`` / ``$SELFCAL_DATA``: 45k / 5k / 10k (``split="meta"``: 40k/5k/10k
plus ``meta_val`` 5k); :func:`load_cifar` with :data:`CIFAR10`."""
cifar100 = register_dataset("cifar100")(functools.partial(load_cifar, CIFAR100))
"""CIFAR-100 (fine labels) from ``root`` / ``$SELFCAL_DATA``: splits as :data:`cifar10`."""
