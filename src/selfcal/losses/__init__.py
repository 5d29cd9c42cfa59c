"""Train-time calibration losses: one uncertainty-weighted cross-entropy and the baselines.

``L = -u(p, y) * log p_y`` with a weight function ``u`` (:class:`FocalWeight`,
:class:`FLSD53Weight`, :class:`DualFocalWeight`, :class:`BrierWeight`) that either weights the
loss (differentiated: FL, FLSD-53, DFL, BSCE) or the gradient (detached, "GRA": FL-GRA,
FLSD-GRA, DFL-GRA, BSCE-GRA) -- :func:`uncertainty_weighted_ce`. Also Brier, MMCE_w, label
smoothing and mixup. Every loss takes ``(logits, labels)``, averages over the batch by default
(like :func:`torch.nn.functional.cross_entropy` and ``fit``'s default loss, so it is a drop-in
for it; the reference code bases sum: ``reduction="sum"``) and plugs into
``selfcal.training.fit(loss_fn=...)``; :func:`build_loss` builds them by name.
"""

from selfcal.losses.brier import BrierLoss, brier_loss
from selfcal.losses.mixup import mixup_batch, mixup_loss, sample_mixup_lambda
from selfcal.losses.mmce import MMCELoss, mmce_loss, mmce_weighted
from selfcal.losses.registry import available_losses, build_loss, register_loss
from selfcal.losses.rest_point import gra_rest_point, label_weights
from selfcal.losses.smoothing import LabelSmoothingLoss, label_smoothing_loss
from selfcal.losses.weighted_ce import (
    BSCELoss,
    CrossEntropy,
    DualFocalLoss,
    FLSD53Loss,
    FocalLoss,
    UncertaintyWeightedCE,
    bsce_loss,
    cross_entropy,
    dual_focal_loss,
    flsd53_loss,
    focal_loss,
    uncertainty_weighted_ce,
)
from selfcal.losses.weights import (
    BrierWeight,
    DualFocalWeight,
    FLSD53Weight,
    FocalWeight,
    WeightFunction,
    focal_gradient_factor,
    runner_up_probability,
    true_class_probability,
)

__all__ = [
    "BSCELoss",
    "BrierLoss",
    "BrierWeight",
    "CrossEntropy",
    "DualFocalLoss",
    "DualFocalWeight",
    "FLSD53Loss",
    "FLSD53Weight",
    "FocalLoss",
    "FocalWeight",
    "LabelSmoothingLoss",
    "MMCELoss",
    "UncertaintyWeightedCE",
    "WeightFunction",
    "available_losses",
    "brier_loss",
    "bsce_loss",
    "build_loss",
    "cross_entropy",
    "dual_focal_loss",
    "flsd53_loss",
    "focal_gradient_factor",
    "focal_loss",
    "gra_rest_point",
    "label_smoothing_loss",
    "label_weights",
    "mixup_batch",
    "mixup_loss",
    "mmce_loss",
    "mmce_weighted",
    "register_loss",
    "runner_up_probability",
    "sample_mixup_lambda",
    "true_class_probability",
    "uncertainty_weighted_ce",
]
