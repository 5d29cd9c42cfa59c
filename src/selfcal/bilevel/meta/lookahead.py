"""One meta step's problem and hypergradient: :func:`meta_problem` builds the bilevel problem
(:mod:`selfcal.bilevel.meta.problem`, or the reference code's leaky variant of
:mod:`selfcal.bilevel.meta.reference_quirks`) and :func:`meta_hypergradient` differentiates it
by a one-step lookahead from the model's current parameters."""

from __future__ import annotations

from typing import Any

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
from selfcal.bilevel.optim import SGD

LOOKAHEADS: tuple[str, ...] = ("head", "all")


def meta_problem(
    model: nn.Module,
    meta: MetaModule,
    batch: MetaBatch,
    *,
    lr: float,
    objective: ObjectiveFn,
    lookahead: str = "head",
    backbone_leak: bool = False,
) -> BilevelProblem:
    """The bilevel problem of one meta step (:mod:`selfcal.bilevel.meta.problem`).

    ``phi`` is a dict of the meta module's parameters; with ``backbone_leak`` it is
    ``{"meta": ..., "backbone": backbone_params(model)}`` and the hypergradient's
    ``"backbone"`` part is the reference code's leaked gradient (quirk 1; head lookahead
    only; the meta-val forward then runs in train mode, quirk 2). ``theta``:
    :func:`head_params` (``"head"``) or all parameters by name (``"all"``).
    """
    check_choice("lookahead", lookahead, LOOKAHEADS)
    if backbone_leak and lookahead != "head":
        raise ValueError("the reference-code gradient leak exists for the head lookahead only")
    inner = SGD(lr=lr)
    if lookahead == "all":
        return whole_network_problem(model, meta, batch, inner, objective)
    if backbone_leak:
        return leaky_head_problem(model, meta, batch, inner, objective)
    return head_problem(model, meta, batch, inner, objective)


def meta_hypergradient(
    model: nn.Module,
    meta: MetaModule,
    batch: MetaBatch,
    *,
    lr: float,
    objective: ObjectiveFn,
    lookahead: str = "head",
    backbone_leak: bool = False,
    estimator: Estimator | None = None,
) -> Hypergradient:
    """The one-step-lookahead hypergradient of :func:`meta_problem` from the model's current
    parameters: ``dF/dphi = (d theta'/d phi)^T grad_theta f(theta')`` with
    ``theta' = theta - lr grad_theta g(theta, phi)``.

    ``estimator``: ``None`` picks :class:`~selfcal.bilevel.AutogradLookahead` for the head
    lookahead (plain autograd, the fast path) and the engine's
    :class:`~selfcal.bilevel.OneStepLookahead` (the reference, which tests compare the fast
    path against) for ``lookahead="all"``; pass either to force it. ``result.grad``: dict over
    the meta module's parameter names (with ``backbone_leak``: ``{"meta": ...,
    "backbone": ...}``); ``result.outer_loss``: the meta loss at ``theta'``.
    """
    problem = meta_problem(
        model,
        meta,
        batch,
        lr=lr,
        objective=objective,
        lookahead=lookahead,
        backbone_leak=backbone_leak,
    )
    phi: Any = meta.detached()
    if backbone_leak:
        phi = {"meta": phi, "backbone": backbone_params(model)}
    theta = (
        head_params(model)
        if lookahead == "head"
        else {k: p.detach() for k, p in model.named_parameters()}
    )
    if estimator is None:
        estimator = AutogradLookahead() if lookahead == "head" else OneStepLookahead()
    return estimator(problem, phi, theta, problem.inner_optimizer.init(theta))
