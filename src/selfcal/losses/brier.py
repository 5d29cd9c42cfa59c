"""Brier loss ``sum_k (p_k - y_k)**2`` per sample ([FLC] "BrierScore"; methods §3)."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from selfcal._inputs import Labels
from selfcal.losses._checks import Reduction, check_logits_labels, check_reduction, reduce
from selfcal.losses.weights import one_hot_residual


def brier_loss(
    logits: torch.Tensor, labels: torch.Tensor | Labels, *, reduction: Reduction = "mean"
) -> torch.Tensor:
    """``sum_k (softmax(z)_k - onehot(y)_k)**2`` per sample, averaged over the batch by default
    (summed over classes, not divided by ``C``; the reference also sums over samples:
    ``reduction="sum"``)."""
    labels = check_logits_labels(logits, labels)
    check_reduction(reduction)
    residual = one_hot_residual(F.softmax(logits, dim=1), labels)
    return reduce(residual.square().sum(dim=1), reduction)


class BrierLoss(nn.Module):
    """Module twin of :func:`brier_loss`."""

    accepts_labels: ClassVar[bool] = True
    """Takes checked :class:`~selfcal._inputs.Labels` (the training loop passes them)."""

    def __init__(self, *, reduction: Reduction = "mean") -> None:
        super().__init__()
        check_reduction(reduction)
        self.reduction = reduction

    def forward(self, logits: torch.Tensor, labels: torch.Tensor | Labels) -> torch.Tensor:
        return brier_loss(logits, labels, reduction=self.reduction)

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"
