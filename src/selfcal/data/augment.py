"""Batched, seeded image augmentation on tensors (CPU or GPU), without torchvision.

:func:`random_crop_flip` is torchvision's ``RandomCrop(size, padding=p)`` followed by
``RandomHorizontalFlip()`` -- the CIFAR (size 32) and Tiny-ImageNet (size 64) training
augmentation of [FLC]/[MC]/[GRA] -- applied to a whole batch ``[n, C, H, W]`` at once: each image
is padded by ``p`` on every side with ``fill``, a window of its own size is cut at an offset
``(i, j)`` drawn uniformly from ``{0, ..., 2p}^2``, and the window is mirrored left-right with
probability 1/2. All draws come from the given ``torch.Generator`` (offsets ``i``, then ``j``,
then flips, each one ``torch.randint`` over the batch), so a seeded generator gives the same
batch every time.

Padding value: torchvision pads the raw image (pixel 0 = black) BEFORE ``Normalize``. On
already standardised inputs, pass ``fill=black_fill(data)`` (the per-channel input value of a
raw 0 pixel, ``-mean / std``) to reproduce it exactly; ``fill=0`` pads with the mean colour.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from selfcal._validation import check_int
from selfcal.data.core import DataSplits


def black_fill(data: DataSplits) -> torch.Tensor:
    """Per-channel model-input value of a raw-zero pixel, ``(0 - mean) / std``, float32 ``[C]``."""
    zero = torch.zeros(1, *data.train.x.shape[1:], dtype=torch.float64)
    standardized = data.standardize(zero)[0]
    return standardized.reshape(standardized.shape[0], -1)[:, 0].clone()


def _check_batch(x: torch.Tensor, generator: torch.Generator, padding: int) -> None:
    if not isinstance(x, torch.Tensor) or x.ndim != 4 or not x.is_floating_point():
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must be a floating tensor [n, C, H, W], got {shape}")
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    if generator.device.type != x.device.type:
        raise ValueError(f"generator is on {generator.device}, x on {x.device}; use one device")
    check_int("padding", padding, minimum=0)


def _fill_column(fill: float | Sequence[float] | torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``fill`` as a ``[1, C, 1, 1]`` tensor on ``x``'s device and dtype."""
    value = torch.as_tensor(fill, dtype=x.dtype, device=x.device)
    n_channels = x.shape[1]
    if value.ndim == 0:
        value = value.expand(n_channels)
    if value.shape != (n_channels,):
        raise ValueError(f"fill must be a number or one value per channel ({n_channels})")
    return value.reshape(1, n_channels, 1, 1)


def pad_images(
    x: torch.Tensor, padding: int, fill: float | Sequence[float] | torch.Tensor = 0.0
) -> torch.Tensor:
    """``x`` [n, C, H, W] padded by ``padding`` on every side with ``fill`` (per channel)."""
    n, c, h, w = x.shape
    out = _fill_column(fill, x).expand(n, c, h + 2 * padding, w + 2 * padding).clone()
    out[:, :, padding : padding + h, padding : padding + w] = x
    return out


def random_crop_flip(
    x: torch.Tensor,
    generator: torch.Generator,
    padding: int = 4,
    fill: float | Sequence[float] | torch.Tensor = 0.0,
) -> torch.Tensor:
    """Random crop (own size, zero/``fill`` padding ``padding``) + horizontal flip, per image.

    Returns a new tensor shaped like ``x``; ``x`` is not modified. See the module docstring for
    the distribution and the draw order.
    """
    _check_batch(x, generator, padding)
    n, c, h, w = x.shape
    span = 2 * padding + 1
    top = torch.randint(0, span, (n,), generator=generator, device=x.device)
    left = torch.randint(0, span, (n,), generator=generator, device=x.device)
    flip = torch.randint(0, 2, (n,), generator=generator, device=x.device).bool()
    rows = top[:, None] + torch.arange(h, device=x.device)
    columns = torch.arange(w, device=x.device).expand(n, w)
    columns = left[:, None] + torch.where(flip[:, None], (w - 1) - columns, columns)
    padded = pad_images(x, padding, fill)
    batch = torch.arange(n, device=x.device)[:, None, None, None]
    channel = torch.arange(c, device=x.device)[None, :, None, None]
    return padded[batch, channel, rows[:, None, :, None], columns[:, None, None, :]]
