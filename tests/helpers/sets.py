"""Small prediction sets written as the user writes theirs (:mod:`selfcal.io._sets`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def logits(seed: int, n: int, c: int, scale: float = 3.0) -> tuple[np.ndarray, np.ndarray]:
    """Over-confident float32 logits with per-class biases, and their labels."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    z = scale * (rng.normal(size=(n, c)) + 1.5 * np.eye(c)[y]) + np.linspace(-1, 1, c)
    return z.astype(np.float32), y


def write_folder_set(folder: Path, seed: int, n: int = 400, c: int = 4, groups: int = 0) -> Path:
    """``folder/val.npz`` and ``folder/test.npz`` of :func:`logits` (``groups``: that many
    string groups, one per row)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, split in enumerate(("val", "test")):
        z, y = logits(seed + i, n, c)
        arrays: dict[str, np.ndarray] = {"logits": z, "labels": y}
        if groups:
            arrays["groups"] = np.array([f"g{k % groups}" for k in range(n)])
        np.savez(folder / f"{split}.npz", **arrays)
    return folder


def write_file_set(path: Path, seed: int, n: int = 400, c: int = 3) -> Path:
    """One ``.npz`` with ``probs_val``, ``labels_val``, ``probs_test``, ``labels_test``."""
    arrays = {}
    for i, split in enumerate(("val", "test")):
        z, y = logits(seed + i, n, c)
        p = np.exp(z - z.max(1, keepdims=True))
        arrays[f"probs_{split}"] = p / p.sum(1, keepdims=True)
        arrays[f"labels_{split}"] = y
    np.savez(path, **arrays)
    return path
