"""The bilevel problem and the hypergradient result shared by every estimator.

A bilevel problem couples outer parameters ``phi`` (a tensor or a dict of tensors) and inner
parameters ``theta`` (a parameter dict)::

    min_phi  F(phi) = f(theta*(phi), phi)   where   theta*(phi) ~ argmin_theta g(theta, phi)

``theta*(phi)`` is approximated by ``T`` steps of a differentiable inner optimizer started
from a warm start. Both losses are closures ``(theta, phi) -> scalar``; a caller builds them
inside its own function, so data and hyperparameters they close over can be ``vmap``-ed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import torch
from torch.func import grad

from selfcal.bilevel.optim import Optimizer, Params

Loss = Callable[[Params, Any], torch.Tensor]


@dataclass(frozen=True)
class BilevelProblem:
    """``inner_loss(theta, phi)`` (g, minimised over ``theta`` by ``inner_optimizer``) and
    ``outer_loss(theta, phi)`` (f, evaluated at the inner solution)."""

    inner_loss: Loss
    outer_loss: Loss
    inner_optimizer: Optimizer

    def inner_step(self, theta: Params, phi: Any, state: Any) -> tuple[Params, Any]:
        """One optimizer step on ``g(., phi)``; differentiable in ``theta``, ``phi`` and
        ``state`` when called under a ``torch.func`` transform."""
        return self.inner_optimizer.step(theta, grad(self.inner_loss)(theta, phi), state)

    def run_inner(self, theta: Params, phi: Any, state: Any, steps: int) -> tuple[Params, Any]:
        """``steps`` inner steps (a fixed count: no data-dependent control flow)."""
        for _ in range(steps):
            theta, state = self.inner_step(theta, phi, state)
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

    def __call__(self, problem: BilevelProblem, phi: Any, theta: Params,
                 opt_state: Any) -> Hypergradient:
        ...
