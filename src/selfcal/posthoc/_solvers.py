"""The Newton solver of the likelihood-fitted calibrators: a damped Newton iteration on exact
float64 derivatives, for parameter vectors small enough to form and factor the Hessian (the
large fits use :mod:`selfcal.posthoc._lbfgs` on the objectives of
:mod:`selfcal.posthoc._likelihoods`), and the warning every solver gives when it stops at its
iteration cap.

The objectives (multinomial logistic regressions on fixed features, plus a quadratic penalty)
are convex; their derivatives are written out rather than taken by autograd:

* :class:`SharedFeatures` -- ``u_i = o_i + Theta x_i`` with ``Theta`` ``(C, D)``, the same
  features ``x_i`` for every class and a fixed offset ``o_i`` (matrix scaling and Dirichlet
  calibration: ``x = [s, 1]`` with ``s`` the temperature-scaled logits or log-probabilities,
  ``o = s``, so ``Theta = [Delta, b]`` is the departure from the identity);
* :class:`ClassFeatures` -- ``u_ik = z_ik + v_k z_ik + b_k`` (vector scaling: ``v`` the
  departure of each class's scale from 1).

Both add a ridge penalty ``sum_j c_j theta_j^2`` with fixed coefficients ``c_j >= 0``.

With ``r_i = p_i - e_{y_i}`` the mean NLL ``L = (1/N) sum_i [logsumexp(u_i) - u_{i y_i}]`` has
gradient ``(1/N) sum_i r_i (x) x_i`` and Hessian ``(1/N) sum_i (diag p_i - p_i p_i^T) (x)
x_i x_i^T`` (Kronecker products; for vector scaling only the entries of class ``k``'s own
features appear). Adding the same vector to every class's parameters leaves the softmax
unchanged, so the Hessian of ``L`` is singular along those directions unless the penalty
covers them; the Newton step is taken with those exact null directions filled in (they are
orthogonal to the gradient), so the iterate never drifts along them -- it keeps the gauge of
its start (for vector scaling: ``sum_k b_k = 0``).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from selfcal.exceptions import CalibrationNotConverged

MAX_ITER = 100
"""Default iteration cap of the Newton solver (L-BFGS: ``LBFGS_ITER_FACTOR`` times more,
:mod:`selfcal.posthoc._structured_scaling`)."""

NEWTON_TOL = 1e-20
"""Newton stops once half the squared Newton decrement, ``g^T H^-1 g / 2`` (the predicted
distance to the minimum), is below ``NEWTON_TOL * L`` -- relative to the loss, so that an
infimum approached only as the parameters run off to infinity (separable data, no penalty:
the decrement then stays a fixed fraction of the loss) never counts as converged."""

ROUNDING_TOL = 1e-12
"""... or once a step no longer changes the loss beyond float64 rounding while the decrement
is below ``ROUNDING_TOL * L`` (the derivatives' own rounding floor)."""

ARMIJO = 0.25
"""Sufficient-decrease fraction of the backtracking line search."""


class Objective(Protocol):
    """A smooth convex loss of a flat float64 parameter vector."""

    def value(self, theta: torch.Tensor) -> float:
        """The loss."""
        ...

    def derivatives(self, theta: torch.Tensor) -> tuple[float, torch.Tensor, torch.Tensor]:
        """The loss, its gradient and its Hessian."""
        ...

    def value_and_gradient(self, theta: torch.Tensor) -> tuple[float, torch.Tensor]:
        """The loss and its gradient."""
        ...

    def null_directions(self) -> torch.Tensor | None:
        """``(P, G)`` orthonormal directions along which the loss is exactly constant."""
        ...


@dataclass(frozen=True)
class Solution:
    """Where a solver stopped."""

    theta: torch.Tensor
    converged: bool
    iterations: int
    loss: float


def warn_not_converged(name: str, solution: Solution, hint: str) -> None:
    """Warn with :class:`~selfcal.exceptions.CalibrationNotConverged` if ``solution`` did not
    converge."""
    if not solution.converged:
        warnings.warn(
            f"{name} stopped after {solution.iterations} iterations without converging "
            f"(loss {solution.loss:.6g}); {hint}",
            CalibrationNotConverged,
            stacklevel=4,
        )


def newton_direction(
    hessian: torch.Tensor, gradient: torch.Tensor, null: torch.Tensor | None
) -> torch.Tensor:
    """``-H^-1 g`` with the exact null directions ``n`` of ``H`` filled in
    (``H + s n n^T``, ``s`` the mean diagonal; ``g`` is orthogonal to them, so the step has no
    component along them), through :func:`ridged_cholesky` (a ridge only where the Hessian is
    still not positive definite: rank-deficient features)."""
    h = hessian
    scale = float(h.diagonal().abs().mean()) or 1.0
    if null is not None:
        h = h + scale * (null @ null.T)
    factor = ridged_cholesky(h.unsqueeze(0))
    if factor is None:  # pragma: no cover - a NaN Hessian
        return -gradient / scale
    return -torch.cholesky_solve(gradient.unsqueeze(1), factor[0]).squeeze(1)


def ridged_cholesky(blocks: torch.Tensor) -> torch.Tensor | None:
    """Cholesky factors of the symmetric ``(G, B, B)`` ``blocks``, each with a ridge
    ``delta s I`` (``s`` the mean absolute diagonal of all blocks) added only if one is not
    positive definite, ``delta`` raised from ``1e-12`` by factors of 100 until the
    factorisation succeeds; ``None`` if it never does (a NaN block)."""
    eye = torch.eye(blocks.shape[-1], dtype=blocks.dtype, device=blocks.device)
    scale = float(blocks.diagonal(dim1=1, dim2=2).abs().mean()) or 1.0
    ridge = 0.0
    while ridge <= 1e6:
        factor, info = torch.linalg.cholesky_ex(blocks + ridge * scale * eye if ridge else blocks)
        if not bool(info.any()):
            return factor
        ridge = 1e-12 if ridge == 0.0 else ridge * 100.0
    return None


def newton(objective: Objective, theta: torch.Tensor, max_iter: int) -> Solution:
    """Damped Newton on a convex loss: the step of :func:`newton_direction`, halved until the
    loss falls by at least :data:`ARMIJO` times the predicted decrease (with a slack of a
    few float64 roundings of the loss, so that steps at the rounding floor are taken).
    Converged when the decrement criterion of :data:`NEWTON_TOL` / :data:`ROUNDING_TOL`
    holds; otherwise it stops after ``max_iter`` steps (or when no step decreases the loss)
    with ``converged=False``."""
    null = objective.null_directions()
    loss, grad, hess = objective.derivatives(theta)
    for iteration in range(max_iter + 1):
        step = newton_direction(hess, grad, null)
        decrement = float(-(grad @ step))
        if not math.isfinite(decrement) or decrement / 2 <= NEWTON_TOL * abs(loss):
            return Solution(theta, math.isfinite(decrement), iteration, loss)
        if iteration == max_iter:
            break
        slack = 8 * np.finfo(np.float64).eps * max(abs(loss), 1.0)
        rate, trial = 1.0, math.inf
        while rate > 1e-12:
            trial = objective.value(theta + rate * step)
            if trial <= loss - ARMIJO * rate * decrement + slack:
                break
            rate *= 0.5
        else:  # no step decreases the loss: at the rounding floor, or stuck
            converged = decrement / 2 <= ROUNDING_TOL * abs(loss)
            return Solution(theta, converged, iteration, loss)
        at_floor = abs(trial - loss) <= slack
        theta = theta + rate * step
        loss, grad, hess = objective.derivatives(theta)
        if at_floor and decrement / 2 <= ROUNDING_TOL * abs(loss):
            return Solution(theta, True, iteration + 1, loss)
    return Solution(theta, False, max_iter, loss)


def _nll_parts(u: torch.Tensor, y: torch.Tensor) -> tuple[float, torch.Tensor]:
    """Mean NLL of ``softmax(u)`` and the residual ``r = softmax(u) - onehot(y)``: one
    ``exp`` of ``u - max u`` gives both (``torch.logsumexp`` costs four times more in
    float64 here)."""
    top = u.amax(dim=1, keepdim=True)
    e = torch.exp(u - top)
    total = e.sum(dim=1, keepdim=True)
    lse = (top + total.log()).squeeze(1)
    loss = float((lse - u.gather(1, y.unsqueeze(1)).squeeze(1)).mean())
    r = e.div_(total)
    r[torch.arange(u.shape[0], device=u.device), y] -= 1.0
    return loss, r


def _nll(u: torch.Tensor, y: torch.Tensor) -> float:
    lse = torch.logsumexp(u, dim=1)
    return float((lse - u.gather(1, y.unsqueeze(1)).squeeze(1)).mean())


@dataclass(frozen=True)
class SharedFeatures:
    """Mean NLL of ``softmax(O + X Theta^T)`` plus ``sum penalty * Theta^2``; ``theta`` is
    ``Theta`` ``(C, D)`` flattened by rows, ``offset`` ``O`` ``(N, C)`` (``None``: 0).
    ``penalty`` ``(C, D)`` holds the coefficient of each squared entry; a feature column whose
    coefficients are all 0 is a null direction (adding a constant to that column of every row
    changes nothing)."""

    x: torch.Tensor
    y: torch.Tensor
    penalty: torch.Tensor
    offset: torch.Tensor | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return self.penalty.shape[0], self.x.shape[1]

    def _theta(self, theta: torch.Tensor) -> torch.Tensor:
        return theta.reshape(self.shape)

    def _logits(self, t: torch.Tensor) -> torch.Tensor:
        u = self.x @ t.T
        return u if self.offset is None else u + self.offset

    def value(self, theta: torch.Tensor) -> float:
        t = self._theta(theta)
        return _nll(self._logits(t), self.y) + float((self.penalty * t * t).sum())

    def value_and_gradient(self, theta: torch.Tensor) -> tuple[float, torch.Tensor]:
        t = self._theta(theta)
        loss, r = _nll_parts(self._logits(t), self.y)
        grad = r.T @ self.x / self.x.shape[0] + 2 * self.penalty * t
        return loss + float((self.penalty * t * t).sum()), grad.reshape(-1)

    def derivatives(self, theta: torch.Tensor) -> tuple[float, torch.Tensor, torch.Tensor]:
        t = self._theta(theta)
        n = self.x.shape[0]
        c, d = self.shape
        u = self._logits(t)
        loss, r = _nll_parts(u, self.y)
        p = r.clone()
        p[torch.arange(n, device=u.device), self.y] += 1.0
        grad = r.T @ self.x / n + 2 * self.penalty * t
        px = p.unsqueeze(2) * self.x.unsqueeze(1)  # (N, C, D): p_ik x_ia
        blocks = torch.einsum("nka,nb->kab", px, self.x)  # sum_i p_ik x_ia x_ib
        flat = px.reshape(n, c * d)
        hess = -(flat.T @ flat)
        view = hess.view(c, d, c, d)
        for k in range(c):
            view[k, :, k, :] += blocks[k]
        hess /= n
        hess.diagonal().add_(2 * self.penalty.reshape(-1))
        return loss + float((self.penalty * t * t).sum()), grad.reshape(-1), hess

    def null_directions(self) -> torch.Tensor | None:
        c, d = self.shape
        free = [a for a in range(d) if not bool((self.penalty[:, a] != 0).any())]
        if not free:
            return None
        out = torch.zeros(c * d, len(free), dtype=self.x.dtype, device=self.x.device)
        for j, a in enumerate(free):
            out[torch.arange(c, device=out.device) * d + a, j] = 1.0 / math.sqrt(c)
        return out


@dataclass(frozen=True)
class ClassFeatures:
    """Mean NLL of ``softmax(z + v * z + b)`` (vector scaling) plus ``sum penalty * theta^2``;
    ``theta = [v, b]``, ``penalty`` ``(2C,)``. Adding a constant to every ``b_k`` changes
    nothing: that is a null direction when the biases are not penalised."""

    z: torch.Tensor
    y: torch.Tensor
    penalty: torch.Tensor

    def _logits(self, theta: torch.Tensor) -> torch.Tensor:
        c = self.z.shape[1]
        return self.z * (1.0 + theta[:c]) + theta[c:]

    def _ridge(self, theta: torch.Tensor) -> float:
        return float((self.penalty * theta * theta).sum())

    def value(self, theta: torch.Tensor) -> float:
        return _nll(self._logits(theta), self.y) + self._ridge(theta)

    def value_and_gradient(self, theta: torch.Tensor) -> tuple[float, torch.Tensor]:
        loss, r = _nll_parts(self._logits(theta), self.y)
        n = self.z.shape[0]
        grad = torch.cat([(r * self.z).sum(0) / n, r.sum(0) / n]) + 2 * self.penalty * theta
        return loss + self._ridge(theta), grad

    def derivatives(self, theta: torch.Tensor) -> tuple[float, torch.Tensor, torch.Tensor]:
        """``H_ab = diag(mean_i p_ik x^a_ik x^b_ik) - (Q^a)^T Q^b / N`` for ``a, b`` in
        ``{v, b}``, with ``x^v = z``, ``x^b = 1`` and ``Q^a = p * x^a``, plus the penalty's
        ``2 diag(penalty)``."""
        u = self._logits(theta)
        n = self.z.shape[0]
        loss, r = _nll_parts(u, self.y)
        p = r.clone()
        p[torch.arange(n, device=u.device), self.y] += 1.0
        grad = torch.cat([(r * self.z).sum(0) / n, r.sum(0) / n]) + 2 * self.penalty * theta
        pz = p * self.z
        h_ww = torch.diag((pz * self.z).sum(0)) - pz.T @ pz
        h_wb = torch.diag(pz.sum(0)) - pz.T @ p
        h_bb = torch.diag(p.sum(0)) - p.T @ p
        hess = torch.cat([torch.cat([h_ww, h_wb], 1), torch.cat([h_wb.T, h_bb], 1)], 0) / n
        hess.diagonal().add_(2 * self.penalty)
        return loss + self._ridge(theta), grad, hess

    def null_directions(self) -> torch.Tensor | None:
        c = self.z.shape[1]
        if bool((self.penalty[c:] != 0).any()):
            return None
        out = torch.zeros(2 * c, 1, dtype=self.z.dtype, device=self.z.device)
        out[c:, 0] = 1.0 / math.sqrt(c)
        return out


@dataclass(frozen=True)
class Logistic:
    """Mean binary cross-entropy ``mean_i [softplus(u_i) - t_i u_i]`` of ``u = X theta``
    (targets ``t`` in ``[0, 1]``): gradient ``X^T (sigmoid(u) - t) / N``, Hessian
    ``X^T diag(sigmoid(u) (1 - sigmoid(u))) X / N``."""

    x: torch.Tensor
    t: torch.Tensor

    def value(self, theta: torch.Tensor) -> float:
        u = self.x @ theta
        return float((torch.nn.functional.softplus(u) - self.t * u).mean())

    def value_and_gradient(self, theta: torch.Tensor) -> tuple[float, torch.Tensor]:
        u = self.x @ theta
        loss = float((torch.nn.functional.softplus(u) - self.t * u).mean())
        return loss, self.x.T @ (torch.sigmoid(u) - self.t) / self.x.shape[0]

    def derivatives(self, theta: torch.Tensor) -> tuple[float, torch.Tensor, torch.Tensor]:
        u = self.x @ theta
        s = torch.sigmoid(u)
        n = self.x.shape[0]
        loss = float((torch.nn.functional.softplus(u) - self.t * u).mean())
        hess = (self.x.T * (s * (1 - s))) @ self.x / n
        return loss, self.x.T @ (s - self.t) / n, hess

    def null_directions(self) -> None:
        return None


def platt_targets(y: torch.Tensor) -> torch.Tensor:
    """Platt's (1999) out-of-sample targets for 0/1 labels ``y`` (float64):
    ``(N_+ + 1) / (N_+ + 2)`` for the positives, ``1 / (N_- + 2)`` for the negatives."""
    n_pos = float(y.sum())
    n_neg = y.shape[0] - n_pos
    # float64 targets (a where() of two Python floats would be float32)
    return torch.full_like(y, 1 / (n_neg + 2)).masked_fill(y > 0, (n_pos + 1) / (n_pos + 2))
