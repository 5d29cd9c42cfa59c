"""Label smoothing: cross-entropy against the soft target ``(1 - eps) onehot(y) + eps / C``."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from selfcal.losses._checks import Reduction, check_logits_labels, check_reduction


def _check_eps(eps: object) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise ValueError(f"eps must be a real number in [0, 1), got {eps!r}")
    eps = float(eps)
    if not (math.isfinite(eps) and 0 <= eps < 1):
        raise ValueError(f"eps must lie in [0, 1), got {eps!r}")
    return eps


def label_smoothing_loss(
    logits: torch.Tensor, labels: torch.Tensor, eps: float, *, reduction: Reduction = "sum"
) -> torch.Tensor:
    """``-sum_k t_k log p_k`` with ``t = (1 - eps) onehot(y) + eps / C`` (LS-eps; [MetaReg]
    uses eps = 0.05 and 0.1), i.e. ``(1 - eps) * CE + eps * mean_k(-log p_k)``.

    Computed by ``torch.nn.functional.cross_entropy(label_smoothing=eps)``, which uses this
    target convention and fuses the work into one kernel (the tests check it against the
    soft-target formula)."""
    eps = _check_eps(eps)
    labels = check_logits_labels(logits, labels)
    check_reduction(reduction)
    return F.cross_entropy(logits, labels, reduction=reduction, label_smoothing=eps)


class LabelSmoothingLoss(nn.Module):
    """Module twin of :func:`label_smoothing_loss`."""

    def __init__(self, eps: float, *, reduction: Reduction = "sum") -> None:
        super().__init__()
        self.eps = _check_eps(eps)
        check_reduction(reduction)
        self.reduction = reduction

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return label_smoothing_loss(logits, labels, self.eps, reduction=self.reduction)

    def extra_repr(self) -> str:
        return f"eps={self.eps}, reduction={self.reduction!r}"
