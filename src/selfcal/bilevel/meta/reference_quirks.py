"""Meta-Calibration's reference-code quirks, replicated only on request
(``replicate_reference_quirks=True``; [MC] code, methods §5.2 "Code quirk"), kept apart from
the faithful method:

1. the backbone's gradient buffers are not zeroed between the meta backward and the real
   backward, so the backbone's SGD step also follows ``d meta-loss / d backbone`` (through the
   meta-val features and through ``theta'_fc``, which depends on the train features). We
   compute this "leak" with the engine itself by adding the backbone parameters to ``phi``
   (:func:`leaky_head_problem`) and add it to the backbone's ``.grad``
   (:func:`accumulate_leaked_gradient`). The head's own leaked gradient (``d meta / d
   theta_fc`` through ``theta' = theta - lr g``) is not included: the reference names the
   backbone only.
2. the meta-val forward runs in train mode: BatchNorm normalises the meta batch with its own
   statistics and updates the running statistics with them (we apply that update with one
   extra no-grad train-mode forward of the meta batch, :func:`update_batchnorm_statistics`;
   the engine itself never mutates buffers).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call

from selfcal.bilevel.engine import BilevelProblem
from selfcal.bilevel.meta.modules import MetaModule, model_features
from selfcal.bilevel.meta.objectives import ObjectiveFn
from selfcal.bilevel.meta.problem import MetaBatch, frozen_statistics_mode, linear_head
from selfcal.optim import SGD, Params


class _Features(nn.Module):
    """``model.features`` as a module's forward, so ``functional_call`` can evaluate it with
    given parameters (names prefixed ``model.``)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return model_features(self.model, x)


def leaky_head_problem(
    model: nn.Module, meta: MetaModule, batch: MetaBatch, inner: SGD, objective: ObjectiveFn
) -> BilevelProblem:
    """Head lookahead with the backbone in ``phi = {"meta": ..., "backbone": ...}`` (quirk 1)
    and train-mode meta-val features (quirk 2)."""
    view = _Features(model)
    buffers = {f"model.{k}": v for k, v in model.named_buffers()}

    def features(backbone: Params, x: torch.Tensor) -> torch.Tensor:
        params = {f"model.{k}": v for k, v in backbone.items()}
        with frozen_statistics_mode(model, True):
            return functional_call(view, {**params, **buffers}, (x,), strict=False)

    def inner_loss(theta: Params, phi: dict[str, Params]) -> torch.Tensor:
        logits = linear_head(features(phi["backbone"], batch.x_train), theta)
        return meta.training_loss(
            logits, batch.y_train, features=batch.features_train, head=theta, phi=phi["meta"]
        )

    def outer_loss(theta: Params, phi: dict[str, Params]) -> torch.Tensor:
        logits = linear_head(features(phi["backbone"], batch.x_meta), theta)
        return objective(logits, batch.y_meta)

    return BilevelProblem(inner_loss, outer_loss, inner)


def accumulate_leaked_gradient(model: nn.Module, grads: Params) -> None:
    """Add the leaked meta gradient into the backbone's ``.grad`` (quirk 1)."""
    for name, p in model.named_parameters():
        if name in grads:
            p.grad = grads[name].to(p.dtype).clone() if p.grad is None else p.grad + grads[name]


def update_batchnorm_statistics(model: nn.Module, x_meta: torch.Tensor) -> None:
    """Quirk 2: the reference's train-mode meta-val forward updates BatchNorm's running
    statistics with the meta batch; a no-grad train-mode forward applies the same update."""
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        with torch.no_grad():
            model.train()
            model_features(model, x_meta)
