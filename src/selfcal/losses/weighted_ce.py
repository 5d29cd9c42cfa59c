"""One uncertainty-weighted cross-entropy, ``L = -u(p, y) * log p_y`` ([GRA] eqs. 6, 9-10).

The weight ``u`` is a weight function of :mod:`selfcal.losses.weights`; ``mode`` says what it
weights:

* ``mode="loss"``: ``u`` is part of the loss and is differentiated (focal loss, FLSD-53, dual
  focal loss, BSCE). The gradient is ``g * dCE`` with a ``g`` that is *not* ``u``
  (:func:`~selfcal.losses.focal_gradient_factor`).
* ``mode="gradient"`` ("GRA"): ``L = -sg(u) * log p_y``, so ``dL/dtheta = u * dCE/dtheta``
  exactly -- the per-sample gradient scale *is* the uncertainty (FL-GRA, FLSD-GRA, DFL-GRA,
  BSCE-GRA). The weight is computed from detached probabilities and detached itself.

FL, FL-GRA, FLSD-53, FLSD-GRA, DFL, DFL-GRA, BSCE and BSCE-GRA are configurations of
:func:`uncertainty_weighted_ce`; the classes below are thin named wrappers (module and function
twins) that plug into ``selfcal.training.fit(loss_fn=...)``. The default reduction is the mean
over the batch, like :func:`torch.nn.functional.cross_entropy`; every reference code base sums
(``reduction="sum"``; methods §0.1).

Cost (profiled; see ``benchmarks/bench_losses.py``): one ``log_softmax`` and one per-sample
``nll_loss`` -- what cross-entropy needs anyway; ``-log p_y`` is taken with ``nll_loss`` rather
than ``gather`` because its backward is several times cheaper -- the weight reads
``p = exp(log_softmax)`` instead of a second softmax, and the batch sum (or mean) is one
``dot(u, nll)``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import nn

from selfcal._inputs import Labels
from selfcal._validation import check_choice
from selfcal.losses._checks import Reduction, check_logits_labels, check_reduction
from selfcal.losses.weights import (
    BrierWeight,
    DualFocalWeight,
    FLSD53Weight,
    FocalWeight,
    WeightFunction,
)

Mode = Literal["loss", "gradient"]
MODES: tuple[str, ...] = ("loss", "gradient")


def uncertainty_weighted_ce(
    logits: torch.Tensor,
    labels: torch.Tensor | Labels,
    weight: WeightFunction | None = None,
    *,
    mode: Mode = "loss",
    reduction: Reduction = "mean",
) -> torch.Tensor:
    """``-u(p, y) * log p_y`` per sample (``u = 1`` when ``weight`` is None: cross-entropy).

    ``logits (N, C)`` float, ``labels (N,)`` integer in ``[0, C)``. ``mode="gradient"`` uses
    ``u.detach()`` (GRA); ``reduction`` is ``"mean"`` (default), ``"sum"`` or ``"none"``.

    Examples
    --------
    >>> import torch
    >>> from selfcal.losses import FocalWeight, uncertainty_weighted_ce
    >>> logits = torch.tensor([[2.0, 0.0], [0.0, 1.0]], requires_grad=True)
    >>> labels = torch.tensor([0, 0])
    >>> ce = uncertainty_weighted_ce(logits, labels)  # u = 1: cross-entropy (batch mean)
    >>> focal = uncertainty_weighted_ce(logits, labels, FocalWeight(gamma=2.0))
    >>> gra = uncertainty_weighted_ce(logits, labels, FocalWeight(gamma=2.0), mode="gradient")
    >>> round(ce.item(), 4), round(focal.item(), 4), round(gra.item(), 4)
    (0.7201, 0.3518, 0.3518)

    The focal loss and its GRA variant have the same value; GRA's gradient is ``u`` times the
    cross-entropy gradient (``u`` detached), the focal loss's also differentiates ``u``:

    >>> (g_ce,), (g_gra,) = torch.autograd.grad(ce, logits), torch.autograd.grad(gra, logits)
    >>> u = FocalWeight(gamma=2.0)(logits.softmax(1), labels).detach()
    >>> torch.allclose(g_gra, u[:, None] * g_ce)
    True
    """
    labels = check_logits_labels(logits, labels)
    check_reduction(reduction)
    check_choice("mode", mode, MODES)
    if weight is None:
        return F.cross_entropy(logits, labels, reduction=reduction)
    log_probs = F.log_softmax(logits, dim=1)
    nll = F.nll_loss(log_probs, labels, reduction="none")  # -log p_y, cheap backward
    u = _weights(weight, log_probs, labels, mode).to(nll.dtype)
    if reduction == "none":
        return u * nll
    total = torch.dot(u, nll)
    return total / len(labels) if reduction == "mean" else total


def _weights(
    weight: WeightFunction, log_probs: torch.Tensor, labels: torch.Tensor, mode: str
) -> torch.Tensor:
    """``u`` from ``p = exp(log_probs)``; in "gradient" mode from detached inputs, and detached
    (so no autograd graph is built for it)."""
    if mode == "gradient":
        u = weight(log_probs.detach().exp(), labels).detach()
    else:
        u = weight(log_probs.exp(), labels)
    if u.shape != labels.shape:
        raise ValueError(
            f"the weight function must return shape {tuple(labels.shape)}, got {tuple(u.shape)}"
        )
    return u


class UncertaintyWeightedCE(nn.Module):
    """Module face of :func:`uncertainty_weighted_ce` for any weight function.

    ``gra=True`` weights the gradient (``mode="gradient"``), ``gra=False`` the loss."""

    accepts_labels: ClassVar[bool] = True
    """Takes checked :class:`~selfcal._inputs.Labels` (the training loop passes them)."""

    def __init__(
        self, weight: WeightFunction | None, *, gra: bool = False, reduction: Reduction = "mean"
    ) -> None:
        super().__init__()
        if not isinstance(gra, bool):
            raise ValueError(f"gra must be a bool, got {gra!r}")
        check_reduction(reduction)
        self.weight = weight
        self.gra = gra
        self.reduction = reduction

    @property
    def mode(self) -> Mode:
        """``"gradient"`` for GRA, else ``"loss"``."""
        return "gradient" if self.gra else "loss"

    def forward(self, logits: torch.Tensor, labels: torch.Tensor | Labels) -> torch.Tensor:
        return uncertainty_weighted_ce(
            logits, labels, self.weight, mode=self.mode, reduction=self.reduction
        )

    def extra_repr(self) -> str:
        return f"weight={self.weight!r}, gra={self.gra}, reduction={self.reduction!r}"


class CrossEntropy(UncertaintyWeightedCE):
    """Cross-entropy ``-log p_y`` (the weighted CE with ``u = 1``); mean-reduced by default."""

    def __init__(self, *, reduction: Reduction = "mean") -> None:
        super().__init__(None, reduction=reduction)


class FocalLoss(UncertaintyWeightedCE):
    """Focal loss ``-(1 - p_y)**gamma log p_y`` ([FLC]); ``gra=True`` is FL-GRA, whose
    gradient is ``(1 - p_y)**gamma`` times CE's."""

    def __init__(
        self, gamma: float | torch.Tensor, *, gra: bool = False, reduction: Reduction = "mean"
    ) -> None:
        super().__init__(FocalWeight(gamma), gra=gra, reduction=reduction)


class FLSD53Loss(UncertaintyWeightedCE):
    """FLSD-53: focal loss with ``gamma = 5`` where ``p_y < 0.2`` and 3 elsewhere
    (:class:`~selfcal.losses.FLSD53Weight`); ``gra=True`` is FLSD-GRA."""

    def __init__(self, *, gra: bool = False, reduction: Reduction = "mean") -> None:
        super().__init__(FLSD53Weight(), gra=gra, reduction=reduction)


class DualFocalLoss(UncertaintyWeightedCE):
    """Dual focal loss ``-(1 - p_y + p_j)**gamma log p_y`` (gamma = 5 in [GRA]).

    ``gra=True`` is the faithful DFL-GRA (whole weight detached). ``detach_runner_up=True``
    (with ``gra=False``) is the reference-code variant that detaches only ``p_j``
    (:class:`~selfcal.losses.DualFocalWeight`); combining it with ``gra=True`` is rejected
    because it would change nothing."""

    def __init__(
        self,
        gamma: float = 5.0,
        *,
        gra: bool = False,
        detach_runner_up: bool = False,
        reduction: Reduction = "mean",
    ) -> None:
        if gra and detach_runner_up:
            raise ValueError(
                "detach_runner_up has no effect with gra=True (the whole weight "
                "is detached); use one or the other"
            )
        weight = DualFocalWeight(gamma, detach_runner_up=detach_runner_up)
        super().__init__(weight, gra=gra, reduction=reduction)


class BSCELoss(UncertaintyWeightedCE):
    """BSCE ``-||y - p||_norm**gamma log p_y`` ([GRA]; code form of the generalised Brier
    weight, :class:`~selfcal.losses.BrierWeight`); ``gra=True`` is BSCE-GRA, the paper's
    method. Defaults ``gamma = 4, norm = 2`` (methods §7.1; not the repository's argparse
    defaults ``1, 1``, which make it a scaled focal loss)."""

    def __init__(
        self,
        gamma: float = 4.0,
        norm: float = 2.0,
        *,
        gra: bool = False,
        reduction: Reduction = "mean",
    ) -> None:
        super().__init__(BrierWeight(gamma, norm), gra=gra, reduction=reduction)


def _mode(gra: bool) -> Mode:
    if not isinstance(gra, bool):
        raise ValueError(f"gra must be a bool, got {gra!r}")
    return "gradient" if gra else "loss"


def cross_entropy(
    logits: torch.Tensor, labels: torch.Tensor | Labels, *, reduction: Reduction = "mean"
) -> torch.Tensor:
    """Function twin of :class:`CrossEntropy`."""
    return uncertainty_weighted_ce(logits, labels, None, reduction=reduction)


def focal_loss(
    logits: torch.Tensor,
    labels: torch.Tensor | Labels,
    gamma: float | torch.Tensor,
    *,
    gra: bool = False,
    reduction: Reduction = "mean",
) -> torch.Tensor:
    """Function twin of :class:`FocalLoss`; ``gamma`` may be one exponent per sample."""
    weight = FocalWeight(gamma)
    return uncertainty_weighted_ce(logits, labels, weight, mode=_mode(gra), reduction=reduction)


def flsd53_loss(
    logits: torch.Tensor,
    labels: torch.Tensor | Labels,
    *,
    gra: bool = False,
    reduction: Reduction = "mean",
) -> torch.Tensor:
    """Function twin of :class:`FLSD53Loss`."""
    weight = FLSD53Weight()
    return uncertainty_weighted_ce(logits, labels, weight, mode=_mode(gra), reduction=reduction)


def dual_focal_loss(
    logits: torch.Tensor,
    labels: torch.Tensor | Labels,
    gamma: float = 5.0,
    *,
    gra: bool = False,
    detach_runner_up: bool = False,
    reduction: Reduction = "mean",
) -> torch.Tensor:
    """Function twin of :class:`DualFocalLoss`."""
    if gra and detach_runner_up:
        raise ValueError("detach_runner_up has no effect with gra=True; use one or the other")
    weight = DualFocalWeight(gamma, detach_runner_up=detach_runner_up)
    return uncertainty_weighted_ce(logits, labels, weight, mode=_mode(gra), reduction=reduction)


def bsce_loss(
    logits: torch.Tensor,
    labels: torch.Tensor | Labels,
    gamma: float = 4.0,
    norm: float = 2.0,
    *,
    gra: bool = False,
    reduction: Reduction = "mean",
) -> torch.Tensor:
    """Function twin of :class:`BSCELoss`."""
    weight = BrierWeight(gamma, norm)
    return uncertainty_weighted_ce(logits, labels, weight, mode=_mode(gra), reduction=reduction)
