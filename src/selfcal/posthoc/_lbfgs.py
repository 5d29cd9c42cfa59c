"""L-BFGS for the likelihood fits too large for Newton's method (matrix-type maps past a few
dozen classes, vector-type maps past a few hundred): preconditioned by blocks of the
Hessian at the start, with a line search that trusts gradients where loss values are only
rounding.

Written here rather than calling scipy's L-BFGS-B (which selfcal used before) because the
large fits evaluate their matrix products in float32 (:mod:`selfcal.posthoc._likelihoods`):
their gradients stay within about ``1e-8`` of the float64 ones, but their loss values carry
rounding of about ``5e-9``, more than the last steps decrease it, and scipy's line search
(Moré--Thuente on loss values) then stops short of the optimum. The objectives are convex,
so a step whose directional derivative at the trial point is still negative has provably
decreased the loss (:func:`line_search`); scipy cannot be told so. ``torch.optim.LBFGS``
(strong Wolfe on the same loss values) has the same limit.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from selfcal.posthoc._solvers import Solution

LBFGS_GTOL = 1e-9
"""Converged once the largest entry of the preconditioned gradient is at most this, with
float64 matrix products (their rounding floor is about ``1e-10``)."""

FLOAT32_GTOL = 1e-7
"""... and with float32 matrix products: their rounding leaves the gradient within about
``1e-8`` of the float64 one (5,000 x 100 and 10,000 x 1,000 logits), so the optimum found is
within ``1e-7`` of the float64 one in every probability (``tests/posthoc/test_lbfgs.py``)."""

HISTORY = 10
"""Correction pairs kept (``m``): ``2 m`` float64 vectors of the parameters' size (160 MB at
1,000 classes); 20 took as many gradients on the shared CIFAR-100 sets."""

ARMIJO = 1e-4
"""Sufficient-decrease fraction of the line search."""

LINE_SEARCH_STEPS = 30
"""Trial points of one line search at most."""

STALL_ITERATIONS = 20
"""Iterations without a new smallest gradient after which L-BFGS gives up (the rounding of
the products keeps the gradient above the tolerance)."""


class Smooth(Protocol):
    """A smooth convex loss of a flat float64 parameter vector, with its gradient."""

    def value_and_gradient(self, theta: torch.Tensor) -> tuple[float, torch.Tensor]:
        """The loss and its gradient."""
        ...


@dataclass(frozen=True)
class Preconditioner:
    """The change of variables ``u_g = L_g^T theta_g`` over groups of ``B`` parameters
    (``theta`` taken in the order ``order``, consecutive when ``None``), where
    ``L_g L_g^T = H_g = diag(d_g) + v_g v_g^T`` approximates the Hessian's block of group
    ``g``: in ``u`` the curvature within each block starts as the identity.

    With ``D = diag(d)``, ``w = D^(-1/2) v`` and ``A = (I + w w^T)^(1/2) = I + (s - 1) w^ w^T``
    (``s = (1 + |w|^2)^(1/2)``, ``w^ = w / |w|``), ``L = D^(1/2) A``: every map is a scaling and
    a rank-one update, ``O(B)`` a group (``A^-1 = I + (1/s - 1) w^ w^T``). Stored:
    ``root = d^(1/2)``, ``direction = w^``, ``stretch = s``."""

    root: torch.Tensor
    direction: torch.Tensor
    stretch: torch.Tensor
    order: torch.Tensor | None = None

    @classmethod
    def from_moments(
        cls,
        first: torch.Tensor,
        second: torch.Tensor,
        total: torch.Tensor,
        ridge: torch.Tensor,
        order: torch.Tensor | None = None,
    ) -> Preconditioner:
        """For the Hessian blocks ``H_g = sum_i a_ig f_i f_i^T + diag(ridge_g)`` of weights
        ``a_ig >= 0`` on features ``f_i``, given ``total = sum_i a_ig`` ``(G,)``, ``first =
        sum_i a_ig f_i`` and ``second = sum_i a_ig f_i^2`` ``(G, B)``: the weighted mean's
        outer product ``v v^T`` (``v = first / total^(1/2)``) and the rest of the exact
        diagonal (the weighted variances, the ridge). Exact when the features' weighted
        covariance is diagonal (two features of which one is constant: vector scaling); the
        rest of the covariance is dropped."""
        v = first / total.clamp_min(torch.finfo(first.dtype).tiny).sqrt().unsqueeze(1)
        d = (second - v.square()).clamp_min(0.0) + ridge
        floor = 1e-12 * float(d.mean())  # for a free constant feature (an unpenalised bias)
        d = d.clamp_min(floor if floor > 0.0 else 1.0)
        w = v / d.sqrt()
        norm = w.norm(dim=1, keepdim=True)
        direction = w / norm.clamp_min(torch.finfo(w.dtype).tiny)
        return cls(d.sqrt(), direction, (1.0 + norm.square()).sqrt(), order)

    @classmethod
    def identity(cls, size: int, device: torch.device) -> Preconditioner:
        ones = torch.ones(size, 1, dtype=torch.float64, device=device)
        return cls(ones, torch.zeros_like(ones), ones.clone())

    def _grouped(self, theta: torch.Tensor) -> torch.Tensor:
        return (theta if self.order is None else theta[self.order]).view(self.root.shape)

    def _ungrouped(self, grouped: torch.Tensor) -> torch.Tensor:
        flat = grouped.reshape(-1)
        if self.order is None:
            return flat
        return torch.empty_like(flat).index_copy_(0, self.order, flat)

    def _stretched(self, t: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
        """``(I + (factor - 1) w^ w^T) t`` in every group."""
        along = (self.direction * t).sum(1, keepdim=True)
        return t + (factor - 1.0) * along * self.direction

    def to_u(self, theta: torch.Tensor) -> torch.Tensor:
        """``u = L^T theta = A D^(1/2) theta``."""
        return self._stretched(self._grouped(theta) * self.root, self.stretch).reshape(-1)

    def to_theta(self, u: torch.Tensor) -> torch.Tensor:
        """``theta = L^-T u = D^(-1/2) A^-1 u``."""
        grouped = self._stretched(u.view(self.root.shape), 1.0 / self.stretch) / self.root
        return self._ungrouped(grouped)

    def gradient(self, grad_theta: torch.Tensor) -> torch.Tensor:
        """The gradient in ``u``: ``L^-1 grad_theta = A^-1 D^(-1/2) grad_theta``."""
        scaled = self._grouped(grad_theta) / self.root
        return self._stretched(scaled, 1.0 / self.stretch).reshape(-1)


class _Met(Exception):
    """Raised from an evaluation whose gradient meets the tolerance: that point is returned."""

    def __init__(self, u: torch.Tensor, loss: float) -> None:
        self.u, self.loss = u, loss


def lbfgs(
    objective: Smooth,
    theta: torch.Tensor,
    max_iter: int,
    preconditioner: Preconditioner | None = None,
    gtol: float = LBFGS_GTOL,
) -> Solution:
    """Minimise a smooth convex ``objective`` from ``theta`` by L-BFGS (:data:`HISTORY`
    correction pairs, the initial inverse Hessian ``(s^T y / y^T y) I``, the identity in the
    first step) in the variables of ``preconditioner``; converged at the first evaluated
    point (line-search trials included) whose largest preconditioned gradient entry is at most
    ``gtol``. ``converged=False`` after ``max_iter`` iterations, or earlier when the rounding
    of the products keeps the gradient above ``gtol``: a line search finds no step that
    decreases the loss, or :data:`STALL_ITERATIONS` pass without a new smallest gradient."""
    pre = preconditioner or Preconditioner.identity(theta.shape[0], theta.device)

    def evaluate(u: torch.Tensor) -> tuple[float, torch.Tensor]:
        loss, grad = objective.value_and_gradient(pre.to_theta(u))
        grad_u = pre.gradient(grad)
        if math.isfinite(loss) and float(grad_u.abs().max()) <= gtol:
            raise _Met(u, loss)
        return loss, grad_u

    u = pre.to_u(theta)
    history: deque[tuple[torch.Tensor, torch.Tensor, float]] = deque(maxlen=HISTORY)
    iteration = 0
    try:
        loss, grad = evaluate(u)
        best, since_best = math.inf, 0
        for iteration in range(1, max_iter + 1):  # noqa: B007 - reported below
            largest = float(grad.abs().max())
            best, since_best = (largest, 0) if largest < best else (best, since_best + 1)
            if since_best > STALL_ITERATIONS:
                break
            direction = _direction(grad, history)
            slope = float(grad @ direction)
            if not slope < 0.0:  # rounding spoilt the curvature pairs: steepest descent
                history.clear()
                direction, slope = -grad, -float(grad @ grad)
            step = line_search(evaluate, u, loss, direction, slope)
            if step is None:
                break
            t, new_loss, new_grad = step
            s, y = t * direction, new_grad - grad
            sy = float(s @ y)
            if sy > 0.0:  # always, for a strictly convex loss, but for rounding
                history.append((s, y, 1.0 / sy))
            u, loss, grad = u + s, new_loss, new_grad
    except _Met as met:
        return Solution(pre.to_theta(met.u), True, iteration, met.loss)
    return Solution(pre.to_theta(u), False, iteration, loss)


def _direction(
    grad: torch.Tensor, history: deque[tuple[torch.Tensor, torch.Tensor, float]]
) -> torch.Tensor:
    """``-H grad`` by the two-loop recursion over the correction pairs ``(s, y, 1 / s^T y)``."""
    q = grad.clone()
    alphas = []
    for s, y, rho in reversed(history):
        alpha = rho * float(s @ q)
        q.sub_(y, alpha=alpha)
        alphas.append(alpha)
    if history:
        s, y, _ = history[-1]
        q.mul_(float(s @ y) / float(y @ y))
    for (s, y, rho), alpha in zip(history, reversed(alphas)):
        q.add_(s, alpha=alpha - rho * float(y @ q))
    return q.neg_()


def line_search(
    evaluate: Callable[[torch.Tensor], tuple[float, torch.Tensor]],
    u: torch.Tensor,
    loss: float,
    direction: torch.Tensor,
    slope: float,
) -> tuple[float, float, torch.Tensor] | None:
    """A step ``t`` along ``direction`` (from ``u``, where the loss is ``loss`` and its
    directional derivative ``slope < 0``), its loss and gradient: the first trial, from
    ``t = 1``, at which the directional derivative is still at most 0 -- on a convex loss the
    loss has then decreased, whatever the rounding of its values -- or the loss has fallen by
    :data:`ARMIJO` times the predicted decrease. A trial past the line's minimum without that
    decrease is followed by the secant step on the directional derivative between 0 and it,
    kept within the middle 80% of the interval; one whose loss overflows, by a tenth of it.
    ``None`` when :data:`LINE_SEARCH_STEPS` trials find no such step."""
    t = 1.0
    for _ in range(LINE_SEARCH_STEPS):
        trial_loss, trial_grad = evaluate(u + t * direction)
        if not math.isfinite(trial_loss):
            t *= 0.1
            continue
        trial_slope = float(trial_grad @ direction)
        if trial_slope <= 0.0 or trial_loss <= loss + ARMIJO * t * slope:
            return t, trial_loss, trial_grad
        secant = t * (-slope) / (trial_slope - slope)  # where the slope's chord crosses 0
        t = min(max(secant, 0.1 * t), 0.9 * t)
    return None
