"""SmoothECE (smECE) of Błasiok & Nakkiran (2023), as ``relplot.smECE`` computes it: the
reflected-Gaussian kernel smoothing of the residuals on relplot's grids, and relplot's
fixed-point search for the bandwidth (:func:`smooth_ece_bandwidth`).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from selfcal.metrics._api import metric
from selfcal.metrics.binning import Weights
from selfcal.metrics.smooth._grid import fft_convolve, finish, fixed_bandwidth, linear_bin, rows
from selfcal.predictions import Predictions

SMECE_DENSITY_EPS = 1e-4
"""relplot adds this to the smoothed density before dividing (``BaseKernelMixin.smooth``)."""


def _relplot_sizes(sigma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """relplot's grid sizes for bandwidth ``sigma``: ``G = max(2000, round(20/s)) // 2 + 1``
    smoothing points and ``T = max(round(10/s), 200)`` evaluation points."""
    g = torch.clamp(torch.round(20 / sigma), min=2000).long() // 2 + 1
    t = torch.clamp(torch.round(10 / sigma), min=200).long()
    return g, t


def _np_linspace01(n: int, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(np.linspace(0, 1, n)).to(device)


def _reflected_gaussian_smooth(values: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """relplot's ``ReflectedGaussianKernel.convolve``: grid values (``(..., B, G)``, G odd; row
    ``b`` with width ``s = sigma[b]``) are extended by mirror images about both end points (end
    points not repeated) and convolved with ``exp(-(t - 1/2)^2 / (2 s^2)) / (sqrt(2 pi) s)``
    sampled at ``t = linspace(0, 1, G)``, i.e. a Gaussian truncated at distance 1/2."""
    g = values.shape[-1]
    t = _np_linspace01(g, values.device)
    s = sigma.unsqueeze(1)
    kernel = torch.exp(-(t - 0.5) * (t - 0.5) / (2 * s * s)) / (math.sqrt(2 * math.pi) * s)
    flipped = values.flip(-1)
    extended = torch.cat([flipped[..., :-1], values, flipped[..., 1:]], dim=-1)
    full = fft_convolve(extended, kernel)
    start = g // 2 + g - 1
    return full[..., start : start + g]


def _relplot_interpolate(grid_values: torch.Tensor, n_eval: int) -> torch.Tensor:
    """relplot's ``interpolate`` of grid values at ``linspace(0, 1, n_eval)``."""
    g = grid_values.shape[1]
    t = _np_linspace01(n_eval, grid_values.device)
    bucket = 1 / (g - 1)
    idx = (t * (g - 1)).long().clamp(0, g - 2)
    residual = (t - idx * bucket) / bucket
    return grid_values[:, idx] * (1 - residual) + grid_values[:, idx + 1] * residual


class _SmoothEceGrids:
    """Linearly binned residuals ``c - y`` and counts on relplot's grids, cached per size."""

    def __init__(self, confidence: torch.Tensor, residual: torch.Tensor, w: torch.Tensor) -> None:
        self.confidence, self.residual, self.w = confidence, residual, w
        self._cache: dict[int, torch.Tensor] = {}

    def binned(self, n_grid: int) -> torch.Tensor:
        """``(2B, G)``: binned residual mass (rows ``:B``) and counts (rows ``B:``)."""
        if n_grid not in self._cache:
            mass = torch.cat([self.w * self.residual, self.w])
            grid, _, _ = linear_bin(self.confidence, 0.0, n_grid - 1, n_grid, mass)
            self._cache[n_grid] = grid
        return self._cache[n_grid]


def _smooth_ece_at(grids: _SmoothEceGrids, sigma: torch.Tensor) -> torch.Tensor:
    """relplot's ``smooth_ece(f, y, sigma)`` for each row's ``sigma``: ``sum_t |r(t)| /
    sum_t (d(t) + 1e-4)`` over ``T`` evaluation points, ``r`` and ``d`` the smoothed residual
    and density (equal to relplot's ``sum |r/(d+eps)| (d+eps) / sum (d+eps)``)."""
    b = sigma.shape[0]
    out = torch.empty(b, dtype=torch.float64, device=sigma.device)
    n_grid, n_eval = _relplot_sizes(sigma.detach())
    for g in torch.unique(n_grid).tolist():  # one smoothing pass per grid size (a few)
        group = (n_grid == g).nonzero().squeeze(1)
        k = group.shape[0]
        binned = grids.binned(g)
        both = torch.stack([binned[group], binned[group + b]])  # residual mass, counts
        smoothed = _reflected_gaussian_smooth(both, sigma[group]).reshape(2 * k, -1)
        for t in torch.unique(n_eval[group]).tolist():  # interpolation per evaluation size
            sub = (n_eval[group] == t).nonzero().squeeze(1)
            at_t = _relplot_interpolate(smoothed[torch.cat([sub, sub + k])], t)
            residual, density = at_t[: sub.shape[0]], at_t[sub.shape[0] :] + SMECE_DENSITY_EPS
            value = (residual / density).abs().mul(density).sum(1) / density.sum(1)
            out = out.index_put((group[sub],), value)
    return out


def smooth_ece_bandwidth(
    grids: _SmoothEceGrids, n_rows: int, eps: float, refine: int = 10
) -> torch.Tensor:
    """relplot's fixed-point bandwidth search (``search_param``): ``sigma = 1`` if ``1 <
    smECE_1``; otherwise ``refine`` bisection steps on ``[0, 1]`` for the smallest ``s`` with
    ``s >= smECE_s`` (and ``s >= eps``), returning the upper end of the final bracket."""
    device = grids.confidence.device
    one = torch.ones(n_rows, dtype=torch.float64, device=device)

    def below_fixed_point(s: torch.Tensor) -> torch.Tensor:
        return (s < eps) | (s < _smooth_ece_at(grids, s))

    hi, lo = one.clone(), torch.zeros_like(one)
    for _ in range(refine):
        mid = (hi + lo) / 2
        below = below_fixed_point(mid)
        lo = torch.where(below, mid, lo)
        hi = torch.where(below, hi, mid)
    return torch.where(below_fixed_point(one), one, hi)


@metric(differentiable=True)
def smooth_ece(
    pred: Predictions,
    weights: Weights = None,
    *,
    bandwidth: float | None = None,
    eps: float = 0.001,
) -> torch.Tensor:
    """SmoothECE (Błasiok & Nakkiran 2023) of the top-label confidence, as ``relplot.smECE``.

    With confidences ``c_i``, correctness ``y_i`` and residuals ``r_i = c_i - y_i``, the
    kernel-smoothed residual and density on ``[0, 1]`` (Gaussian of width ``sigma``,
    reflected at 0 and 1) are ``r_hat(t) = sum_i r_i K(t, c_i)`` and ``d(t) = sum_i K(t,
    c_i)``, and

        smECE_sigma = int |r_hat(t)| dt / int d(t) dt.

    relplot's discretisation is reproduced exactly (it *defines* the number): linear binning
    onto ``G = max(2000, round(20/sigma)) // 2 + 1`` points of ``[0, 1]``, discrete
    reflected convolution with the Gaussian sampled at the grid step and truncated at
    distance 1/2, linear interpolation to ``T = max(round(10/sigma), 200)`` points, ``1e-4``
    added to the density, and sums over those points.

    ``bandwidth=None`` (default) selects ``sigma`` as relplot does: the fixed point
    ``sigma = smECE_sigma`` located by 10 bisection steps (``sigma = 1`` if ``1 <
    smECE_1``, never below ``eps``); see :func:`smooth_ece_bandwidth`. The search is
    piecewise constant (no gradient); gradients are those of ``smECE_sigma`` at the selected
    ``sigma``. Each resample of bootstrap ``weights`` searches its own ``sigma``.
    """
    c = pred.confidence
    w = rows(pred, weights)
    residual = c - pred.correct
    if bandwidth is None:
        with torch.no_grad():
            search = _SmoothEceGrids(c.detach(), residual.detach(), w)
            sigma = smooth_ece_bandwidth(search, w.shape[0], eps)
    else:
        sigma = fixed_bandwidth(bandwidth, w.shape[0], c.device)
    value = _smooth_ece_at(_SmoothEceGrids(c, residual, w), sigma)
    return finish(value, weights)
