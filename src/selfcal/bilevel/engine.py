"""The bilevel problem and the hypergradient result shared by every estimator.

A bilevel problem couples outer parameters ``phi`` (a tensor or a dict of tensors) and inner
parameters ``theta`` (a parameter dict)::

    min_phi  F(phi) = f(theta*(phi), phi)   where   theta*(phi) ~ argmin_theta g(theta, phi)

``theta*(phi)`` is approximated by ``T`` steps of a differentiable inner optimizer started
from a warm start. Both losses are closures ``(theta, phi) -> scalar``; a caller builds them
inside its own function, so data and hyperparameters they close over can be ``vmap``-ed.

A *stochastic* problem gives one inner loss per inner step, ``g_0, ..., g_{T-1}`` (step ``k``
trains on minibatch ``k``)::

    theta_{k+1} = Phi(theta_k, grad_theta g_k(theta_k, phi)),   F(phi) = f(theta_T(phi), phi)

Every estimator differentiates that sequence of steps (:class:`Unrolled` exactly); the
deterministic problem is the case ``g_k = g``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import torch
from torch.func import grad

from selfcal.optim import Optimizer, Params

Loss = Callable[[Params, Any], torch.Tensor]


@dataclass(frozen=True)
class BilevelProblem:
    """``inner_loss(theta, phi)`` (g, minimised over ``theta`` by ``inner_optimizer``) and
    ``outer_loss(theta, phi)`` (f, evaluated at the inner solution).

    ``inner_loss`` is one loss used by every inner step, or a sequence with one loss per inner
    step (minibatches); an estimator then runs exactly ``len(inner_loss)`` steps.
    """

    inner_loss: Loss | Sequence[Loss]
    outer_loss: Loss
    inner_optimizer: Optimizer

    @property
    def stochastic(self) -> bool:
        """Whether each inner step has its own loss."""
        return not callable(self.inner_loss)

    def inner_loss_at(self, step: int) -> Loss:
        """``g_step``: the loss inner step ``step`` (0-based) descends."""
        losses = self.inner_loss
        return losses if callable(losses) else losses[step]

    def check_steps(self, steps: int) -> None:
        """A stochastic problem must have one inner loss per step the estimator runs."""
        losses = self.inner_loss
        if not callable(losses) and len(losses) != steps:
            raise ValueError(
                f"the problem has {len(losses)} inner losses (one per inner "
                f"step) but the estimator runs {steps} steps"
            )

    def inner_step(self, theta: Params, phi: Any, state: Any, step: int = 0) -> tuple[Params, Any]:
        """Inner step number ``step``: one optimizer step on ``g_step(., phi)``;
        differentiable in ``theta``, ``phi`` and ``state`` under a ``torch.func`` transform."""
        grads = grad(self.inner_loss_at(step))(theta, phi)
        return self.inner_optimizer.step(theta, grads, state)

    def run_inner(
        self, theta: Params, phi: Any, state: Any, steps: int, start: int = 0
    ) -> tuple[Params, Any]:
        """Inner steps ``start, ..., start + steps - 1`` (a fixed count: no data-dependent
        control flow)."""
        for step in range(start, start + steps):
            theta, state = self.inner_step(theta, phi, state, step)
        return theta, state


class Hypergradient(NamedTuple):
    """An estimator's result.

    ``grad``: the estimate of dF/dphi (same structure as ``phi``). ``theta``, ``opt_state``:
    the inner iterate and optimizer state after the inner steps, detached (the warm start of
    the next outer iteration). ``outer_loss``: ``f(theta, phi)`` at that iterate, detached.
    """

    grad: Any
    theta: Params
    opt_state: Any
    outer_loss: torch.Tensor


class Estimator(Protocol):
    """A hypergradient strategy: runs ``steps`` inner steps from the warm start
    ``(theta, opt_state)`` and returns dF/dphi with the new, detached warm start."""

    @property
    def steps(self) -> int:
        """The number of inner steps one call runs."""
        ...

    def __call__(
        self, problem: BilevelProblem, phi: Any, theta: Params, opt_state: Any
    ) -> Hypergradient: ...
