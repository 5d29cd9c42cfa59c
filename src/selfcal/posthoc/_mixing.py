"""Mixing a calibrated map with the uniform distribution: ``(1 - eps) p + eps / C``.

A calibrator with a ``mix`` hyperparameter returns this mixture (the contract of
:mod:`selfcal.posthoc._base`): ``mix="auto"`` sets ``eps = 1 / (n + 1)`` for ``n`` validation
rows, a number in ``[0, 1)`` sets ``eps`` itself, 0 returns the un-mixed map.
"""

from __future__ import annotations

from typing import Any

import torch

from selfcal._validation import check_real


def resolve_mix(mix: Any, n: int) -> float:
    """The mixing weight ``eps`` of a ``mix`` hyperparameter: ``"auto"`` is ``1 / (n + 1)``,
    a number in ``[0, 1)`` is itself."""
    if mix == "auto":
        return 1.0 / (n + 1)
    return check_real("mix", mix, 0.0, 1.0, high_open=True)


def check_mix(mix: Any) -> None:
    """``mix`` is ``"auto"`` or a number in ``[0, 1)``."""
    if not (isinstance(mix, str) and mix == "auto"):
        if isinstance(mix, str):
            raise ValueError(f"mix must be 'auto' or a number in [0, 1), got {mix!r}")
        resolve_mix(mix, 1)


def mix_uniform(p: torch.Tensor, eps: float) -> torch.Tensor:
    """``(1 - eps) p + eps / C`` of ``(N, C)`` probabilities."""
    return (1.0 - eps) * p + eps / p.shape[1]


def mix_confidence(conf: torch.Tensor, eps: float, n_classes: int) -> torch.Tensor:
    """The mixed probability of the predicted class: ``(1 - eps) c + eps / C``."""
    return (1.0 - eps) * conf + eps / n_classes
