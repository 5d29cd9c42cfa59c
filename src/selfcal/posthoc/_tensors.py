"""Tensor helpers of the calibrators' predictions: fitted numpy values as tensors, and
``numpy.interp`` on any torch device."""

from __future__ import annotations

import numpy as np
import torch


def as_tensor(values: np.ndarray | float, like: torch.Tensor) -> torch.Tensor:
    """Fitted numpy values as a float64 tensor on ``like``'s device."""
    return torch.as_tensor(np.asarray(values, dtype=np.float64), device=like.device)


def interp(x: torch.Tensor, xp: torch.Tensor, fp: torch.Tensor) -> torch.Tensor:
    """Piecewise-linear interpolation through ``(xp, fp)`` (``xp`` strictly increasing),
    constant beyond the ends -- ``numpy.interp`` on any torch device."""
    if xp.shape[0] == 1:
        return fp[0].expand_as(x).clone()
    xc = x.clamp(xp[0], xp[-1])
    i = (torch.searchsorted(xp, xc.contiguous(), right=True) - 1).clamp(0, xp.shape[0] - 2)
    x0, x1, y0, y1 = xp[i], xp[i + 1], fp[i], fp[i + 1]
    return y0 + (xc - x0) * ((y1 - y0) / (x1 - x0))
