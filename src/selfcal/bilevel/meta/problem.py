"""The bilevel problem of one meta step, on :class:`~selfcal.bilevel.engine.BilevelProblem`.

* inner parameters ``theta``: the classifier ``head`` (``lookahead="head"``, the reference code)
  or every model parameter (``lookahead="all"``, the "parameters of the backbone" of the
  [MetaReg] text; methods §5.3 / §6.6 item 4);
* outer parameters ``phi``: the meta module's parameters (γ-Net's, or one L2 coefficient per
  element of the head's weight and bias);
* inner loss on the train batch: the meta module's own training loss (sum reduction,
  methods §0) -- :meth:`~selfcal.bilevel.meta.modules.MetaModule.training_loss`;
* inner optimizer: plain gradient descent ``SGD(lr=current lr)`` (no momentum, no weight
  decay: the reference lookahead);
* outer loss: the meta-objective (:mod:`selfcal.bilevel.meta.objectives`) on the
  meta-validation batch through the looked-ahead parameters.

The gradient reaches γ-Net only through the lookahead: ``SECE(meta-val) -> theta' ->
grad_theta FL_gamma -> gamma(phi)`` (methods §6.4). The reference code's variant with the
backbone's leaked gradient is in :mod:`selfcal.bilevel.meta.reference_quirks`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from selfcal._inputs import Labels
from selfcal.bilevel.engine import BilevelProblem
from selfcal.bilevel.meta.modules import MetaModule, model_head
from selfcal.bilevel.meta.objectives import ObjectiveFn
from selfcal.optim import SGD, Params


class MetaBatch(NamedTuple):
    """One iteration's data: the train batch, its detached penultimate features (γ-Net's
    input; the head's input for ``lookahead="head"``), and the meta-validation batch with its
    features (``None`` when the outer loss recomputes them: ``lookahead="all"`` or the
    backbone leak)."""

    x_train: torch.Tensor
    y_train: torch.Tensor | Labels
    features_train: torch.Tensor
    x_meta: torch.Tensor
    y_meta: torch.Tensor
    features_meta: torch.Tensor | None


@contextlib.contextmanager
def frozen_statistics_mode(model: nn.Module, training: bool) -> Iterator[None]:
    """Run in train or eval mode, without mutating BatchNorm running statistics (train-mode
    BatchNorm normalises with the batch statistics but does not update the buffers), and
    restore the previous mode afterwards."""
    was_training = model.training
    norms = [
        m
        for m in model.modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats
    ]
    model.train(training)
    for m in norms:
        m.track_running_stats = not training
    try:
        yield
    finally:
        for m in norms:
            m.track_running_stats = True
        model.train(was_training)


def linear_head(x: torch.Tensor, head: Params) -> torch.Tensor:
    """``x W^T + b``: the ``nn.Linear`` head evaluated with the parameters ``head``
    (``weight``, and ``bias`` if the head has one)."""
    return F.linear(x, head["weight"], head.get("bias"))


def head_params(model: nn.Module) -> Params:
    """The head's parameters, detached (``theta`` of the head-only lookahead)."""
    return {k: p.detach() for k, p in model_head(model).named_parameters()}


def backbone_params(model: nn.Module) -> Params:
    """Every parameter outside ``head``, detached, under its name in ``model``."""
    return {k: p.detach() for k, p in model.named_parameters() if not k.startswith("head.")}


def head_problem(
    model: nn.Module, meta: MetaModule, batch: MetaBatch, inner: SGD, objective: ObjectiveFn
) -> BilevelProblem:
    """``theta`` = the head on the batch's fixed features (the reference lookahead)."""
    if batch.features_meta is None:
        raise ValueError("the head lookahead needs batch.features_meta")
    model_head(model)  # validates the head: the closures evaluate it as an nn.Linear
    feats, feats_meta = batch.features_train, batch.features_meta

    def inner_loss(theta: Params, phi: Params) -> torch.Tensor:
        logits = linear_head(feats, theta)
        return meta.training_loss(logits, batch.y_train, features=feats, head=theta, phi=phi)

    def outer_loss(theta: Params, phi: Params) -> torch.Tensor:
        return objective(linear_head(feats_meta, theta), batch.y_meta)

    return BilevelProblem(inner_loss, outer_loss, inner)


def whole_network_problem(
    model: nn.Module, meta: MetaModule, batch: MetaBatch, inner: SGD, objective: ObjectiveFn
) -> BilevelProblem:
    """``theta`` = every parameter; train-mode inner forward, eval-mode meta-val forward."""
    buffers = dict(model.named_buffers())

    def inner_loss(theta: Params, phi: Params) -> torch.Tensor:
        with frozen_statistics_mode(model, True):
            logits = functional_call(model, {**theta, **buffers}, (batch.x_train,))
        head = {k.removeprefix("head."): v for k, v in theta.items() if k.startswith("head.")}
        return meta.training_loss(
            logits, batch.y_train, features=batch.features_train, head=head, phi=phi
        )

    def outer_loss(theta: Params, phi: Params) -> torch.Tensor:
        with frozen_statistics_mode(model, False):
            logits = functional_call(model, {**theta, **buffers}, (batch.x_meta,))
        return objective(logits, batch.y_meta)

    return BilevelProblem(inner_loss, outer_loss, inner)
