"""Losses by name: ``build_loss("bsce-gra", gamma=4, norm=2)``.

Names: ``ce``, ``focal``, ``flsd53``, ``dfl``, ``bsce``, ``brier``, ``mmce``, ``ls`` and the
gradient-weighted variants ``focal-gra``, ``flsd53-gra``, ``dfl-gra``, ``bsce-gra``, plus
``dfl-gra-partial`` (the reference code's DFL-GRA that detaches only ``p_j``). Keyword
arguments go to the loss's constructor (``focal`` needs ``gamma``, ``ls`` needs ``eps``); every
loss takes ``(logits, labels)`` and averages over the batch unless ``reduction=`` says otherwise
(``"sum"``: the reference code's convention, which the studies pass explicitly).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from selfcal._registry import Registry
from selfcal.losses.brier import BrierLoss
from selfcal.losses.mmce import MMCELoss
from selfcal.losses.smoothing import LabelSmoothingLoss
from selfcal.losses.weighted_ce import (
    BSCELoss,
    CrossEntropy,
    DualFocalLoss,
    FLSD53Loss,
    FocalLoss,
)

LossFactory = Callable[..., nn.Module]

_LOSSES: Registry[LossFactory] = Registry("loss")
register_loss = _LOSSES.register
"""Decorator: make ``factory(**kwargs) -> nn.Module`` buildable as ``build_loss(name)``."""
available_losses = _LOSSES.available
"""Sorted names accepted by :func:`build_loss` (a list)."""


def build_loss(name: str, **kwargs: Any) -> nn.Module:
    """The loss module registered as ``name``, built with ``kwargs``.

    Unknown names and arguments the loss does not take raise ``ValueError``."""
    loss: nn.Module = _LOSSES.build(name, **kwargs)
    return loss


def _with_fixed(cls: type[nn.Module], **fixed: Any) -> LossFactory:
    """A factory for ``cls`` with some keyword arguments fixed (rejecting them from callers)."""

    def factory(**kwargs: Any) -> nn.Module:
        clash = sorted(set(kwargs) & set(fixed))
        if clash:
            raise TypeError(f"{', '.join(clash)} is fixed by the name")
        return cls(**fixed, **kwargs)

    return factory


register_loss("ce")(CrossEntropy)
register_loss("focal")(FocalLoss)
register_loss("focal-gra")(_with_fixed(FocalLoss, gra=True))
register_loss("flsd53")(FLSD53Loss)
register_loss("flsd53-gra")(_with_fixed(FLSD53Loss, gra=True))
register_loss("dfl")(DualFocalLoss)
register_loss("dfl-gra")(_with_fixed(DualFocalLoss, gra=True))
register_loss("dfl-gra-partial")(_with_fixed(DualFocalLoss, detach_runner_up=True))
register_loss("bsce")(BSCELoss)
register_loss("bsce-gra")(_with_fixed(BSCELoss, gra=True))
register_loss("brier")(BrierLoss)
register_loss("mmce")(MMCELoss)
register_loss("ls")(LabelSmoothingLoss)
