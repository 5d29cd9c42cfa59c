"""Tiny-ImageNet (200 classes, 64x64 RGB) read from a LOCAL ``tiny-imagenet-200/`` folder.

Where it is looked for: the ``root`` option, else ``$SELFCAL_DATA`` (see
:func:`selfcal.data.core.locate_dataset_dir`); the standard layout of
http://cs231n.stanford.edu/tiny-imagenet-200.zip -- ``wnids.txt`` (one WordNet id per class),
``train/<wnid>/images/*.JPEG`` (500 per class) and ``val/images/*.JPEG`` with
``val/val_annotations.txt`` (``file<TAB>wnid<TAB>box...``). Nothing is downloaded. As in the
reference loader ([FLC] ``Data/tiny_imagenet.py``): class ``k`` is the ``k``-th wnid in sorted
order, files are read in sorted order, grayscale images are converted to RGB. PIL (``pillow``)
is imported only here; images are decoded by a small thread pool (order is kept).

Splits. The reference code ([FLC]/[GRA]) uses the official ``val`` images as BOTH the
validation set (temperature scaling, model selection) and the test set (methods §0.4), so test
images tune the calibrator. Our default is a clean protocol instead (a documented deviation):

* ``split="standard"``: validation held out of ``train`` by the CIFAR reference index logic
  (:func:`selfcal.data.cifar.reference_split_indices`: ``RandomState(1)`` shuffle, first 10 %
  -> 90k / 10k), test = the official val set (10k).
* ``split="meta"``: 80k / 10k val / 10k ``meta_val`` (``DataSplits.extra``), test = official
  val -- [MetaReg]'s 8:1:1 split.
* ``reference_protocol=True``: replicate [FLC]/[GRA]: train = all 100k, val = test = the
  official val set (one shared :class:`~selfcal.data.core.Split`); only with ``split="standard"``.

Normalisation: the reference's ImageNet constants, mean (0.485, 0.456, 0.406), std (0.229,
0.224, 0.225) per channel on pixel / 255; raw features are the uint8 pixels (``mean``/``std``
x 255, as for CIFAR). Augmentation in the reference: random crop 64 / padding 4 + flip
(:func:`selfcal.data.augment.random_crop_flip`).

Memory: all 110k images take 1.35 GB as uint8 raw pixels and 5.4 GB as float32 inputs.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from selfcal.data.cifar import (
    DEFAULT_VALID_FRACTION,
    REFERENCE_SPLIT_SEED,
    check_split_options,
    pixel_splits,
    pool_and_test_parts,
    reference_split_indices,
    split_options,
)
from selfcal.data.core import DataSplits, locate_dataset_dir
from selfcal.data.registry import register_dataset

FOLDER = "tiny-imagenet-200"
REQUIRED = ("wnids.txt", "train", "val/images", "val/val_annotations.txt")
SOURCE = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGE_SIZE = 64
EXTENSION = "JPEG"
MAX_READ_THREADS = 8


def read_wnids(directory: Path) -> list[str]:
    """The class ids of ``wnids.txt``, sorted (class ``k`` = the ``k``-th)."""
    wnids = sorted({line.strip() for line in (directory / "wnids.txt").read_text().splitlines()})
    wnids = [w for w in wnids if w]
    if len(wnids) < 2:
        raise ValueError(f"{directory / 'wnids.txt'} must list at least 2 class ids")
    return wnids


def train_files(directory: Path, wnids: list[str]) -> tuple[list[Path], np.ndarray]:
    """Sorted ``train/<wnid>/images/*.JPEG`` paths of every class, and their labels."""
    paths: list[Path] = []
    labels: list[int] = []
    for label, wnid in enumerate(wnids):
        found = sorted((directory / "train" / wnid / "images").glob(f"*.{EXTENSION}"))
        if not found:
            raise ValueError(f"no training images in {directory / 'train' / wnid / 'images'}")
        paths += found
        labels += [label] * len(found)
    return paths, np.asarray(labels, dtype=np.int64)


def val_files(directory: Path, wnids: list[str]) -> tuple[list[Path], np.ndarray]:
    """Sorted ``val/images/*.JPEG`` paths and their labels from ``val_annotations.txt``."""
    label_of = {w: k for k, w in enumerate(wnids)}
    annotated: dict[str, int] = {}
    for line in (directory / "val" / "val_annotations.txt").read_text().splitlines():
        fields = line.split("\t")
        if len(fields) >= 2 and fields[1].strip() in label_of:
            annotated[fields[0].strip()] = label_of[fields[1].strip()]
        elif line.strip():
            raise ValueError(f"val_annotations.txt: cannot read the line {line!r}")
    paths = sorted((directory / "val" / "images").glob(f"*.{EXTENSION}"))
    missing = [p.name for p in paths if p.name not in annotated]
    if missing or not paths:
        raise ValueError(f"val images without annotation (or none at all): {missing[:5]}")
    return paths, np.asarray([annotated[p.name] for p in paths], dtype=np.int64)


def read_images(paths: list[Path]) -> np.ndarray:
    """Decode JPEGs into uint8 ``[n, 3, 64, 64]`` (RGB, channel first), in the order given."""
    from PIL import Image

    def read_one(path: Path) -> np.ndarray:
        with Image.open(path) as image:
            pixels = np.asarray(image.convert("RGB"))
        if pixels.shape != (IMAGE_SIZE, IMAGE_SIZE, 3):
            size = f"{IMAGE_SIZE}x{IMAGE_SIZE}"
            raise ValueError(f"{path}: expected a {size} image, got {pixels.shape}")
        return pixels.transpose(2, 0, 1)

    out = np.empty((len(paths), 3, IMAGE_SIZE, IMAGE_SIZE), dtype=np.uint8)
    with ThreadPoolExecutor(max_workers=min(MAX_READ_THREADS, os.cpu_count() or 1)) as pool:
        for i, pixels in enumerate(pool.map(read_one, paths)):
            out[i] = pixels
    return out


@register_dataset("tiny-imagenet")
def tiny_imagenet(
    seed: int,
    *,
    root: str | os.PathLike[str] | None = None,
    split: str = "standard",
    valid_fraction: float = DEFAULT_VALID_FRACTION,
    split_seed: int | None = REFERENCE_SPLIT_SEED,
    reference_protocol: bool = False,
) -> DataSplits:
    """Tiny-ImageNet from ``root`` / ``$SELFCAL_DATA``: 90k / 10k / 10k by default."""
    check_split_options(split, split_seed)
    if reference_protocol and split != "standard":
        raise ValueError("reference_protocol=True replicates [FLC]/[GRA]; it has no 'meta' split")
    directory = locate_dataset_dir(FOLDER, root, REQUIRED, SOURCE)
    wnids = read_wnids(directory)
    train_paths, y_pool = train_files(directory, wnids)
    test_paths, y_test = val_files(directory, wnids)
    used_seed = seed if split_seed is None else split_seed
    index = None
    if not reference_protocol:
        index = reference_split_indices(len(y_pool), valid_fraction, used_seed, split == "meta")
    parts = pool_and_test_parts(
        read_images(train_paths), y_pool, read_images(test_paths), y_test, index
    )
    description = _description(parts[1], split, used_seed, valid_fraction, reference_protocol)
    options = split_options(root, split, valid_fraction, split_seed)
    options["reference_protocol"] = reference_protocol
    normalization = (IMAGENET_MEAN, IMAGENET_STD)
    return pixel_splits(
        "tiny-imagenet", parts, len(wnids), normalization, description, seed, options
    )


def _description(
    labels: dict[str, np.ndarray],
    split: str,
    split_seed: int,
    valid_fraction: float,
    reference_protocol: bool,
) -> str:
    sizes = ", ".join(f"{s} {len(v)}" for s, v in labels.items())
    if reference_protocol:
        protocol = "reference protocol of [FLC]/[GRA]: validation = test = the official val set"
    else:
        protocol = (
            f"split {split!r}: validation held out of train by the reference index shuffle "
            f"(RandomState({split_seed}), fraction {valid_fraction}); test = official val set"
        )
    return (
        f"tiny-imagenet: {FOLDER}/ read from disk, {IMAGE_SIZE}x{IMAGE_SIZE} RGB; {protocol}: "
        f"{sizes}. Inputs (pixel/255 - {IMAGENET_MEAN}) / {IMAGENET_STD} per channel."
    )
