"""Matrix-free linear solvers for the implicit hypergradient: ``H x = b`` with only the
products ``v -> H v`` (Hessian-vector products), on parameter-dict vectors.

Both run a fixed number of iterations (no tolerance test), so they contain no
data-dependent control flow and work under ``torch.func.vmap``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from selfcal._validation import check_int, check_nonnegative, check_positive
from selfcal.bilevel._tree import Tree, tree_add, tree_dot, tree_map, tree_scale

MatVec = Callable[[Tree], Tree]


def _safe_divide(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """``numerator / denominator``, and 0 where the denominator is 0 (CG after exact
    convergence has ``r = 0`` and ``p^T H p = 0``; 0/0 would poison the iterate)."""
    nonzero = denominator != 0
    return torch.where(nonzero, numerator / torch.where(nonzero, denominator, 1.0), 0.0)


@dataclass(frozen=True)
class ConjugateGradient:
    """Conjugate gradient on ``(H + damping I) x = b`` from ``x_0 = 0``, ``iterations`` steps.

    Exact for symmetric positive-definite ``H`` after ``dim`` steps; at the inner solution of
    a non-convex problem ``H`` may be indefinite, and ``damping > 0`` (a Tikhonov shift) keeps
    the system positive definite at the price of a bias towards ``b / damping``.
    """

    iterations: int = 20
    damping: float = 0.0

    def __post_init__(self) -> None:
        check_int("iterations", self.iterations)
        check_nonnegative("damping", self.damping)

    def __call__(self, matvec: MatVec, b: Tree) -> Tree:
        def apply(v: Tree) -> Tree:
            return tree_add(matvec(v), v, self.damping) if self.damping else matvec(v)

        x = tree_map(torch.zeros_like, b)
        residual, direction = b, b
        rr = tree_dot(residual, residual)
        for _ in range(self.iterations):
            h_direction = apply(direction)
            step = _safe_divide(rr, tree_dot(direction, h_direction))
            x = tree_add(x, direction, step)
            residual = tree_add(residual, h_direction, -step)
            rr_new = tree_dot(residual, residual)
            direction = tree_add(residual, direction, _safe_divide(rr_new, rr))
            rr = rr_new
        return x


@dataclass(frozen=True)
class Neumann:
    """Truncated Neumann series ``x = alpha sum_{k=0}^{K} (I - alpha H)^k b``, ``K =
    iterations``.

    It converges to ``H^{-1} b`` when every eigenvalue of ``H`` lies in ``(0, 2/alpha)``;
    truncated, it equals the hypergradient of ``K`` gradient-descent steps of size ``alpha``
    linearised at the solution (Lorraine et al., 2020), so ``alpha`` is naturally the inner
    learning rate. There is no safe default for ``alpha``: it must be below ``2 / lambda_max``.
    """

    alpha: float
    iterations: int = 20

    def __post_init__(self) -> None:
        check_int("iterations", self.iterations, minimum=0)
        check_positive("alpha", self.alpha)

    def __call__(self, matvec: MatVec, b: Tree) -> Tree:
        term = tree_scale(b, self.alpha)
        total = term
        for _ in range(self.iterations):
            term = tree_add(term, matvec(term), -self.alpha)
            total = tree_add(total, term)
        return total
