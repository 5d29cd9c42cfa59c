"""Argument and input checks shared by the convolutional models."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from selfcal._validation import check_int, check_real


def check_counts(values: Sequence[int], name: str, length: int | None = None) -> tuple[int, ...]:
    """Validate a sequence of positive integers (of ``length`` entries if given)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ValueError(f"{name} must be a sequence of positive integers, got {values!r}")
    if length is not None and len(values) != length:
        raise ValueError(f"{name} must have {length} entries, got {values!r}")
    for value in values:
        check_int(f"every entry of {name}", value)
    return tuple(values)


def check_dropout(dropout: float) -> None:
    check_real("dropout", dropout, 0.0, 1.0, high_open=True)


def check_images(x: torch.Tensor, in_channels: int, model: str) -> None:
    """Raise unless ``x`` is a batch of images ``(N, in_channels, H, W)``."""
    if not isinstance(x, torch.Tensor) or x.ndim != 4 or x.shape[1] != in_channels:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"{model} expects images of shape (N, {in_channels}, H, W), got {shape}")
