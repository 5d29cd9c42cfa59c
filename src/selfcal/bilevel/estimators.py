"""Hypergradient estimators: interchangeable strategies with one signature,

    estimator(problem, phi, theta, opt_state) -> Hypergradient(grad, theta, opt_state, outer_loss)

Each runs ``steps`` inner steps from the warm start ``(theta, opt_state)`` and returns dF/dphi
and the new warm start, detached (truncated back-propagation across outer iterations). Inputs
are treated as constants. Iteration counts are fixed, and there is no ``.item()`` or
data-dependent branch, so every estimator written on ``torch.func`` runs under
``torch.func.vmap`` (e.g. one outer step over a batch of seeds or hyperparameters); the
``Autograd*`` twins record on the regular autograd tape instead (faster, not ``vmap``-able).

* :class:`Unrolled` -- reverse mode through the unrolled inner steps, optimizer state
  included: the exact derivative of the computation. Memory grows linearly in the
  differentiated steps.
* :class:`OneStepLookahead` -- ``Unrolled(steps, backprop_steps=1)``.
* :class:`AutogradUnrolled` / :class:`AutogradLookahead` -- the same hypergradients as
  :class:`Unrolled` / :class:`OneStepLookahead`, with the differentiated steps evaluated by
  plain ``torch.autograd`` (``create_graph=True``) instead of ``torch.func``: faster (per-op
  functorch dispatch is a large share of a small network's cost), not ``vmap``-able. The
  ``torch.func`` estimators stay the reference; tests check that the two agree.
* :class:`Implicit` -- the implicit function theorem at the last iterate with a
  Hessian-vector-product linear solve. Memory is flat in ``steps``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch.func import grad, vjp

from selfcal._validation import check_int
from selfcal.bilevel._tree import detach, tree_dot, tree_leaves, tree_map
from selfcal.bilevel.engine import BilevelProblem, Hypergradient
from selfcal.bilevel.solvers import ConjugateGradient, MatVec, Neumann
from selfcal.optim import Params


def _final_grad(fn: Any, *primals: Any) -> tuple[Any, Any]:
    """Gradient of the scalar ``fn(*primals) -> (loss, aux)`` with respect to every primal,
    and ``aux``.

    This is the last, outermost differentiation of an estimator, so it runs the backward
    pass with ``create_graph=False`` and frees the graph as it goes (``torch.func.grad``
    always records the backward for a possible higher order, which an unrolled step would pay
    for at every one of its ``T`` inner steps; ``benchmarks/bench_bilevel.py`` times the
    estimators).
    """
    loss, vjp_fn, aux = cast(tuple[Any, Any, Any], vjp(fn, *primals, has_aux=True))
    return vjp_fn(torch.ones_like(loss), retain_graph=False, create_graph=False), aux


def _with_aux(loss: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, loss)``: the loss as its own auxiliary output, to return its value."""
    return loss, loss


@dataclass(frozen=True)
class Unrolled:
    """Reverse-mode differentiation through the last ``backprop_steps`` of ``steps`` inner
    steps (``None``: all of them).

    Write one optimizer step as ``(theta_{k+1}, s_{k+1}) = Phi(theta_k, s_k, phi)`` (``s``:
    momentum buffers / Adam moments). The chain rule through the unrolled computation is the
    adjoint recursion ``lambda_T = grad_{theta, s} f(theta_T, phi)``,
    ``lambda_k = (d Phi / d(theta_k, s_k))^T lambda_{k+1}`` and

        dF/dphi = grad_phi f(theta_T, phi) + sum_k (d Phi / d phi)_k^T lambda_{k+1}

    which reverse mode (``torch.func.vjp`` of ``phi -> f(theta_T(phi), phi)``) evaluates
    exactly, through the parameters and the optimizer state. The first ``steps -
    backprop_steps`` steps run without a graph: their dependence on ``phi`` is dropped
    (truncated back-propagation, Shaban et al., 2019), and memory grows with
    ``backprop_steps`` only.
    """

    steps: int
    backprop_steps: int | None = None

    def __post_init__(self) -> None:
        check_int("steps", self.steps, 1)
        if self.backprop_steps is not None:
            check_int("backprop_steps", self.backprop_steps, 1)
            if self.backprop_steps > self.steps:
                raise ValueError(
                    f"backprop_steps ({self.backprop_steps}) exceeds steps ({self.steps})"
                )

    def _undifferentiated(
        self, problem: BilevelProblem, phi: Any, theta: Params, opt_state: Any
    ) -> tuple[Any, Params, Any, int]:
        """The inputs detached and the first ``steps - backprop_steps`` steps run without a
        graph: ``(phi, theta, opt_state, first)``, ``first`` the index of the first
        differentiated step."""
        problem.check_steps(self.steps)
        phi, theta, opt_state = detach((phi, theta, opt_state))
        differentiated = self.steps if self.backprop_steps is None else self.backprop_steps
        first = self.steps - differentiated
        theta, opt_state = problem.run_inner(theta, phi, opt_state, first)
        return phi, theta, opt_state, first

    def __call__(
        self, problem: BilevelProblem, phi: Any, theta: Params, opt_state: Any
    ) -> Hypergradient:
        phi, theta, opt_state, first = self._undifferentiated(problem, phi, theta, opt_state)

        def outer_through_steps(phi_: Any) -> tuple[torch.Tensor, tuple[Any, ...]]:
            theta_t, state_t = problem.run_inner(theta, phi_, opt_state, self.steps - first, first)
            loss = problem.outer_loss(theta_t, phi_)
            return loss, (theta_t, state_t, loss)

        (hypergrad,), (theta, opt_state, loss) = _final_grad(outer_through_steps, phi)
        return Hypergradient(hypergrad, *detach((theta, opt_state, loss)))


@dataclass(frozen=True)
class AutogradUnrolled(Unrolled):
    """:class:`Unrolled` with the differentiated steps on the regular autograd tape.

    The first ``steps - backprop_steps`` steps run as in :class:`Unrolled` (no graph); then,
    with ``theta`` and ``phi`` fresh leaves, each differentiated step takes its gradient with
    ``torch.autograd.grad(..., create_graph=True)`` and one backward pass of the outer loss
    gives ``dF/dphi`` -- the quantity :class:`Unrolled` computes with ``torch.func.grad``
    inside ``torch.func.vjp``, by the same operations (tests compare the bits). Without the
    functorch transforms around every operation an outer iteration of the MNIST-1D CNN takes
    about a sixth less time (``benchmarks/results/bilevel-minibatch.md``). It records on the
    regular tape, so it does not run under ``torch.func.vmap``: the minibatch BO4SC
    (:class:`~selfcal.bilevel.BO4SC`, the pipeline's ``bo4sc``) uses it; the batched studies
    keep :class:`Unrolled`. A ``phi`` leaf the outer loss does not reach gets a zero gradient,
    as with ``torch.func``. Results are detached.
    """

    def __call__(
        self, problem: BilevelProblem, phi: Any, theta: Params, opt_state: Any
    ) -> Hypergradient:
        phi, theta, opt_state, first = self._undifferentiated(problem, phi, theta, opt_state)
        phi, theta = tree_map(lambda t: t.requires_grad_(), detach((phi, theta)))
        with torch.enable_grad():
            for step in range(first, self.steps):
                loss = problem.inner_loss_at(step)(theta, phi)
                inner = _autograd(loss, theta, create_graph=True)
                theta, opt_state = problem.inner_optimizer.step(theta, inner, opt_state)
            loss = problem.outer_loss(theta, phi)
            hypergrad = _autograd(loss, phi, create_graph=False)
        return Hypergradient(hypergrad, *detach((theta, opt_state, loss)))


@dataclass(frozen=True)
class _LastStepOnly:
    """The estimators that differentiate the last of ``steps >= 1`` inner steps only."""

    steps: int = 1

    def __post_init__(self) -> None:
        check_int("steps", self.steps, 1)


@dataclass(frozen=True)
class OneStepLookahead(_LastStepOnly):
    """Differentiate through the last inner step only: ``Unrolled(steps, backprop_steps=1)``.

    With ``steps=1`` this is the classic lookahead (DARTS, Meta-Calibration, gamma-Net):
    ``theta' = step(theta, grad_theta g(theta, phi))`` and ``dF/dphi = df/dphi +
    (d theta'/d phi)^T grad_theta f(theta', phi)``.
    """

    def __call__(
        self, problem: BilevelProblem, phi: Any, theta: Params, opt_state: Any
    ) -> Hypergradient:
        return Unrolled(self.steps, backprop_steps=1)(problem, phi, theta, opt_state)


@dataclass(frozen=True)
class AutogradLookahead(_LastStepOnly):
    """:class:`OneStepLookahead` with the differentiated step on the regular autograd tape:
    ``AutogradUnrolled(steps, backprop_steps=1)``.

    The first ``steps - 1`` steps run as in :class:`OneStepLookahead` (no graph); then, with
    ``theta`` and ``phi`` fresh leaves::

        g = autograd.grad(g(theta, phi), theta, create_graph=True)
        (theta', s') = step(theta, g, s)
        dF/dphi = autograd.grad(f(theta', phi), phi)

    which is ``df/dphi + (d theta'/d phi)^T grad_theta f(theta', phi)``, the quantity
    :class:`OneStepLookahead` computes with ``torch.func.grad`` inside ``torch.func.vjp``.
    The closures run once each, with no functorch transform around them, so there is no
    per-op functorch dispatch, a large share of the cost for a small head (the two are timed
    side by side in ``benchmarks/results/meta.md``). It records on the
    regular tape, so it does not run under ``torch.func.vmap``; a ``phi`` leaf the outer loss
    does not reach gets a zero gradient, as with ``torch.func``. Results are detached.
    """

    def __call__(
        self, problem: BilevelProblem, phi: Any, theta: Params, opt_state: Any
    ) -> Hypergradient:
        return AutogradUnrolled(self.steps, backprop_steps=1)(problem, phi, theta, opt_state)


def _autograd(loss: torch.Tensor, wrt: Any, *, create_graph: bool) -> Any:
    """``d loss / d wrt`` by ``torch.autograd.grad``, shaped like the tree ``wrt`` (zeros for
    leaves ``loss`` does not depend on)."""
    grads = iter(
        torch.autograd.grad(
            loss,
            tree_leaves(wrt),
            create_graph=create_graph,
            allow_unused=True,
            materialize_grads=True,
        )
    )
    return tree_map(lambda _: next(grads), wrt)


@dataclass(frozen=True)
class Implicit:
    """Implicit differentiation at the last inner iterate ``theta_T`` (assumed stationary,
    ``grad_theta g(theta_T, phi) = 0``)::

        dF/dphi = df/dphi - (d^2 g / dphi dtheta)^T v,   H v = grad_theta f,
        H = d^2 g / dtheta^2 at theta_T

    The ``steps`` inner steps run without a graph, so memory does not grow with ``steps``.
    ``H v`` is a double-vjp (reverse over reverse) of ``grad_theta g`` whose graph is built
    once at ``theta_T`` and reused by every solver iteration; ``H`` is symmetric, so the vjp
    is the Hessian-vector product. The mixed term is ``grad_phi <grad_theta g(theta_T, phi),
    v>``.

    For a stochastic problem (one inner loss per step) ``g`` in both terms is the last step's
    loss ``g_{T-1}``: a one-minibatch estimate of the Hessian and the mixed term, as in
    stochastic implicit bilevel methods; the hypergradient then reaches only ``phi``'s part
    that ``g_{T-1}`` reads.
    """

    steps: int
    solver: ConjugateGradient | Neumann = field(default_factory=ConjugateGradient)

    def __post_init__(self) -> None:
        check_int("steps", self.steps, 0)

    def __call__(
        self, problem: BilevelProblem, phi: Any, theta: Params, opt_state: Any
    ) -> Hypergradient:
        problem.check_steps(self.steps)
        phi, theta, opt_state = detach((phi, theta, opt_state))
        theta, opt_state = problem.run_inner(theta, phi, opt_state, self.steps)
        inner_loss = problem.inner_loss_at(max(self.steps - 1, 0))
        (grad_theta_f, grad_phi_f), loss = _final_grad(
            lambda theta_, phi_: _with_aux(problem.outer_loss(theta_, phi_)), theta, phi
        )
        v = self.solver(self._hessian_product(inner_loss, theta, phi), grad_theta_f)

        def inner_grad_along_v(phi_: Any) -> tuple[torch.Tensor, torch.Tensor]:
            return _with_aux(tree_dot(grad(inner_loss)(theta, phi_), v))

        (mixed,), _ = _final_grad(inner_grad_along_v, phi)
        hypergrad = tree_map(lambda direct, m: direct - m, grad_phi_f, mixed)
        return Hypergradient(hypergrad, *detach((theta, opt_state, loss)))

    @staticmethod
    def _hessian_product(inner_loss: Any, theta: Params, phi: Any) -> MatVec:
        """``v -> H v``: the vjp of ``grad_theta g`` at ``theta_T``; its graph is built once
        and kept (``retain_graph``) for every solver iteration; ``v`` is a constant, so no
        graph of the product itself is recorded."""
        vjp_fn = vjp(lambda theta_: grad(inner_loss)(theta_, phi), theta)[1]
        return lambda v: vjp_fn(v, retain_graph=True, create_graph=False)[0]
