"""SECE, the smooth ECE of the meta-regularization paper (methods §6.3, eqs. 5-7, 12), and
its soft accuracy (Qin et al. 2010 soft ranking; methods §5.1 step 3).

Two algorithms for the same kernel sums: the exact kernel over all pairs (one dense matrix up
to :data:`SECE_EXACT_MAX_N` samples; above that in blocks of sorted confidences, each against
the band of neighbours within the kernel's reach), and a grid (linear binning + FFT
convolution, see :mod:`selfcal.metrics.smooth._grid`) with the error bound documented in
:func:`sece`. ``method="auto"`` takes whichever costs less for the data at hand.
"""

from __future__ import annotations

import math

import torch

from selfcal._validation import check_positive
from selfcal.metrics._api import metric
from selfcal.metrics.binning import Weights
from selfcal.metrics.smooth._grid import (
    fft_convolve,
    finish,
    interp,
    linear_bin,
    next_fast_len,
    rows,
)
from selfcal.predictions import Predictions

SECE_EXACT_MAX_N = 2048
"""Up to this many samples the exact path is one dense ``(N, N)`` kernel matrix (the path a
training minibatch takes); above, it runs in blocks of :data:`SECE_BLOCK` sorted rows."""

SECE_BLOCK = 512
"""Rows per block of the exact path above :data:`SECE_EXACT_MAX_N` samples."""

SECE_GRID_COST_IN_PAIRS = 20.0
"""``method="auto"`` above :data:`SECE_EXACT_MAX_N` samples: the exact path's cost is its
number of kernel pairs within reach, the grid's ``n log2 n`` for its FFT length ``n``. Chosen
when the two paths took equal time at about 26-30 pairs per grid unit on these CPUs, so that
the exact path was taken only where clearly faster; since its kernel blocks are formed in place
it is also 1.2-1.5x faster than the grid at 26-28 (``benchmarks/results/sece.md``, ``python
benchmarks/bench_sece.py``), so 20 errs toward the grid (kept: a new threshold would move
results between the two paths' ~1e-9 of difference)."""

SECE_GRID_STEPS_PER_BANDWIDTH = 2048
"""Grid path: spacing ``delta = h / 2048`` (unless capped by :data:`SECE_MAX_GRID`)."""

SECE_MAX_GRID = 1 << 22
"""Upper bound on the number of grid points of the fast SECE path."""

SECE_KERNEL_RADIUS = 12.0
"""The grid and the blocked exact path truncate the Gaussian at ``12 h`` (``exp(-72) <
1e-31``, below float64 round-off against the self term ``K_ii = 1`` of every denominator)."""


def soft_accuracy(probs: torch.Tensor, labels: torch.Tensor, t_a: float = 100.0) -> torch.Tensor:
    """All-pairs soft accuracy (Qin et al. 2010 soft ranking; methods §5.1 step 3).

    ``r_ik = 0.5 + sum_l sigmoid(t_a (p_il - p_ik))`` (the ``l = k`` term gives 0.5, so
    ``r_ik = 1 + sum_{l != k} ...``; rank 1 is best) and ``a_i = relu(2 - r_{i, y_i})``:
    about 1 when the true class ranks first, about 0 otherwise. Only the label column
    ``k = y_i`` is needed, so the cost is O(N C). Returns ``(N,)`` float64.
    """
    p = probs.double()
    p_true = p.gather(1, labels.long().unsqueeze(1))
    rank = 0.5 + torch.sigmoid(t_a * (p - p_true)).sum(dim=1)
    return torch.relu(2.0 - rank)


def soft_inputs(
    pred: Predictions, weights: Weights, t_a: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What SECE and DECE read: the top-label confidences ``c`` (with autograd), the soft
    accuracies (:func:`soft_accuracy`, scale ``t_a``; in chunks of rows, so that its float64
    ``(N, C)`` temporaries take ``O(chunk)`` memory) and the ``(B, N)`` bootstrap rows."""
    accuracy = pred.map_rows(lambda s, y: soft_accuracy(pred.probs_of(s), y[:, 0], t_a))
    return pred.confidence, accuracy, rows(pred, weights)


def _gaussian(d: torch.Tensor, bandwidth: float) -> torch.Tensor:
    """``exp(-d^2 / (2 h^2))``. Overwrites ``d`` (every caller passes a fresh difference)
    when no gradient flows through it: the same operations, in place -- the blocked exact
    path's kernel blocks are its largest arrays. (``x / (-s)`` equals ``-(x / s)`` bit for
    bit: rounding is symmetric in sign.)"""
    scale = 2 * bandwidth * bandwidth
    if d.requires_grad:
        return torch.exp(-(d * d) / scale)
    return d.mul_(d).div_(-scale).exp_()


def _sums_exact(
    z: torch.Tensor, mass_acc: torch.Tensor, mass: torch.Tensor, bandwidth: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``sum_j w_j pi_j K(z_i, z_j)`` and ``sum_j w_j K(z_i, z_j)`` over all pairs."""
    kernel = _gaussian(z.unsqueeze(1) - z.unsqueeze(0), bandwidth)  # symmetric (N, N)
    return mass_acc @ kernel, mass @ kernel


def _band(z_sorted: torch.Tensor, bandwidth: float) -> list[tuple[int, int, int, int]]:
    """Blocks ``(start, end, lo, hi)`` of :data:`SECE_BLOCK` rows of the sorted confidences and
    the column range ``[lo, hi)`` of every sample within ``12 h`` of one of them."""
    n, reach = z_sorted.shape[0], SECE_KERNEL_RADIUS * bandwidth
    starts = torch.arange(0, n, SECE_BLOCK, device=z_sorted.device)
    ends = (starts + SECE_BLOCK).clamp_max(n)
    lo = torch.searchsorted(z_sorted, z_sorted[starts] - reach)
    hi = torch.searchsorted(z_sorted, z_sorted[ends - 1] + reach, right=True)
    return list(zip(*(t.tolist() for t in (starts, ends, lo, hi))))


def _sums_blocked(
    z: torch.Tensor, mass_acc: torch.Tensor, mass: torch.Tensor, bandwidth: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_sums_exact` without the ``(N, N)`` matrix: the samples sorted by confidence, each
    block of rows against the band of columns within ``12 h`` (the only pairs whose kernel is
    not below round-off), then put back in the input order. Memory O(block x band)."""
    order = torch.argsort(z.detach(), stable=True)
    z_sorted = z[order]
    both = torch.cat([mass_acc, mass])[:, order]
    pieces = [
        both[:, lo:hi] @ _gaussian(z_sorted[a:b, None] - z_sorted[None, lo:hi], bandwidth).T
        for a, b, lo, hi in _band(z_sorted.detach(), bandwidth)
    ]
    sums = torch.cat(pieces, dim=1)[:, torch.argsort(order)]
    return sums[: mass.shape[0]], sums[mass.shape[0] :]


def _grid_shape(lo: float, hi: float, bandwidth: float) -> tuple[int, float, int]:
    """The grid path's point count, spacing and kernel radius (in steps) for confidences in
    ``[lo, hi]``."""
    delta = bandwidth / SECE_GRID_STEPS_PER_BANDWIDTH
    n_grid = math.floor((hi - lo) / delta) + 2
    if n_grid > SECE_MAX_GRID:
        n_grid = SECE_MAX_GRID
        delta = (hi - lo) / (n_grid - 2)
    return n_grid, delta, math.ceil(SECE_KERNEL_RADIUS * bandwidth / delta)


def _sums_grid(
    z: torch.Tensor, mass_acc: torch.Tensor, mass: torch.Tensor, bandwidth: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Grid version of :func:`_sums_exact`: linear binning onto a grid of spacing ``delta``,
    FFT convolution with the sampled Gaussian (truncated at 12 h), and linear interpolation
    back to the sample points."""
    lo, hi = float(z.detach().min()), float(z.detach().max())
    n_grid, delta, radius = _grid_shape(lo, hi, bandwidth)
    taps = torch.arange(-radius, radius + 1, dtype=torch.float64, device=z.device) * delta
    kernel = _gaussian(taps, bandwidth).unsqueeze(0)
    both = torch.cat([mass_acc, mass])
    grid, left, frac = linear_bin(z, lo, 1.0 / delta, n_grid, both)
    smoothed = fft_convolve(grid, kernel)[:, radius : radius + n_grid]
    at_points = interp(smoothed, left, frac)
    b = mass.shape[0]
    return at_points[:b], at_points[b:]


def sece_method(confidence: torch.Tensor, bandwidth: float = 0.01, method: str = "auto") -> str:
    """``"exact"`` or ``"grid"``: the SECE algorithm for these top-label confidences.

    ``"auto"`` is exact up to :data:`SECE_EXACT_MAX_N` samples; above, it compares the exact
    path's kernel pairs within reach with the grid's FFT cost (:data:`SECE_GRID_COST_IN_PAIRS`)
    and takes the cheaper: exact for spread-out confidences, the grid for many samples
    crowded near one value."""
    if method not in ("auto", "exact", "grid"):
        raise ValueError(f"method must be 'auto', 'exact' or 'grid', got {method!r}")
    if method != "auto":
        return method
    if confidence.shape[0] <= SECE_EXACT_MAX_N:
        return "exact"
    pairs, grid_cost = path_costs(confidence.detach().sort().values, bandwidth)
    return "exact" if pairs <= SECE_GRID_COST_IN_PAIRS * grid_cost else "grid"


def path_costs(z_sorted: torch.Tensor, bandwidth: float) -> tuple[int, float]:
    """The two SECE paths' costs for sorted confidences: the blocked exact path's kernel pairs
    within reach, and the grid's ``n log2 n`` for its FFT length ``n``."""
    pairs = sum((b - a) * (hi - lo) for a, b, lo, hi in _band(z_sorted, bandwidth))
    n_grid, _, radius = _grid_shape(float(z_sorted[0]), float(z_sorted[-1]), bandwidth)
    n_fft = next_fast_len(n_grid + 2 * radius)
    return pairs, n_fft * math.log2(n_fft)


@metric(differentiable=True)
def sece(
    pred: Predictions,
    weights: Weights = None,
    *,
    bandwidth: float = 0.01,
    t_a: float = 100.0,
    method: str = "auto",
) -> torch.Tensor:
    """Smooth ECE of the meta-regularization paper (methods §6.3, eqs. 5-7, 12).

    With top-label confidences ``z_i``, soft accuracies ``pi_i`` (:func:`soft_accuracy`,
    scale ``t_a``) and the Gaussian kernel ``K_ij = exp(-(z_i - z_j)^2 / (2 h^2))``:

        SACC_i = sum_j pi_j K_ij / sum_j K_ij     (j includes i; normalised Nadaraya-Watson)
        SECE   = (1/N) sum_i |SACC_i - z_i|

    Bootstrap weights multiply every sum over ``j`` and the outer mean.

    ``method``: ``"exact"`` (all pairs; in blocks of sorted confidences above
    ``SECE_EXACT_MAX_N`` samples, where pairs farther apart than ``12 h`` are skipped: their
    kernel is below round-off), ``"grid"``, or ``"auto"`` (:func:`sece_method`: exact up to
    ``SECE_EXACT_MAX_N``, above that whichever is cheaper for the data). The grid path bins
    ``z`` linearly onto a grid of spacing ``delta = h/2048`` (at most ``2^22`` points),
    convolves with the sampled Gaussian by FFT and interpolates linearly back to each ``z_i``.
    Linear interpolation of ``K(u)`` over a cell changes a term by a relative ``<=
    (delta^2/8) |K''(u)/K(u)| = (delta/h)^2 |u^2/h^2 - 1| / 8``; it happens twice (binning and
    read-back). Terms with ``|u| > 10 h`` weigh ``< e^-50`` against the self term ``K_ii = 1``
    of the denominator, so every relevant term moves by a relative ``eta <= 2 * 99/8
    (delta/h)^2 ~ 25 (delta/h)^2``, and the weighted average ``SACC_i`` by ``<= 2 eta ~ 50
    (delta/h)^2`` = ``1.2e-5`` at the default spacing (measured differences are ~1e-9). FFT
    round-off adds ``~1e-16 * max density``.
    """
    check_positive("bandwidth", bandwidth)
    z, acc, w = soft_inputs(pred, weights, t_a)
    if sece_method(z, bandwidth, method) == "grid":
        sums = _sums_grid
    else:
        sums = _sums_exact if pred.n_samples <= SECE_EXACT_MAX_N else _sums_blocked
    numerator, denominator = sums(z, w * acc, w, bandwidth)
    present = w > 0  # rows absent from a resample may sit where the density is ~0
    sacc = numerator / torch.where(present, denominator, torch.ones_like(denominator))
    gap = torch.where(present, (sacc - z).abs(), torch.zeros_like(sacc))
    return finish((w * gap).sum(1) / w.sum(1), weights)
