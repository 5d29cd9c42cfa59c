"""Shared synthetic data for the post-hoc calibrator tests."""

from __future__ import annotations

import numpy as np


def make_logits(seed: int, n: int = 400, c: int = 5, scale: float = 3.0, margin: float = 2.0):
    """Overconfident logits: noise times ``scale`` plus ``margin`` on a class that is the true
    label 70% of the time. Returns float64 ``(n, c)`` logits and int64 labels."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    target = np.where(rng.random(n) < 0.7, y, rng.integers(0, c, n))
    z = scale * rng.normal(size=(n, c))
    z[np.arange(n), target] += margin * scale
    return z, y


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)
