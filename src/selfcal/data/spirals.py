"""Spiral 2.5 / 3.5 ([BO4SC] §4; methods §8.2): two interlocking noisy spirals, one per class.

Generator (methods §8.2, the popular two-spiral parameterisation with scaled arms):

* ``t = sqrt(U) * 780°`` in radians, ``U ~ U[0, 1)``, so ``t`` has density ``2t / T^2`` on
  ``[0, T]``, ``T = 13π/3``;
* arm radius ``r = a * t``; class 0 is the point ``r (-cos t, sin t)``, class 1 its mirror through
  the origin, ``-r (-cos t, sin t)`` (the 180°-rotated arm, which interlocks with class 0);
* both plus ``N(0, sigma^2 I)`` with sigma = 2.5 or 3.5, the paper's "standard deviation from the
  center of the spiral".

Our choice: every point draws its own ``t`` and noise (the popular generator reuses class 0's
points, negated, for class 1); classes are balanced (``n // 2`` each, class 0 one more if ``n``
is odd).

The arm scale ``a`` is not given. methods §8.2 allows ``a`` in [2.6, 2.7]; we fix
:data:`ARM_SCALE` = 2.7, the one value in that range whose Bayes accuracy is at least the best
accuracy the paper reports on each set (0.923 on Spiral 2.5 -- BO4SC; 0.815 on Spiral 3.5 --
Standard), since no classifier beats the Bayes rule. ``python -m selfcal.data.search
spirals`` (:func:`calibration_table`) printed, Bayes = exact posterior (quadrature over t)
on 200k points, 51-NN = trained on 20k, tested on 5k points::

        a  sigma   bayes   51-NN
     2.60    2.5  0.9158  0.9176
     2.60    3.5  0.8076  0.8088
     2.65    2.5  0.9208  0.9232
     2.65    3.5  0.8143  0.8162
     2.70    2.5  0.9256  0.9272
     2.70    3.5  0.8209  0.8236

(the 51-NN values sit slightly above Bayes: their 5k test sets have a standard error of ~0.005).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from selfcal._validation import check_positive
from selfcal.data.core import DataSplits, build_splits, check_sizes, child_rngs
from selfcal.data.registry import register_dataset

T_MAX = math.radians(780.0)
"""Largest arm angle, 780° = 13π/3 rad."""

ARM_SCALE = 2.7
"""``a`` in the arm radius ``r = a * t`` (see the module docstring for the choice)."""

DEFAULT_SIZES = (700, 300, 1000)

BAYES_ACCURACY = {2.5: 0.9256, 3.5: 0.8209}
"""Bayes accuracy at ``ARM_SCALE`` (:func:`bayes_accuracy`, 200k points, 1000-point t grid)."""

KNN_ACCURACY = {2.5: 0.9272, 3.5: 0.8236}
"""51-NN accuracy at ``ARM_SCALE``, trained on 20k, tested on 5k points (:func:`knn_accuracy`)."""


def arm_centres(t: np.ndarray, arm_scale: float) -> np.ndarray:
    """Noise-free class-0 points ``a t (-cos t, sin t)`` for angles ``t``; shape ``[len(t), 2]``."""
    return arm_scale * t[:, None] * np.stack([-np.cos(t), np.sin(t)], axis=1)


def sample_spirals(
    n: int, sigma: float, arm_scale: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` balanced spiral points; returns (x [n, 2], y [n]) with y in {0, 1}."""
    check_positive("sigma", sigma)
    check_positive("arm_scale", arm_scale)
    y = (np.arange(n) >= (n + 1) // 2).astype(np.int64)
    t = np.sqrt(rng.uniform(size=n)) * T_MAX
    sign = np.where(y == 0, 1.0, -1.0)[:, None]
    x = sign * arm_centres(t, arm_scale) + sigma * rng.standard_normal((n, 2))
    return x, y


def class_log_likelihoods(
    x: np.ndarray, sigma: float, arm_scale: float, n_grid: int = 1000
) -> np.ndarray:
    """``log p(x | c)`` up to a shared constant, ``[n, 2]``, by midpoint quadrature over ``t``.

    ``p(x | c) = ∫ (2t / T^2) N(x; ±a t (-cos t, sin t), sigma^2 I) dt``.
    """
    t = (np.arange(n_grid) + 0.5) * (T_MAX / n_grid)
    log_w = np.log(2 * t / T_MAX**2 * (T_MAX / n_grid))
    mu = arm_centres(t, arm_scale)
    out = np.empty((x.shape[0], 2))
    for c, sign in enumerate((1.0, -1.0)):
        sq = ((x[:, None, :] - sign * mu[None]) ** 2).sum(-1)
        z = log_w - sq / (2 * sigma**2)
        top = z.max(axis=1)
        out[:, c] = top + np.log(np.exp(z - top[:, None]).sum(axis=1))
    return out


def bayes_accuracy(
    sigma: float, arm_scale: float = ARM_SCALE, n: int = 200_000, seed: int = 0
) -> float:
    """Monte-Carlo estimate of the Bayes accuracy ``E_x[max_c P(c | x)]`` (equal priors)."""
    x, _ = sample_spirals(n, sigma, arm_scale, np.random.default_rng(seed))
    total = 0.0
    for chunk in np.array_split(x, max(1, n // 2000)):
        ll = class_log_likelihoods(chunk, sigma, arm_scale)
        total += float((1.0 / (1.0 + np.exp(-np.abs(ll[:, 0] - ll[:, 1])))).sum())
    return total / n


def knn_accuracy(
    sigma: float,
    arm_scale: float = ARM_SCALE,
    n_train: int = 20_000,
    n_test: int = 5_000,
    k: int = 51,
    seed: int = 0,
) -> float:
    """Test accuracy of a ``k``-NN classifier (scikit-learn) -- a Bayes proxy."""
    from sklearn.neighbors import KNeighborsClassifier

    rng = np.random.default_rng(seed)
    x_tr, y_tr = sample_spirals(n_train, sigma, arm_scale, rng)
    x_te, y_te = sample_spirals(n_test, sigma, arm_scale, rng)
    knn = KNeighborsClassifier(n_neighbors=k).fit(x_tr, y_tr)
    return float((knn.predict(x_te) == y_te).mean())


def calibration_table(
    arm_scales: Sequence[float] = (2.6, 2.65, 2.7), sigmas: Sequence[float] = (2.5, 3.5)
) -> list[tuple[float, float, float, float]]:
    """``(a, sigma, bayes_accuracy, knn_accuracy)`` per pair -- how ``ARM_SCALE`` was chosen."""
    return [(a, s, bayes_accuracy(s, a), knn_accuracy(s, a)) for a in arm_scales for s in sigmas]


def _spiral_splits(seed: int, sigma: float, sizes: Sequence[int], arm_scale: float) -> DataSplits:
    sizes = check_sizes(sizes)
    data_rng, split_rng = child_rngs(seed, 2)
    x, y = sample_spirals(sum(sizes), sigma, arm_scale, data_rng)
    description = (
        f"Spiral {sigma}: two interlocking spirals, t = sqrt(U)*780deg, class 0 at "
        f"{arm_scale}*t*(-cos t, sin t), class 1 its mirror through the origin, plus "
        f"N(0, {sigma}^2 I); balanced classes. {sum(sizes)} points, stratified random split "
        f"{sizes[0]}/{sizes[1]}/{sizes[2]} by seed; inputs standardised with train statistics."
    )
    return build_splits(
        name=f"spiral-{sigma}",
        x_raw=x,
        y=y,
        n_classes=2,
        sizes=sizes,
        rng=split_rng,
        feature_names=("x1", "x2"),
        description=description,
        seed=seed,
        options={"sizes": sizes, "arm_scale": arm_scale},
    )


@register_dataset("spiral-2.5")
def spiral_25(
    seed: int, *, sizes: Sequence[int] = DEFAULT_SIZES, arm_scale: float = ARM_SCALE
) -> DataSplits:
    """Spiral 2.5 (sigma = 2.5), 700/300/1000 by default."""
    return _spiral_splits(seed, 2.5, sizes, arm_scale)


@register_dataset("spiral-3.5")
def spiral_35(
    seed: int, *, sizes: Sequence[int] = DEFAULT_SIZES, arm_scale: float = ARM_SCALE
) -> DataSplits:
    """Spiral 3.5 (sigma = 3.5), 700/300/1000 by default."""
    return _spiral_splits(seed, 3.5, sizes, arm_scale)
