"""Meta-objectives: the outer losses a meta-learned regulariser is trained to lower, on a
meta-validation batch through the looked-ahead parameters (methods §5.1, §6.3).

They are :func:`selfcal.metrics.sece` and :func:`selfcal.metrics.dece` themselves (float64,
differentiable), so the trained and the reported quantity are one function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F

from selfcal._validation import check_choice, check_nonnegative
from selfcal.metrics import dece, sece
from selfcal.predictions import Predictions

MetaObjective = Literal["sece", "dece", "ce+dece", "ce"]
META_OBJECTIVES: tuple[str, ...] = ("sece", "dece", "ce+dece", "ce")
ObjectiveFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

SECE_BANDWIDTH = 0.01
SOFT_ACCURACY_SCALE = 100.0
DECE_BINS = 15
DECE_TEMPERATURE = 0.01
DEFAULT_CE_WEIGHT = 0.5
"""``CE + 0.5 DECE``: the meta loss of the later Meta-Calibration commit (methods §5.2)."""


def meta_objective(name: str, *, ce_weight: float = DEFAULT_CE_WEIGHT) -> ObjectiveFn:
    """``(logits, labels) -> scalar`` outer loss by name (float64, differentiable).

    ``"sece"``: SECE, h = 0.01, t_a = 100 (exact all-pairs kernel up to 2048 samples);
    ``"dece"``: DECE, M = 15, t_a = 100, t_b = 0.01; ``"ce+dece"``: mean CE + ``ce_weight``
    DECE (mean CE, as the Meta-Calibration code's meta criterion); ``"ce"``: mean CE
    ``-1/n sum_i log softmax(z_i)_{y_i}`` alone, no calibration term (our reading of the
    [MetaReg] Table 2 "FL_gamma" ablation, methods §6.6 item 8).
    """
    check_choice("meta_objective", name, META_OBJECTIVES)
    if name == "sece":
        return _sece
    if name == "dece":
        return _dece
    if name == "ce":
        return lambda logits, labels: F.cross_entropy(logits.double(), labels)
    weight = check_nonnegative("ce_weight", ce_weight)
    return lambda logits, labels: (
        F.cross_entropy(logits, labels).double() + weight * _dece(logits, labels)
    )


def _sece(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    pred = Predictions.trusted(logits, "logits", labels)  # the loop checked the data once
    return sece(pred, bandwidth=SECE_BANDWIDTH, t_a=SOFT_ACCURACY_SCALE)


def _dece(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return dece(
        Predictions.trusted(logits, "logits", labels),
        n_bins=DECE_BINS,
        t_a=SOFT_ACCURACY_SCALE,
        t_b=DECE_TEMPERATURE,
    )
