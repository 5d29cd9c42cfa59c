"""MMCE_w, the weighted maximum mean calibration error (Kumar et al. 2018), as a training loss.

Per batch: ``r_i`` is the top-label confidence (max softmax probability, differentiable),
``c_i = [argmax = y_i]`` (a constant); the ``m`` correct samples carry weight ``1 - r`` and the
``n`` incorrect ones weight ``r``; ``k(r, r') = exp(-|r - r'| / width)`` (Laplacian kernel,
width 0.4). With ``S_cc = sum_{c,c'} (1-r_c)(1-r_c') k``, ``S_ii = sum_{i,i'} r_i r_i' k`` and
``S_ci = sum_{c,i} (1-r_c) r_i k``:

* ``normalization="textbook"``: ``MMD^2 = S_cc / m^2 + S_ii / n^2 - 2 S_ci / (m n)``.
* ``normalization="reference"`` (default, the [FLC]/[GRA] code): each pair sum is first
  *averaged* over its pair matrix and then divided again by ``m^2 + 1e-5``, ``n^2 + 1e-5`` and
  ``m n + 1e-5``, i.e. ``S_cc / (m^2 (m^2 + 1e-5)) + S_ii / (n^2 (n^2 + 1e-5))
  - 2 S_ci / (m n (m n + 1e-5))`` -- effectively ``1/m^4, 1/n^4, 2/(m^2 n^2)`` (methods §3).

``MMCE_w = sqrt(MMD^2 + 1e-10)``, and 0 when either group is empty. (``MMD^2`` is clamped at 0
before the square root; both forms are squared norms of a kernel mean difference, so this only
guards against a rounding below zero.) The loss is ``CE_mean + lam * MMCE_w`` (the default
``reduction="mean"``); the reference training loop multiplies it by the batch size, which is
``reduction="sum"`` here.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import nn

from selfcal._inputs import Labels, label_values
from selfcal._validation import check_choice, check_nonnegative, check_positive
from selfcal.losses._checks import check_logits_labels

Normalization = Literal["reference", "textbook"]
NORMALIZATIONS: tuple[str, ...] = ("reference", "textbook")
REFERENCE_EPS = 1e-5
SQRT_EPS = 1e-10


def mmce_weighted(
    logits: torch.Tensor,
    labels: torch.Tensor | Labels,
    *,
    width: float = 0.4,
    normalization: Normalization = "reference",
) -> torch.Tensor:
    """The batch statistic ``MMCE_w`` (a scalar tensor; see the module docstring)."""
    labels = check_logits_labels(logits, labels)
    width = check_positive("width", width)
    _check_normalization(normalization)
    confidence, predicted = F.softmax(logits, dim=1).max(dim=1)
    correct = (predicted == labels).to(confidence.dtype)
    m, n = float(correct.sum()), float(len(labels) - correct.sum())
    if m == 0 or n == 0:
        return confidence.sum() * 0.0  # zero, still attached to the graph
    kernel = torch.exp(-(confidence[:, None] - confidence[None, :]).abs() / width)
    a, b = (1 - confidence) * correct, confidence * (1 - correct)
    s_cc, s_ii, s_ci = a @ kernel @ a, b @ kernel @ b, a @ kernel @ b
    if normalization == "textbook":
        mmd2 = s_cc / m**2 + s_ii / n**2 - 2 * s_ci / (m * n)
    else:
        eps = REFERENCE_EPS
        mmd2 = (
            s_cc / (m**2 * (m**2 + eps))
            + s_ii / (n**2 * (n**2 + eps))
            - 2 * s_ci / (m * n * (m * n + eps))
        )
    return torch.sqrt(mmd2.clamp_min(0) + SQRT_EPS)


def mmce_loss(
    logits: torch.Tensor,
    labels: torch.Tensor | Labels,
    *,
    lam: float = 2.0,
    width: float = 0.4,
    normalization: Normalization = "reference",
    reduction: Literal["sum", "mean"] = "mean",
) -> torch.Tensor:
    """``CE_mean + lam * MMCE_w`` (the default ``reduction="mean"``), times the batch size for
    ``reduction="sum"`` (the reference training loop; methods §0.1). ``reduction="none"`` is
    rejected: MMCE is a batch statistic."""
    lam = check_nonnegative("lam", lam)
    if reduction not in ("sum", "mean"):
        raise ValueError(
            f"MMCE is a batch statistic: reduction must be 'sum' or 'mean', got {reduction!r}"
        )
    mmce = mmce_weighted(logits, labels, width=width, normalization=normalization)
    mean = F.cross_entropy(logits, label_values(labels).long()) + lam * mmce
    return mean * len(labels) if reduction == "sum" else mean


class MMCELoss(nn.Module):
    """Module twin of :func:`mmce_loss` (λ = 2.0 and kernel width 0.4 as in [GRA]'s scripts)."""

    accepts_labels: ClassVar[bool] = True
    """Takes checked :class:`~selfcal._inputs.Labels` (the training loop passes them)."""

    def __init__(
        self,
        lam: float = 2.0,
        width: float = 0.4,
        normalization: Normalization = "reference",
        *,
        reduction: Literal["sum", "mean"] = "mean",
    ) -> None:
        super().__init__()
        self.lam = check_nonnegative("lam", lam)
        self.width = check_positive("width", width)
        _check_normalization(normalization)
        if reduction not in ("sum", "mean"):
            raise ValueError(f"reduction must be 'sum' or 'mean', got {reduction!r}")
        self.normalization = normalization
        self.reduction = reduction

    def forward(self, logits: torch.Tensor, labels: torch.Tensor | Labels) -> torch.Tensor:
        return mmce_loss(
            logits,
            labels,
            lam=self.lam,
            width=self.width,
            normalization=self.normalization,
            reduction=self.reduction,
        )

    def extra_repr(self) -> str:
        return (
            f"lam={self.lam}, width={self.width}, normalization={self.normalization!r}, "
            f"reduction={self.reduction!r}"
        )


def _check_normalization(normalization: str) -> None:
    check_choice("normalization", normalization, NORMALIZATIONS)
