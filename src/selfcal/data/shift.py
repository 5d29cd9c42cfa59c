"""Shifted test sets: the clean test split, corrupted at five severities, fixed by seed.

Severity 0 is the clean test split; severities 1-5 corrupt it more and more. Which
corruptions apply depends on the inputs (:func:`corruptions`):

* **images** ``[n, C, H, W]`` (digits-images, CIFAR): CIFAR-10-C's recipes (Hendrycks &
  Dietterich, 2019) on pixels in ``[0, 1]`` -- ``noise``: additive Gaussian noise of standard
  deviation 0.08, 0.12, 0.18, 0.26, 0.38, clipped to ``[0, 1]``; ``blur``: a Gaussian blur of
  1, 2, 3, 4, 6 pixels at 32-pixel width, scaled to the image's width (0.25 ... 1.5 pixels on
  8 x 8 digits); ``contrast``: ``(x - mean) c + mean`` with the image's mean and c = 0.4, 0.3,
  0.2, 0.1, 0.05 -- plus ``rotation``: each image rotated by 8, 16, 24, 32, 40 degrees, the
  direction drawn at random (bilinear, edges extended);
* **MNIST-1D** (``mnist1d``): ``generator`` -- fresh signals from the package's own generator
  (:func:`selfcal.data.mnist1d.generate_mnist1d`) with its corruption parameters raised
  together: correlated noise ``0.25 (1 + 0.15 s)``, i.i.d. noise ``0.02 (1 + 0.5 s)``, shear
  ``0.75 (1 + 0.2 s)`` and scale coefficient ``0.4 (1 + 0.2 s)`` at severity ``s`` (the
  translation is already the widest the padded signal allows; the rates were set so that a CE
  network's accuracy falls from about 0.95 towards 0.5 at severity 5, the span of CIFAR-10-C);
  :data:`MNIST1D_ROWS` signals,
  generator seed ``1000 (seed + 1) + s``, standardised with the training statistics;
* **feature vectors** (the tabular sets): ``noise`` -- additive Gaussian noise of 0.25 s
  training standard deviations on every standardised feature; ``covariate`` -- a covariate
  shift: the test rows resampled with replacement with probability proportional to
  ``exp(0.5 s u)``, ``u`` the standardised projection of a row on a random unit direction of
  the standardised feature space (the same direction at every severity).

Every random draw is seeded by the dataset's seed, the corruption and the severity, so a
shifted set is the same in every run that loads the same data.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np
import torch

from selfcal.data.core import DataSplits, Split

SEVERITIES = (1, 2, 3, 4, 5)
IMAGE_CORRUPTIONS = ("noise", "blur", "rotation", "contrast")
TABULAR_CORRUPTIONS = ("noise", "covariate")
MNIST1D_CORRUPTIONS = ("generator",)
MNIST1D_ROWS = 5000
"""Signals per shifted MNIST-1D set (generating them is slow: about 6 s per 10,000)."""
NOISE_STD = (0.08, 0.12, 0.18, 0.26, 0.38)
BLUR_PIXELS_AT_32 = (1.0, 2.0, 3.0, 4.0, 6.0)
CONTRAST = (0.4, 0.3, 0.2, 0.1, 0.05)
ROTATION_DEGREES = (8.0, 16.0, 24.0, 32.0, 40.0)
MNIST1D_RAISED = {
    "corr_noise_scale": (0.25, 0.15),
    "iid_noise_scale": (0.02, 0.5),
    "shear_scale": (0.75, 0.2),
    "scale_coeff": (0.4, 0.2),
}
"""The generator's argument ``name: (default, rate)``: ``default (1 + rate s)`` at severity s."""


def corruptions(data: DataSplits) -> tuple[str, ...]:
    """The corruptions that apply to ``data``'s inputs (module doc)."""
    if data.name == "mnist1d":
        return MNIST1D_CORRUPTIONS
    if data.test.x.ndim == 4:
        return IMAGE_CORRUPTIONS
    if data.test.x.ndim == 2:
        return TABULAR_CORRUPTIONS
    raise ValueError(f"no shifted test sets are defined for {data.name!r} inputs")


def shifted_test_sets(
    data: DataSplits, severities: tuple[int, ...] = SEVERITIES
) -> dict[tuple[str, int], Split]:
    """``{(corruption, severity): Split}`` for every corruption of ``data`` at every severity."""
    return {(c, s): shifted(data, c, s) for c in corruptions(data) for s in severities}


def shifted(data: DataSplits, corruption: str, severity: int) -> Split:
    """The test split of ``data`` under ``corruption`` at ``severity`` (1-5; 0: the clean split)."""
    if corruption not in corruptions(data):
        raise ValueError(
            f"unknown corruption {corruption!r} for {data.name}; expected one of "
            f"{corruptions(data)}"
        )
    if severity == 0:
        return data.test
    if severity not in SEVERITIES:
        raise ValueError(f"severity must be 0-5, got {severity!r}")
    rng = np.random.default_rng([data.seed, len(corruption), sum(map(ord, corruption)), severity])
    if data.name == "mnist1d":
        x_raw, y = _mnist1d_signals(data.seed, severity)
        return Split(data.standardize(torch.from_numpy(x_raw[:, None, :])), torch.from_numpy(y))
    if data.test.x.ndim == 4:
        corrupted = _corrupt_images(data, corruption, severity, rng)
        return Split(data.standardize(corrupted), data.test.y)
    return _shift_features(data.test, corruption, severity, rng, data.seed)


# ----------------------------------------------------------------------------- images
def _corrupt_images(
    data: DataSplits, corruption: str, severity: int, rng: np.random.Generator
) -> torch.Tensor:
    """Raw test pixels corrupted in ``[0, 1]`` and returned on the raw scale (uint8 pixels
    are read as ``/ 255``)."""
    raw = data.raw("test")
    peak = 255.0 if raw.dtype == torch.uint8 else 1.0
    x = raw.to(torch.float64).numpy() / peak
    out = IMAGE_RECIPES[corruption](x, severity - 1, rng)
    return torch.from_numpy(out * peak)


def _noise(x: np.ndarray, level: int, rng: np.random.Generator) -> np.ndarray:
    return np.clip(x + rng.normal(0.0, NOISE_STD[level], x.shape), 0.0, 1.0)


def _blur(x: np.ndarray, level: int, rng: np.random.Generator) -> np.ndarray:
    from scipy.ndimage import gaussian_filter

    sigma = BLUR_PIXELS_AT_32[level] * x.shape[-1] / 32.0
    return gaussian_filter(x, sigma=(0.0, 0.0, sigma, sigma), mode="nearest")


def _contrast(x: np.ndarray, level: int, rng: np.random.Generator) -> np.ndarray:
    mean = x.mean(axis=(1, 2, 3), keepdims=True)
    return (x - mean) * CONTRAST[level] + mean


def _rotation(x: np.ndarray, level: int, rng: np.random.Generator) -> np.ndarray:
    from scipy.ndimage import rotate

    angles = rng.choice([-1.0, 1.0], size=len(x)) * ROTATION_DEGREES[level]
    options = {"axes": (1, 2), "reshape": False, "order": 1, "mode": "nearest"}
    return np.stack([rotate(image, a, **options) for image, a in zip(x, angles, strict=True)])


IMAGE_RECIPES: dict[str, Callable[[np.ndarray, int, np.random.Generator], np.ndarray]] = {
    "noise": _noise,
    "blur": _blur,
    "rotation": _rotation,
    "contrast": _contrast,
}


# ----------------------------------------------------------------------------- MNIST-1D
@lru_cache(maxsize=64)
def _mnist1d_signals(seed: int, severity: int) -> tuple[np.ndarray, np.ndarray]:
    """:data:`MNIST1D_ROWS` signals from the generator with raised corruption parameters
    (cached: every method of a seed reads the same sets)."""
    from selfcal.data.mnist1d import generate_mnist1d

    raised = {name: base * (1 + rate * severity) for name, (base, rate) in MNIST1D_RAISED.items()}
    drawn: dict[str, Any] = generate_mnist1d(
        1000 * (seed + 1) + severity, MNIST1D_ROWS, train_split=1.0, **raised
    )
    return np.asarray(drawn["x"], np.float64), np.asarray(drawn["y"], np.int64)


# ----------------------------------------------------------------------------- features
def _shift_features(
    test: Split, corruption: str, severity: int, rng: np.random.Generator, seed: int
) -> Split:
    """Standardised test features with added noise, or resampled along a direction (drawn
    from ``seed`` alone: the same at every severity)."""
    x = test.x.double().numpy()
    if corruption == "noise":
        noisy = x + rng.normal(0.0, 0.25 * severity, x.shape)
        return Split(torch.from_numpy(noisy).float(), test.y)
    direction = np.random.default_rng([seed, 7]).normal(size=x.shape[1])
    projection = x @ (direction / np.linalg.norm(direction))
    u = (projection - projection.mean()) / max(projection.std(), 1e-12)
    weights = np.exp(0.5 * severity * (u - u.max()))
    rows = rng.choice(len(x), size=len(x), replace=True, p=weights / weights.sum())
    return Split(test.x[torch.from_numpy(rows)], test.y[torch.from_numpy(rows)])
