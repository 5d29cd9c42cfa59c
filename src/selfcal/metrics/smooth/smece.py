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
from selfcal.metrics.smooth._grid import (
    Spectrum,
    finish,
    fixed_bandwidth,
    linear_bin,
    rows,
)
from selfcal.predictions import Predictions

SMECE_DENSITY_EPS = 1e-4
"""relplot adds this to the smoothed density before dividing (``BaseKernelMixin.smooth``)."""

SMECE_SPECTRUM_CACHE_BYTES = 2**28
"""Most bytes of grid spectra one bandwidth search keeps (256 MiB: at 201 bootstrap rows, the
default grid's spectra take 12 MiB; only bandwidths below 0.01 need larger grids)."""


def _relplot_sizes(sigma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """relplot's grid sizes for bandwidth ``sigma``: ``G = max(2000, round(20/s)) // 2 + 1``
    smoothing points and ``T = max(round(10/s), 200)`` evaluation points."""
    g = torch.clamp(torch.round(20 / sigma), min=2000).long() // 2 + 1
    t = torch.clamp(torch.round(10 / sigma), min=200).long()
    return g, t


def _np_linspace01(n: int, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(np.linspace(0, 1, n)).to(device)


def _reflected(values: torch.Tensor) -> torch.Tensor:
    """Grid values (``(..., G)``) extended by their mirror images about both end points (end
    points not repeated): ``(..., 3G - 2)``."""
    flipped = values.flip(-1)
    return torch.cat([flipped[..., :-1], values, flipped[..., 1:]], dim=-1)


def _relplot_kernel(g: int, sigma: torch.Tensor) -> torch.Tensor:
    """``(B, G)``: ``exp(-(t - 1/2)^2 / (2 s^2)) / (sqrt(2 pi) s)`` at ``t = linspace(0, 1,
    G)`` for each row's ``s = sigma[b]``, i.e. a Gaussian truncated at distance 1/2."""
    t = _np_linspace01(g, sigma.device)
    s = sigma.unsqueeze(1)
    return torch.exp(-(t - 0.5) * (t - 0.5) / (2 * s * s)) / (math.sqrt(2 * math.pi) * s)


def _reflected_gaussian_smooth(spectrum: Spectrum, g: int, sigma: torch.Tensor) -> torch.Tensor:
    """relplot's ``ReflectedGaussianKernel.convolve``: the grid values (``(..., B, G)``, G odd;
    row ``b`` with width ``sigma[b]``) whose :func:`_reflected` extensions ``spectrum`` holds,
    convolved with :func:`_relplot_kernel` and cut back to the ``G`` points."""
    full = spectrum.convolve(_relplot_kernel(g, sigma))
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
    """Linearly binned residuals ``c - y`` and counts on relplot's grids, as the spectra of
    their :func:`_reflected` extensions (what the smoothing convolution needs). Without
    autograd -- the bandwidth search, which smooths the same grids with about ten bandwidths --
    the spectra of a grid size that every row needs are kept (up to
    :data:`SMECE_SPECTRUM_CACHE_BYTES`): every bandwidth of at least 0.01 uses relplot's
    smallest grid."""

    def __init__(self, confidence: torch.Tensor, residual: torch.Tensor, w: torch.Tensor) -> None:
        self.confidence, self.residual, self.w = confidence, residual, w
        self._cache: dict[int, Spectrum] = {}

    def _spectra(self, n_grid: int, rows: torch.Tensor | None) -> Spectrum:
        """``(2K, F)``: spectra of the reflected binned residual masses of rows ``rows``
        (``None``: all ``B``) and then of their counts."""
        w = self.w if rows is None else self.w[rows]
        mass = torch.cat([w * self.residual, w])
        grid, _, _ = linear_bin(self.confidence, 0.0, n_grid - 1, n_grid, mass)
        return Spectrum.of(_reflected(grid), n_grid)

    def spectrum(self, n_grid: int, rows: torch.Tensor) -> Spectrum:
        """``(2, K, F)``: the residual-mass (first) and count (second) spectra of rows
        ``rows`` (``(K,)``, sorted) on the grid of ``n_grid`` points; kept when every row
        needs that grid, no gradient is being taken and they fit the budget."""
        b, k = self.w.shape[0], rows.shape[0]
        cached = self._cache.get(n_grid)
        if cached is None and k == b and not torch.is_grad_enabled():
            whole = self._spectra(n_grid, None)
            kept = sum(s.values.nbytes for s in self._cache.values())
            if kept + whole.values.nbytes > SMECE_SPECTRUM_CACHE_BYTES:
                return Spectrum(whole.values.view(2, k, -1), whole.n_fft, whole.length)
            cached = self._cache[n_grid] = whole
        if cached is None:
            spectrum = self._spectra(n_grid, rows)
        else:  # a copy: the convolution consumes it
            spectrum = cached.rows(torch.cat([rows, rows + b]))
        return Spectrum(spectrum.values.view(2, k, -1), spectrum.n_fft, spectrum.length)


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
        spectrum = grids.spectrum(g, group)  # residual mass, counts
        smoothed = _reflected_gaussian_smooth(spectrum, g, sigma[group]).reshape(2 * k, -1)
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
