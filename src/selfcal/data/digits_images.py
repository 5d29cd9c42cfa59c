"""``digits-images``: scikit-learn's 8x8 digits as images ``[n, 1, 8, 8]`` for 2-D CNNs.

The same samples and the SAME split as the flat ``digits`` loader (35 % / 15 % / 50 %
stratified by seed; :mod:`selfcal.data.tabular`): this loader builds ``digits`` for the seed and
reshapes its raw rows, so both views of a seed share their indices and order. Raw features are
the pixel intensities / 16, in [0, 1] (scikit-learn's pixels are counts 0-16), the ``ToTensor``
range. Model inputs are standardised per channel (one mean / std over all training pixels, the
``transforms.Normalize`` convention), not per pixel as the flat view is: a convolution shares
its weights across positions, so the positions must share one scale.
"""

from __future__ import annotations

from collections.abc import Sequence

from selfcal.data.core import (
    SPLIT_NAMES,
    DataSplits,
    channel_standardization_stats,
    splits_from_parts,
)
from selfcal.data.registry import register_dataset
from selfcal.data.tabular import DEFAULT_FRACTIONS, digits

IMAGE_SHAPE = (1, 8, 8)
MAX_PIXEL = 16.0
"""scikit-learn's digits pixels are counts 0..16."""


@register_dataset("digits-images")
def digits_images(seed: int, *, fractions: Sequence[float] = DEFAULT_FRACTIONS) -> DataSplits:
    """8x8 digits as ``[n, 1, 8, 8]`` images (pixels / 16), split exactly as ``digits``."""
    flat = digits(seed, fractions=fractions)
    raw = {s: flat.raw(s).reshape(-1, *IMAGE_SHAPE) / MAX_PIXEL for s in SPLIT_NAMES}
    mean, std = channel_standardization_stats(raw["train"].numpy())
    sizes = "/".join(str(len(flat.split(s))) for s in SPLIT_NAMES)
    description = (
        "digits-images: scikit-learn's load_digits() as 1x8x8 images with pixels / 16 in [0, 1] "
        f"(1797 samples, 10 classes); the flat 'digits' loader's stratified split by seed "
        f"{sizes} (fractions {tuple(fractions)}), same indices; inputs standardised with one "
        "training mean/std over all pixels."
    )
    return splits_from_parts(
        name="digits-images",
        raw=raw,
        labels={s: flat.split(s).y.numpy() for s in SPLIT_NAMES},
        n_classes=flat.n_classes,
        mean=mean,
        std=std,
        description=description,
        seed=seed,
        options={"fractions": tuple(fractions)},
    )
