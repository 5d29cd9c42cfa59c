"""Smooth (kernel / soft-binned) calibration errors, all differentiable in torch.

* :func:`sece` -- SECE of the meta-regularization paper (methods spec §6.3).
* :func:`dece` -- DECE of Meta-Calibration (methods spec §5.1), soft bins + soft accuracy.
* :func:`kde_ece` -- top-label KDE-ECE of Zhang, Kailkhura & Han (2020, "Mix-n-Match").
* :func:`smooth_ece` -- smECE of Błasiok & Nakkiran (2023), as computed by ``relplot.smECE``.

Building blocks :func:`soft_accuracy` and :func:`soft_bin_membership` are plain torch functions.

Gradients flow from every result back to ``pred.scores`` (``pred.confidence`` and
``pred.probs`` keep autograd). Bandwidth *selection* (the Zhang et al. rule's dependence on the
data aside) and every grid index are piecewise constant, so gradients are those of the
estimator at the selected bandwidth / grid cell.

Every core accepts bootstrap ``weights`` (``(B, N)`` multiplicities) and returns ``(B,)``
values equal to the metric evaluated on the resampled data set (each row ``i`` repeated
``w_bi`` times), computed in one batched tensor pass.

Large inputs: SECE's all-pairs kernel is used up to :data:`SECE_EXACT_MAX_N` samples; above
that a grid algorithm (linear binning + FFT convolution) with a documented error bound is used.
KDE-ECE and smECE are defined by grid procedures in their reference code; we reproduce those
grids, so their cost is O(N + G log G) at any N.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.fft
import torch

from selfcal._validation import check_int, check_positive
from selfcal.metrics._api import metric
from selfcal.metrics.binning import Weights, check_n_bins
from selfcal.predictions import Predictions

DECE_EPS = 1e-6
"""Additive smoothing of the soft-bin memberships in the Meta-Calibration code."""

SECE_EXACT_MAX_N = 2048
"""Up to this many samples SECE uses the exact all-pairs kernel (O(N^2) memory and time)."""

SECE_GRID_STEPS_PER_BANDWIDTH = 2048
"""Fast SECE path: grid spacing ``delta = h / 2048`` (unless capped by :data:`SECE_MAX_GRID`)."""

SECE_MAX_GRID = 1 << 22
"""Upper bound on the number of grid points of the fast SECE path."""

SECE_KERNEL_RADIUS = 12.0
"""Fast SECE path: the Gaussian is truncated at ``12 h`` (``exp(-72) < 1e-31``)."""

KDE_GRID = np.linspace(-0.6, 1.6, num=2**14)
"""Zhang et al.'s evaluation / integration grid for KDE-ECE."""

KDE_DENSITY_FLOOR = 1e-6
"""Zhang et al.: grid points where both densities are <= this carry the previous integrand."""

SMECE_DENSITY_EPS = 1e-4
"""relplot adds this to the smoothed density before dividing (``BaseKernelMixin.smooth``)."""


# --------------------------------------------------------------------------- building blocks
def soft_accuracy(probs: torch.Tensor, labels: torch.Tensor, t_a: float = 100.0) -> torch.Tensor:
    """All-pairs soft accuracy (Qin et al. 2010 soft ranking; methods spec §5.1 step 3).

    ``r_ik = 0.5 + sum_l sigmoid(t_a (p_il - p_ik))`` (the ``l = k`` term gives 0.5, so
    ``r_ik = 1 + sum_{l != k} ...``; rank 1 is best) and ``a_i = relu(2 - r_{i, y_i})``:
    about 1 when the true class ranks first, about 0 otherwise. Only the label column
    ``k = y_i`` is needed, so the cost is O(N C). Returns ``(N,)`` float64.
    """
    p = probs.double()
    p_true = p.gather(1, labels.long().unsqueeze(1))
    rank = 0.5 + torch.sigmoid(t_a * (p - p_true)).sum(dim=1)
    return torch.relu(2.0 - rank)


def soft_bin_membership(
    confidence: torch.Tensor, n_bins: int = 15, t_b: float = 0.01, eps: float = DECE_EPS
) -> torch.Tensor:
    """Soft membership ``o_im`` of confidences in ``M`` equal-width bins (DNDT-style soft
    binning, methods spec §5.1 step 1).

    ``h_im = (m c_i - m (m - 1) / (2M)) / t_b`` for ``m = 1..M`` (consecutive logits differ by
    ``(c_i - m/M) / t_b``, so the soft boundaries sit at ``1/M, ..., (M-1)/M``),
    ``o_im = (softmax_m(h_im) + eps) / (1 + (M + 1) eps)``.

    The last step replicates a quirk of the Meta-Calibration code: the normaliser uses
    ``(M + 1) eps`` although ``M`` terms of ``eps`` were added, so rows sum to
    ``(1 + M eps) / (1 + (M + 1) eps)``, slightly below 1. Returns ``(N, M)`` float64.
    """
    check_n_bins(n_bins)
    m = torch.arange(1, n_bins + 1, dtype=torch.float64, device=confidence.device)
    offsets = m * (m - 1) / (2 * n_bins)
    logits = (confidence.double().unsqueeze(1) * m - offsets) / t_b
    return (torch.softmax(logits, dim=1) + eps) / (1 + (n_bins + 1) * eps)


def _rows(weights: Weights, n: int, device: torch.device) -> torch.Tensor:
    """``(B, N)`` multiplicities; one row of ones without bootstrap weights."""
    if weights is None:
        return torch.ones(1, n, dtype=torch.float64, device=device)
    return weights.to(torch.float64)


def _finish(values: torch.Tensor, weights: Weights) -> torch.Tensor:
    return values[0] if weights is None else values


def _linear_bin(
    x: torch.Tensor, start: float, inv_step: float, n_grid: int, mass: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Linear binning of points ``x`` carrying ``mass`` (``(B, N)``) onto the grid
    ``start + g / inv_step``, ``g = 0..n_grid-1``: each point splits its mass between its two
    neighbouring grid points in proportion to proximity. Returns the ``(B, n_grid)`` grid and
    the left index and fraction of each point (reused for interpolation)."""
    pos = (x - start) * inv_step
    left = pos.detach().long().clamp(0, n_grid - 2)  # truncation = floor for pos >= 0
    frac = pos - left
    grid = torch.zeros(mass.shape[0], n_grid, dtype=torch.float64, device=x.device)
    grid = grid.index_add(1, left, mass * (1 - frac)).index_add(1, left + 1, mass * frac)
    return grid, left, frac


def _fft_convolve(signal: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """Full linear convolution along the last axis (``(B, L1)`` with ``(B or 1, L2)``)."""
    n = signal.shape[-1] + kernel.shape[-1] - 1
    n_fft = scipy.fft.next_fast_len(n, real=True)
    spec = torch.fft.rfft(signal, n_fft) * torch.fft.rfft(kernel, n_fft)
    return torch.fft.irfft(spec, n_fft)[..., :n]


def _interp(grid: torch.Tensor, left: torch.Tensor, frac: torch.Tensor) -> torch.Tensor:
    """Linear interpolation of ``(B, G)`` grid values at points given by index and fraction."""
    return grid[:, left] * (1 - frac) + grid[:, left + 1] * frac


# --------------------------------------------------------------------------------- SECE
def _gaussian(d: torch.Tensor, bandwidth: float) -> torch.Tensor:
    return torch.exp(-(d * d) / (2 * bandwidth * bandwidth))


def _sece_sums_exact(z, mass_acc, mass, bandwidth):
    """``sum_j w_j pi_j K(z_i, z_j)`` and ``sum_j w_j K(z_i, z_j)`` over all pairs."""
    kernel = _gaussian(z.unsqueeze(1) - z.unsqueeze(0), bandwidth)  # symmetric (N, N)
    return mass_acc @ kernel, mass @ kernel


def _sece_sums_grid(z, mass_acc, mass, bandwidth):
    """Grid version of :func:`_sece_sums_exact`: linear binning onto a grid of spacing
    ``delta``, FFT convolution with the sampled Gaussian (truncated at 12 h), and linear
    interpolation back to the sample points."""
    lo, hi = float(z.detach().min()), float(z.detach().max())
    delta = bandwidth / SECE_GRID_STEPS_PER_BANDWIDTH
    n_grid = math.floor((hi - lo) / delta) + 2
    if n_grid > SECE_MAX_GRID:
        n_grid = SECE_MAX_GRID
        delta = (hi - lo) / (n_grid - 2)
    radius = math.ceil(SECE_KERNEL_RADIUS * bandwidth / delta)
    taps = torch.arange(-radius, radius + 1, dtype=torch.float64, device=z.device) * delta
    kernel = _gaussian(taps, bandwidth).unsqueeze(0)
    both = torch.cat([mass_acc, mass])
    grid, left, frac = _linear_bin(z, lo, 1.0 / delta, n_grid, both)
    smoothed = _fft_convolve(grid, kernel)[:, radius : radius + n_grid]
    at_points = _interp(smoothed, left, frac)
    b = mass.shape[0]
    return at_points[:b], at_points[b:]


def sece_method(n: int, method: str = "auto") -> str:
    """``"exact"`` or ``"grid"``: the SECE algorithm used for ``n`` samples."""
    if method not in ("auto", "exact", "grid"):
        raise ValueError(f"method must be 'auto', 'exact' or 'grid', got {method!r}")
    if method == "auto":
        return "exact" if n <= SECE_EXACT_MAX_N else "grid"
    return method


@metric(differentiable=True)
def sece(
    pred: Predictions,
    weights: Weights = None,
    *,
    bandwidth: float = 0.01,
    t_a: float = 100.0,
    method: str = "auto",
):
    """Smooth ECE of the meta-regularization paper (methods spec §6.3, eqs. 5-7, 12).

    With top-label confidences ``z_i``, soft accuracies ``pi_i`` (:func:`soft_accuracy`,
    scale ``t_a``) and the Gaussian kernel ``K_ij = exp(-(z_i - z_j)^2 / (2 h^2))``:

        SACC_i = sum_j pi_j K_ij / sum_j K_ij     (j includes i; normalised Nadaraya-Watson)
        SECE   = (1/N) sum_i |SACC_i - z_i|

    Bootstrap weights multiply every sum over ``j`` and the outer mean.

    ``method``: ``"exact"`` (all pairs), ``"grid"``, or ``"auto"`` (exact for
    ``N <= SECE_EXACT_MAX_N``). The grid path bins ``z`` linearly onto a grid of spacing
    ``delta = h/2048`` (at most ``2^22`` points), convolves with the sampled Gaussian by FFT
    and interpolates linearly back to each ``z_i``. Linear interpolation of ``K(u)`` over a
    cell changes a term by a relative ``<= (delta^2/8) |K''(u)/K(u)| = (delta/h)^2 |u^2/h^2 -
    1| / 8``; it happens twice (binning and read-back). Terms with ``|u| > 10 h`` weigh
    ``< e^-50`` against the self term ``K_ii = 1`` of the denominator, so every relevant term
    moves by a relative ``eta <= 2 * 99/8 (delta/h)^2 ~ 25 (delta/h)^2``, and the weighted
    average ``SACC_i`` by ``<= 2 eta ~ 50 (delta/h)^2`` = ``1.2e-5`` at the default spacing
    (measured differences are ~1e-9). FFT round-off adds ``~1e-16 * max density``.
    """
    check_positive("bandwidth", bandwidth)
    z = pred.confidence
    acc = soft_accuracy(pred.probs, pred.require_labels(), t_a)
    w = _rows(weights, pred.n_samples, pred.device)
    sums = _sece_sums_exact if sece_method(pred.n_samples, method) == "exact" else _sece_sums_grid
    numerator, denominator = sums(z, w * acc, w, bandwidth)
    present = w > 0  # rows absent from a resample may sit where the density is ~0
    sacc = numerator / torch.where(present, denominator, torch.ones_like(denominator))
    gap = torch.where(present, (sacc - z).abs(), torch.zeros_like(sacc))
    return _finish((w * gap).sum(1) / w.sum(1), weights)


# --------------------------------------------------------------------------------- DECE
@metric(differentiable=True)
def dece(
    pred: Predictions,
    weights: Weights = None,
    *,
    n_bins: int = 15,
    t_a: float = 100.0,
    t_b: float = 0.01,
):
    """Differentiable ECE of Meta-Calibration (Bohdal et al.; methods spec §5.1).

    ``o_im`` = :func:`soft_bin_membership` of the confidences ``c_i`` (``M = n_bins``,
    temperature ``t_b``), ``a_i`` = :func:`soft_accuracy` (scale ``t_a``), and

        conf_m = sum_i o_im c_i / sum_i o_im,   acc_m = sum_i o_im a_i / sum_i o_im,
        DECE   = sum_m (sum_i o_im / N) |acc_m - conf_m|   (a batch mean)

    computed as the algebraically identical ``sum_m |sum_i o_im (a_i - c_i)| / N``. Bootstrap
    weights multiply every sum over ``i`` and replace ``N`` by the resample size.
    """
    c = pred.confidence
    acc = soft_accuracy(pred.probs, pred.require_labels(), t_a)
    member = soft_bin_membership(c, n_bins, t_b)
    w = _rows(weights, pred.n_samples, pred.device)
    gap_mass = (w * (acc - c)) @ member  # (B, M): sum_i w_i o_im (a_i - c_i)
    return _finish(gap_mass.abs().sum(1) / w.sum(1), weights)


# ------------------------------------------------------------------------------- KDE-ECE
def _kde_bandwidth(c, correct, w):
    """Zhang et al.'s rule: ``std(c | correct) * (2N)^(-1/5)`` (population std over the
    correct predictions, ``N`` all predictions); NaN where undefined."""
    mass = w * correct
    n_correct = mass.sum(1, keepdim=True)
    mean = (mass * c).sum(1, keepdim=True) / n_correct
    var = (mass * (c - mean) ** 2).sum(1) / n_correct.squeeze(1)
    return var.clamp_min(0).sqrt() * (2 * w.sum(1)) ** -0.2


def _mirror(c: torch.Tensor) -> torch.Tensor:
    """Zhang et al.'s reflection: points below 0.5 mirror about 0, the others about 1."""
    return torch.where(c < 0.5, -c, 2 - c)


def _triweight_taps(bandwidth: torch.Tensor, step: float) -> torch.Tensor:
    """KDEpy's unit-variance triweight (support ``3 bw``) sampled at ``k * step``:
    ``35/32 (1 - u^2)^3 / (3 bw)`` with ``u = k step / (3 bw)``; ``(B, 2L+1)``."""
    support = 3 * bandwidth.detach()
    radius = int(torch.floor(support.max() / step).item())
    k = torch.arange(-radius, radius + 1, dtype=torch.float64, device=bandwidth.device)
    u2 = (k * step / (3 * bandwidth.unsqueeze(1))) ** 2
    return torch.where(u2 < 1, (1 - u2).clamp_min(0) ** 3, torch.zeros_like(u2)) * (
        35 / 32 / (3 * bandwidth.unsqueeze(1))
    )


def _kde_on_grid(c, mass, bandwidth, grid):
    """Zhang et al.'s boundary-corrected density on ``grid``: KDE (linearly binned data,
    FFT convolution, as KDEpy's FFTKDE) of the points plus their mirror images, each of
    weight ``mass / (2 sum mass)``, set to 0 outside ``(0, 1)`` and doubled."""
    points = torch.cat([c, _mirror(c)])
    weight = torch.cat([mass, mass], dim=1)
    weight = weight / weight.sum(1, keepdim=True).clamp_min(1e-300)  # no mass: density 0
    step = float(grid[1] - grid[0])
    binned, _, _ = _linear_bin(points, float(grid[0]), 1.0 / step, grid.shape[0], weight)
    taps = _triweight_taps(bandwidth, step)
    radius = (taps.shape[1] - 1) // 2
    density = _fft_convolve(binned, taps)[:, radius : radius + grid.shape[0]]
    inside = (grid > 0) & (grid < 1)
    return torch.where(inside, 2 * density, torch.zeros_like(density))


def _carry_forward(values: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Replace invalid entries by the last valid one to their left (0 if none)."""
    idx = torch.arange(values.shape[1], device=values.device).expand_as(values)
    last = torch.where(valid, idx, torch.full_like(idx, -1)).cummax(dim=1).values
    taken = values.gather(1, last.clamp_min(0))
    return torch.where(last >= 0, taken, torch.zeros_like(taken))


def _kde_integrand(grid, dens_correct, dens_all, accuracy, order):
    """``|x - min(acc * f1(x) / f(x), 1)|^order * f(x)`` with Zhang et al.'s handling of
    low-density points (carry the previous value forward)."""
    valid = torch.maximum(dens_correct, dens_all) > KDE_DENSITY_FLOOR
    safe = torch.where(dens_all > 0, dens_all, torch.ones_like(dens_all))
    ratio = accuracy.unsqueeze(1) * dens_correct / safe
    reliability = torch.where(dens_all > 0, ratio.clamp_max(1.0), torch.ones_like(ratio))
    integrand = (grid - reliability).abs() ** order * dens_all
    return _carry_forward(torch.where(valid, integrand, torch.zeros_like(integrand)), valid)


@metric(differentiable=True)
def kde_ece(
    pred: Predictions,
    weights: Weights = None,
    *,
    bandwidth: float | None = None,
    order: int = 1,
):
    """Top-label KDE-ECE of Zhang, Kailkhura & Han (2020), as in their ``ece_kde_binary``.

    With confidences ``c_i`` and correctness ``y_i``, ``f`` the density of ``c`` and ``f1``
    that of ``c`` among correct predictions (triweight kernels, reflected at 0 and 1),

        KDE-ECE = int_0^1 |x - min(acc f1(x) / f(x), 1)|^order f(x) dx / int_0^1 f(x) dx

    where ``acc`` is the accuracy (so ``acc f1 / f`` estimates ``P(correct | c = x)``).
    Reference-procedure details reproduced:

    * bandwidth ``std(c | correct) (2N)^(-1/5)`` (population std) unless ``bandwidth`` is
      given, in KDEpy's convention: the kernel's standard deviation, i.e. the triweight
      ``35/32 (1 - u^2)^3`` with support ``3 * bandwidth``;
    * reflection: each point below 0.5 is mirrored to ``-c``, each other point to ``2 - c``
      (one image per point); densities are zeroed outside ``(0, 1)`` and doubled;
    * KDEpy FFTKDE evaluation on ``linspace(-0.6, 1.6, 2^14)``: linear binning onto the
      grid and discrete convolution with the kernel sampled at the grid step
      (``dx = 1.34e-4``; this grid *is* the reference estimator, not an approximation of it);
    * grid points where both densities are ``<= 1e-6`` take the previous point's integrand;
    * integrals are trapezoid sums over the grid points in ``[0, 1]``.

    ``order=1`` is the L1 error. Without a correct prediction (or with a zero bandwidth) the
    default bandwidth is undefined: ``ValueError`` (bootstrap resamples get NaN).
    """
    check_int("order", order)
    c = pred.confidence
    correct = pred.correct
    w = _rows(weights, pred.n_samples, pred.device)
    if bandwidth is None:
        bw = _kde_bandwidth(c, correct, w)
    else:
        check_positive("bandwidth", bandwidth)
        bw = torch.full((w.shape[0],), float(bandwidth), dtype=torch.float64, device=c.device)
    ok = torch.isfinite(bw) & (bw > 0)
    if weights is None and not bool(ok.all()):
        raise ValueError(
            "kde_ece: the default bandwidth std(confidence | correct) * (2N)^(-1/5) is zero or "
            "undefined (fewer than two distinct correct confidences); pass bandwidth="
        )
    bw = torch.where(ok, bw, torch.ones_like(bw))
    grid = torch.from_numpy(KDE_GRID).to(c.device)
    dens_correct = _kde_on_grid(c, w * correct, bw, grid)
    dens_all = _kde_on_grid(c, w, bw, grid)
    accuracy = (w * correct).sum(1) / w.sum(1)
    integrand = _kde_integrand(grid, dens_correct, dens_all, accuracy, order)
    inside = (grid >= 0) & (grid <= 1)
    x = grid[inside]
    value = torch.trapezoid(integrand[:, inside], x) / torch.trapezoid(dens_all[:, inside], x)
    value = torch.where(ok, value, torch.full_like(value, float("nan")))
    return _finish(value, weights)


# ------------------------------------------------------------------------------- smECE
def _relplot_sizes(sigma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """relplot's grid sizes for bandwidth ``sigma``: ``G = max(2000, round(20/s)) // 2 + 1``
    smoothing points and ``T = max(round(10/s), 200)`` evaluation points."""
    g = torch.clamp(torch.round(20 / sigma), min=2000).long() // 2 + 1
    t = torch.clamp(torch.round(10 / sigma), min=200).long()
    return g, t


def _np_linspace01(n: int, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(np.linspace(0, 1, n)).to(device)


def _reflected_gaussian_smooth(values: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """relplot's ``ReflectedGaussianKernel.convolve``: grid values (``(B, G)``, G odd) are
    extended by mirror images about both end points (end points not repeated) and convolved
    with ``exp(-(t - 1/2)^2 / (2 s^2)) / (sqrt(2 pi) s)`` sampled at ``t = linspace(0, 1, G)``,
    i.e. a Gaussian truncated at distance 1/2."""
    g = values.shape[1]
    t = _np_linspace01(g, values.device)
    s = sigma.unsqueeze(1)
    kernel = torch.exp(-(t - 0.5) * (t - 0.5) / (2 * s * s)) / (math.sqrt(2 * math.pi) * s)
    flipped = values.flip(1)
    extended = torch.cat([flipped[:, :-1], values, flipped[:, 1:]], dim=1)
    full = _fft_convolve(extended, kernel)
    start = g // 2 + g - 1
    return full[:, start : start + g]


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

    def __init__(self, confidence, residual, w):
        self.confidence, self.residual, self.w = confidence, residual, w
        self._cache: dict[int, torch.Tensor] = {}

    def binned(self, n_grid: int) -> torch.Tensor:
        """``(2B, G)``: binned residual mass (rows ``:B``) and counts (rows ``B:``)."""
        if n_grid not in self._cache:
            mass = torch.cat([self.w * self.residual, self.w])
            grid, _, _ = _linear_bin(self.confidence, 0.0, n_grid - 1, n_grid, mass)
            self._cache[n_grid] = grid
        return self._cache[n_grid]


def _smooth_ece_at(grids: _SmoothEceGrids, sigma: torch.Tensor) -> torch.Tensor:
    """relplot's ``smooth_ece(f, y, sigma)`` for each row's ``sigma``: ``sum_t |r(t)| /
    sum_t (d(t) + 1e-4)`` over ``T`` evaluation points, ``r`` and ``d`` the smoothed residual
    and density (equal to relplot's ``sum |r/(d+eps)| (d+eps) / sum (d+eps)``)."""
    b = sigma.shape[0]
    out = torch.empty(b, dtype=torch.float64, device=sigma.device)
    n_grid, n_eval = _relplot_sizes(sigma.detach())
    keys = torch.stack([n_grid, n_eval], 1)
    for key in torch.unique(keys, dim=0):  # a few distinct grid sizes, not one per row
        rows = (keys == key).all(1).nonzero().squeeze(1)
        g, t = int(key[0]), int(key[1])
        binned = grids.binned(g)
        both = torch.cat([binned[rows], binned[rows + b]])
        smoothed = _reflected_gaussian_smooth(both, torch.cat([sigma[rows], sigma[rows]]))
        at_t = _relplot_interpolate(smoothed, t)
        residual, density = at_t[: rows.shape[0]], at_t[rows.shape[0] :] + SMECE_DENSITY_EPS
        value = (residual / density).abs().mul(density).sum(1) / density.sum(1)
        out = out.index_put((rows,), value)
    return out


def smooth_ece_bandwidth(grids: _SmoothEceGrids, n_rows: int, eps: float, refine: int = 10):
    """relplot's fixed-point bandwidth search (``search_param``): ``sigma = 1`` if ``1 <
    smECE_1``; otherwise ``refine`` bisection steps on ``[0, 1]`` for the smallest ``s`` with
    ``s >= smECE_s`` (and ``s >= eps``), returning the upper end of the final bracket."""
    device = grids.confidence.device
    one = torch.ones(n_rows, dtype=torch.float64, device=device)

    def below_fixed_point(s):
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
):
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
    w = _rows(weights, pred.n_samples, pred.device)
    residual = c - pred.correct
    if bandwidth is None:
        with torch.no_grad():
            search = _SmoothEceGrids(c.detach(), residual.detach(), w)
            sigma = smooth_ece_bandwidth(search, w.shape[0], eps)
    else:
        check_positive("bandwidth", bandwidth)
        sigma = torch.full((w.shape[0],), float(bandwidth), dtype=torch.float64, device=c.device)
    value = _smooth_ece_at(_SmoothEceGrids(c, residual, w), sigma)
    return _finish(value, weights)
