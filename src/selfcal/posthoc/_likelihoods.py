"""The objectives of the large structured fits, for :func:`~selfcal.posthoc._lbfgs.lbfgs`: the
penalised NLLs of :class:`~selfcal.posthoc._solvers.SharedFeatures` (matrix-type maps) and
:class:`~selfcal.posthoc._solvers.ClassFeatures` (vector-type maps), evaluated chunk by chunk of
rows with their products in the features' own dtype, and the preconditioners L-BFGS runs in.

* **Memory.** Only the features ``x`` ``(N, C)`` are held whole; the logits, probabilities
  and residuals of a chunk of :data:`CHUNK_ELEMENTS` values at a time, and the gradient
  (the parameters' size) in float64.
* **Precision.** Given float32 features (the fit of float32 scores: what networks output)
  the matrix products run in float32 -- three times faster than float64 on these CPUs -- and
  their sums are accumulated across chunks in float64, as are the loss and every gradient;
  float64 features keep every operation in float64. The float32 loss values carry rounding of
  about ``5e-9`` and the gradients about ``1e-8``, which is why
  :func:`~selfcal.posthoc._lbfgs.line_search` decides on gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from selfcal.posthoc._lbfgs import Preconditioner

CHUNK_ELEMENTS = 1 << 21
"""Values of one chunk of rows' ``(rows, C)`` logits (16 MiB in float64)."""


def chunks(n: int, c: int) -> list[slice]:
    """Consecutive row slices of about :data:`CHUNK_ELEMENTS` values of ``C`` a row."""
    rows = max(1, CHUNK_ELEMENTS // c)
    return [slice(start, start + rows) for start in range(0, n, rows)]


def nll_residual(u: torch.Tensor, y: torch.Tensor) -> tuple[float, torch.Tensor]:
    """The summed NLL of ``softmax(u)`` (accumulated in float64) and the residual
    ``r = softmax(u) - onehot(y)`` (in ``u``'s dtype, overwriting ``u``)."""
    true = u.gather(1, y.unsqueeze(1)).squeeze(1)
    top = u.amax(dim=1, keepdim=True)
    e = u.sub_(top).exp_()
    total = e.sum(dim=1, keepdim=True)
    lse = (top + total.log()).squeeze(1)
    loss = float((lse - true).sum(dtype=torch.float64))
    r = e.div_(total)
    r[torch.arange(u.shape[0], device=u.device), y] -= 1.0
    return loss, r


@dataclass(frozen=True)
class AffineLikelihood:
    """Mean NLL of ``softmax(x W^T + b)``, ``W = I + Delta``, plus ``sum penalty * [Delta,
    b]^2``: :class:`~selfcal.posthoc._solvers.SharedFeatures` with features ``[x, 1]`` and
    offset ``x``, whose ``theta`` (``[Delta, b]``, ``(C, C + 1)`` flattened by rows) it takes.
    Gradient: ``(1/N) [r^T x, sum_i r_i] + 2 penalty * theta``."""

    x: torch.Tensor
    y: torch.Tensor
    penalty: torch.Tensor

    def _map(self, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``W^T`` and ``b`` in the products' dtype."""
        c = self.x.shape[1]
        t = theta.view(c, c + 1)
        eye = torch.eye(c, dtype=t.dtype, device=t.device)
        return (t[:, :c] + eye).T.to(self.x.dtype), t[:, c].to(self.x.dtype)

    def value_and_gradient(self, theta: torch.Tensor) -> tuple[float, torch.Tensor]:
        n, c = self.x.shape
        w_t, b = self._map(theta)
        loss = 0.0
        grad = torch.zeros(c, c + 1, dtype=torch.float64, device=self.x.device)
        for rows in chunks(n, c):
            x = self.x[rows]
            part, r = nll_residual(torch.addmm(b, x, w_t), self.y[rows])
            loss += part
            grad[:, :c] += (r.T @ x).double()
            grad[:, c] += r.sum(0, dtype=torch.float64)
        t = theta.view(c, c + 1)
        grad = grad / n + 2 * self.penalty * t
        return loss / n + float((self.penalty * t * t).sum()), grad.view(-1)

    def preconditioner(self, theta: torch.Tensor) -> Preconditioner:
        """Per-class blocks of the Hessian at ``theta``, ``(1/N) sum_i a_ik x~_i x~_i^T +
        2 diag(penalty_k)`` with ``a_ik = p_ik (1 - p_ik)`` and ``x~ = [x, 1]``, as their exact
        diagonal plus the outer product of the weighted mean feature
        (:meth:`~selfcal.posthoc._lbfgs.Preconditioner.from_moments`): on the shared CIFAR-100
        sets this took 94 gradients where the exact blocks of each class's 128 heaviest rows
        took 111 and the diagonal alone 204 -- the rows of a class share one dominant
        direction, their many log-probabilities at the mixing floor."""
        n, c = self.x.shape
        w_t, b = self._map(theta)
        moments = torch.zeros(3, c, c + 1, dtype=torch.float64, device=self.x.device)
        for rows in chunks(n, c):
            x = self.x[rows]
            p = torch.softmax(torch.addmm(b, x, w_t), dim=1)
            a = p * (1 - p)
            total = a.sum(0, dtype=torch.float64)
            moments[0, :, c] += total
            moments[1, :, :c] += (a.T @ x).double()
            moments[2, :, :c] += (a.T @ x.square()).double()
        moments /= n
        moments[1:, :, c] = moments[0, :, c]  # the bias feature 1
        total, first, second = moments[0, :, c], moments[1], moments[2]
        return Preconditioner.from_moments(first, second, total, 2 * self.penalty)


@dataclass(frozen=True)
class VectorLikelihood:
    """Mean NLL of ``softmax(x * (1 + v) + b)`` plus ``sum penalty * [v, b]^2``:
    :class:`~selfcal.posthoc._solvers.ClassFeatures`, whose ``theta = [v, b]`` it takes.
    Gradient: ``(1/N) [sum_i r_i * x_i, sum_i r_i] + 2 penalty * theta``."""

    x: torch.Tensor
    y: torch.Tensor
    penalty: torch.Tensor

    def _map(self, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.x.shape[1]
        return (1.0 + theta[:c]).to(self.x.dtype), theta[c:].to(self.x.dtype)

    def value_and_gradient(self, theta: torch.Tensor) -> tuple[float, torch.Tensor]:
        n, c = self.x.shape
        w, b = self._map(theta)
        loss = 0.0
        grad = torch.zeros(2 * c, dtype=torch.float64, device=self.x.device)
        for rows in chunks(n, c):
            x = self.x[rows]
            part, r = nll_residual(torch.addcmul(b, x, w), self.y[rows])
            loss += part
            grad[:c] += (r * x).sum(0, dtype=torch.float64)
            grad[c:] += r.sum(0, dtype=torch.float64)
        grad = grad / n + 2 * self.penalty * theta
        return loss / n + float((self.penalty * theta * theta).sum()), grad

    def preconditioner(self, theta: torch.Tensor) -> Preconditioner:
        """The exact ``2 x 2`` Hessian block of each class's ``(v_k, b_k)`` at ``theta``,
        ``(1/N) sum_i a_ik [x_ik, 1] [x_ik, 1]^T`` (``a_ik = p_ik (1 - p_ik)``) plus the
        penalty's ``2 diag(penalty)`` (:meth:`~selfcal.posthoc._lbfgs.Preconditioner.from_moments`,
        exact for two features of which one is constant)."""
        n, c = self.x.shape
        w, b = self._map(theta)
        moments = torch.zeros(3, c, dtype=torch.float64, device=self.x.device)
        for rows in chunks(n, c):
            x = self.x[rows]
            p = torch.softmax(torch.addcmul(b, x, w), dim=1)
            a = p * (1 - p)
            for j, term in enumerate((a, a * x, a * x.square())):
                moments[j] += term.sum(0, dtype=torch.float64)
        total, first, second = moments / n
        first, second = torch.stack([first, total], 1), torch.stack([second, total], 1)
        ridge = 2 * self.penalty.view(2, c).T
        order = torch.stack([torch.arange(c), torch.arange(c, 2 * c)], 1).view(-1)
        return Preconditioner.from_moments(first, second, total, ridge, order.to(self.x.device))
