"""Label smoothing: cross-entropy against the soft target ``(1 - eps) onehot(y) + eps / C``."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from selfcal._inputs import Labels
from selfcal._validation import check_real
from selfcal.losses._checks import Reduction, check_logits_labels, check_reduction


def label_smoothing_loss(
    logits: torch.Tensor,
    labels: torch.Tensor | Labels,
    eps: float,
    *,
    reduction: Reduction = "mean",
) -> torch.Tensor:
    """``-sum_k t_k log p_k`` with ``t = (1 - eps) onehot(y) + eps / C`` (LS-eps; [MetaReg]
    uses eps = 0.05 and 0.1), i.e. ``(1 - eps) * CE + eps * mean_k(-log p_k)``.

    Computed by ``torch.nn.functional.cross_entropy(label_smoothing=eps)``, which uses this
    target convention and fuses the work into one kernel (the tests check it against the
    soft-target formula)."""
    eps = check_real("eps", eps, 0.0, 1.0, high_open=True)
    labels = check_logits_labels(logits, labels)
    check_reduction(reduction)
    return F.cross_entropy(logits, labels, reduction=reduction, label_smoothing=eps)


class LabelSmoothingLoss(nn.Module):
    """Module twin of :func:`label_smoothing_loss`."""

    accepts_labels: ClassVar[bool] = True
    """Takes checked :class:`~selfcal._inputs.Labels` (the training loop passes them)."""

    def __init__(self, eps: float, *, reduction: Reduction = "mean") -> None:
        super().__init__()
        self.eps = check_real("eps", eps, 0.0, 1.0, high_open=True)
        check_reduction(reduction)
        self.reduction = reduction

    def forward(self, logits: torch.Tensor, labels: torch.Tensor | Labels) -> torch.Tensor:
        return label_smoothing_loss(logits, labels, self.eps, reduction=self.reduction)

    def extra_repr(self) -> str:
        return f"eps={self.eps}, reduction={self.reduction!r}"
