"""Tiny fake copies of the on-disk image datasets, written in their exact formats.

CIFAR: the official python-version pickles (protocol 2, bytes keys, numpy globals named
``numpy.core.multiarray`` as in the Python-2-era archive files). Tiny-ImageNet: the
``tiny-imagenet-200/`` folder layout with real 64x64 JPEG files.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

CIFAR10_FOLDER = "cifar-10-batches-py"
CIFAR100_FOLDER = "cifar-100-python"


def cifar_pickle_bytes(content: dict) -> bytes:
    """``content`` pickled like the archive files (old numpy module path)."""
    data = pickle.dumps(content, protocol=2)
    return data.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")


def _batch(rng: np.random.Generator, n: int, label_keys: tuple[str, ...], n_classes: int) -> dict:
    content = {b"batch_label": b"fake batch", b"filenames": [b"img_%d.png" % i for i in range(n)]}
    content[b"data"] = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
    for key in label_keys:
        content[key.encode()] = rng.integers(0, n_classes, size=n).tolist()
    return content


def write_cifar10(root: Path, n_per_batch: int = 20, n_test: int = 30, seed: int = 0) -> dict:
    """Five train batches (``5 * n_per_batch`` images) and a test batch; returns the arrays."""
    rng = np.random.default_rng(seed)
    folder = root / CIFAR10_FOLDER
    folder.mkdir(parents=True)
    batches = [_batch(rng, n_per_batch, ("labels",), 10) for _ in range(5)]
    for i, batch in enumerate(batches, start=1):
        (folder / f"data_batch_{i}").write_bytes(cifar_pickle_bytes(batch))
    test = _batch(rng, n_test, ("labels",), 10)
    (folder / "test_batch").write_bytes(cifar_pickle_bytes(test))
    names = {b"label_names": [b"c%d" % k for k in range(10)]}
    (folder / "batches.meta").write_bytes(cifar_pickle_bytes(names))
    return {
        "train_x": np.concatenate([b[b"data"] for b in batches]).reshape(-1, 3, 32, 32),
        "train_y": np.concatenate([b[b"labels"] for b in batches]),
        "test_x": test[b"data"].reshape(-1, 3, 32, 32),
        "test_y": np.asarray(test[b"labels"]),
    }


def write_cifar100(root: Path, n_train: int = 100, n_test: int = 20, seed: int = 1) -> dict:
    """``train`` and ``test`` pickles with fine (100) and coarse (20) labels."""
    rng = np.random.default_rng(seed)
    folder = root / CIFAR100_FOLDER
    folder.mkdir(parents=True)
    parts = {}
    for name, n in (("train", n_train), ("test", n_test)):
        batch = _batch(rng, n, ("fine_labels",), 100)
        batch[b"coarse_labels"] = rng.integers(0, 20, size=n).tolist()
        (folder / name).write_bytes(cifar_pickle_bytes(batch))
        parts[f"{name}_x"] = batch[b"data"].reshape(-1, 3, 32, 32)
        parts[f"{name}_y"] = np.asarray(batch[b"fine_labels"])
    return parts


WNIDS = ("n03000000", "n01000000", "n02000000")
"""Written to wnids.txt in this (unsorted) order; labels follow the sorted order."""


def _save_jpeg(path: Path, pixels: np.ndarray) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "L" if pixels.ndim == 2 else "RGB"
    Image.fromarray(pixels, mode=mode).save(path, format="JPEG", quality=95)


def write_tiny_imagenet(root: Path, n_per_class: int = 4, seed: int = 0) -> Path:
    """``tiny-imagenet-200/`` with ``n_per_class`` train images per class, one val image per
    class plus a grayscale one; returns the folder."""
    rng = np.random.default_rng(seed)
    folder = root / "tiny-imagenet-200"
    folder.mkdir(parents=True)
    (folder / "wnids.txt").write_text("\n".join(WNIDS) + "\n")
    for wnid in WNIDS:
        for k in range(n_per_class):
            pixels = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
            _save_jpeg(folder / "train" / wnid / "images" / f"{wnid}_{k}.JPEG", pixels)
    lines = []
    for k, wnid in enumerate((*WNIDS, WNIDS[0])):
        gray = k == len(WNIDS)
        pixels = rng.integers(0, 256, (64, 64) if gray else (64, 64, 3), dtype=np.uint8)
        _save_jpeg(folder / "val" / "images" / f"val_{k}.JPEG", pixels)
        lines.append(f"val_{k}.JPEG\t{wnid}\t0\t0\t63\t63")
    (folder / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    return folder
