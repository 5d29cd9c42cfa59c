"""Small data for the display tests: 2-D points in three blobs, a fake BO4SC weight run."""

from __future__ import annotations

import numpy as np


def three_blobs() -> tuple[np.ndarray, np.ndarray]:
    """Three Gaussian blobs in 2-D: points ``(90, 2)`` and labels ``(90,)``."""
    rng = np.random.default_rng(0)
    centres = np.array([[-3.0, 0.0], [3.0, 1.0], [0.0, 4.0]])
    y = np.repeat(np.arange(3), 30)
    return centres[y] + rng.normal(scale=1.0, size=(90, 2)), y


def fake_weight_run() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A fake BO4SC run: 40 samples, 12 outer iterations, weights in [0, 1]; returns the weight
    history ``(13, 40)``, the misclassified mask and 2-D points."""
    rng = np.random.default_rng(1)
    n, iters = 40, 12
    steps = rng.uniform(0.0, 0.08, size=(iters, n))
    history = np.clip(1.0 - np.vstack([np.zeros((1, n)), steps.cumsum(0)]), 0.0, 1.0)
    misclassified = rng.random(n) < 0.25
    misclassified[:2] = [True, False]
    return history, misclassified, rng.normal(size=(n, 2))
