"""One meta step's problem and hypergradient: a :class:`MetaLookahead` says how to look ahead,
:func:`meta_problem` builds the bilevel problem (:mod:`selfcal.bilevel.meta.problem`, or the
reference code's leaky variant of :mod:`selfcal.bilevel.meta.reference_quirks`) and
:func:`meta_hypergradient` differentiates it from the model's current parameters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from torch import nn

from selfcal._validation import check_choice
from selfcal.bilevel.engine import BilevelProblem, Estimator, Hypergradient
from selfcal.bilevel.estimators import AutogradLookahead, OneStepLookahead
from selfcal.bilevel.meta.modules import MetaModule
from selfcal.bilevel.meta.objectives import ObjectiveFn
from selfcal.bilevel.meta.problem import (
    MetaBatch,
    backbone_params,
    head_params,
    head_problem,
    whole_network_problem,
)
from selfcal.bilevel.meta.reference_quirks import leaky_head_problem
from selfcal.optim import SGD

LOOKAHEADS: tuple[str, ...] = ("head", "all")


@dataclass(frozen=True)
class MetaLookahead:
    """How one meta step looks ahead: one plain gradient-descent step of learning rate ``lr``
    (the current learning rate of the real optimizer) on ``scope`` -- the classifier head
    (``"head"``, the reference code) or every parameter (``"all"``) -- and the meta-objective
    ``objective(logits, labels)`` on the meta-validation batch. ``backbone_leak`` adds the
    reference code's leaked backbone gradient (quirk 1; head only)."""

    lr: float
    objective: ObjectiveFn
    scope: Literal["head", "all"] = "head"
    backbone_leak: bool = False

    def __post_init__(self) -> None:
        check_choice("lookahead", self.scope, LOOKAHEADS)
        if self.backbone_leak and self.scope != "head":
            raise ValueError("the reference-code gradient leak exists for the head lookahead only")


def meta_problem(
    model: nn.Module, meta: MetaModule, batch: MetaBatch, lookahead: MetaLookahead
) -> BilevelProblem:
    """The bilevel problem of one meta step (:mod:`selfcal.bilevel.meta.problem`).

    ``phi`` is a dict of the meta module's parameters; with ``lookahead.backbone_leak`` it is
    ``{"meta": ..., "backbone": backbone_params(model)}`` and the hypergradient's
    ``"backbone"`` part is the reference code's leaked gradient (the meta-val forward then runs
    in train mode, quirk 2). ``theta``: :func:`head_params` (``"head"``) or all parameters by
    name (``"all"``).
    """
    inner = SGD(lr=lookahead.lr)
    if lookahead.scope == "all":
        return whole_network_problem(model, meta, batch, inner, lookahead.objective)
    if lookahead.backbone_leak:
        return leaky_head_problem(model, meta, batch, inner, lookahead.objective)
    return head_problem(model, meta, batch, inner, lookahead.objective)


def meta_hypergradient(
    model: nn.Module,
    meta: MetaModule,
    batch: MetaBatch,
    lookahead: MetaLookahead,
    estimator: Estimator | None = None,
) -> Hypergradient:
    """The one-step-lookahead hypergradient of :func:`meta_problem` from the model's current
    parameters: ``dF/dphi = (d theta'/d phi)^T grad_theta f(theta')`` with
    ``theta' = theta - lr grad_theta g(theta, phi)``.

    ``estimator``: ``None`` picks :class:`~selfcal.bilevel.AutogradLookahead` for the head
    lookahead (plain autograd, the fast path) and the engine's
    :class:`~selfcal.bilevel.OneStepLookahead` (the reference, which tests compare the fast
    path against) for ``scope="all"``; pass either to force it. ``result.grad``: dict over
    the meta module's parameter names (with the backbone leak: ``{"meta": ...,
    "backbone": ...}``); ``result.outer_loss``: the meta loss at ``theta'``.
    """
    problem = meta_problem(model, meta, batch, lookahead)
    phi: Any = meta.detached()
    if lookahead.backbone_leak:
        phi = {"meta": phi, "backbone": backbone_params(model)}
    head = lookahead.scope == "head"
    theta = head_params(model) if head else {k: p.detach() for k, p in model.named_parameters()}
    if estimator is None:
        estimator = AutogradLookahead() if head else OneStepLookahead()
    return estimator(problem, phi, theta, problem.inner_optimizer.init(theta))
