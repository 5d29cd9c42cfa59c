"""What the smooth estimators share: bootstrap rows, a user-given bandwidth per row, and the
grid algorithm -- linear binning of weighted points onto a regular grid, FFT convolution with a
sampled kernel and linear interpolation back to the points.

Linear binning: a point at ``x`` between grid points ``g_l <= x < g_{l+1}`` gives its mass to
both in proportion to proximity (``1 - f`` and ``f`` with ``f = (x - g_l) / step``); a
convolution of the binned masses with a kernel sampled at the grid step is then a kernel sum
over all points, at O(G log G) instead of O(N^2).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from selfcal._validation import check_positive
from selfcal.metrics.binning import Weights
from selfcal.predictions import Predictions


def rows(pred: Predictions, weights: Weights) -> torch.Tensor:
    """``(B, N)`` multiplicities; one row of ones without bootstrap weights."""
    if weights is None:
        return torch.ones(1, pred.n_samples, dtype=torch.float64, device=pred.device)
    return weights.to(torch.float64)


def finish(values: torch.Tensor, weights: Weights) -> torch.Tensor:
    """The ``(B,)`` per-row results, or the scalar of the one row without bootstrap weights."""
    return values[0] if weights is None else values


def fixed_bandwidth(bandwidth: float, n_rows: int, device: torch.device) -> torch.Tensor:
    """A bandwidth the caller gave (checked positive), the same for each of ``n_rows`` rows."""
    check_positive("bandwidth", bandwidth)
    return torch.full((n_rows,), float(bandwidth), dtype=torch.float64, device=device)


def linear_bin(
    x: torch.Tensor, start: float, inv_step: float, n_grid: int, mass: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Linear binning of points ``x`` carrying ``mass`` (``(B, N)``) onto the grid
    ``start + g / inv_step``, ``g = 0..n_grid-1``: each point splits its mass between its two
    neighbouring grid points in proportion to proximity. Returns the ``(B, n_grid)`` grid and
    the left index and fraction of each point (reused for interpolation).

    The masses are added in place into the fresh zero grid: the same sums in the same order as
    out-of-place ``index_add`` (bit for bit, gradients included), without two copies of a grid
    that for SECE's bootstrap holds ``2B x ~10^5`` values. On other devices than the CPU,
    ``index_add_`` adds with atomics in an order that changes from run to run; the sums are
    then ``index_put_(accumulate=True)``'s, which sorts the indices and adds each grid point's
    masses in one order (deterministic; a few ulps from the CPU's sums)."""
    pos = (x - start) * inv_step
    left = pos.detach().long().clamp(0, n_grid - 2)  # truncation = floor for pos >= 0
    frac = pos - left
    grid = torch.zeros(mass.shape[0], n_grid, dtype=torch.float64, device=x.device)
    if x.device.type == "cpu":
        grid.index_add_(1, left, mass * (1 - frac)).index_add_(1, left + 1, mass * frac)
    else:
        row = torch.arange(mass.shape[0], device=x.device).unsqueeze(1)
        grid.index_put_((row, left), mass * (1 - frac), accumulate=True)
        grid.index_put_((row, left + 1), mass * frac, accumulate=True)
    return grid, left, frac


def next_fast_len(n: int) -> int:
    """The smallest 5-smooth number ``2^a 3^b 5^c >= n``: a length at which a real FFT is fast,
    the same as ``scipy.fft.next_fast_len(n, real=True)`` (a test checks it up to 3 * 10^6),
    written here because importing ``scipy.fft`` costs about 0.3 s of every command that
    computes a metric."""
    best = 1 << max(n - 1, 0).bit_length()  # the next power of two
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:  # p35 * 2^k with the least k reaching n
            best = min(best, p35 << (-(-n // p35) - 1).bit_length())
            p35 *= 3
        p5 *= 5
    return best


def _fits_into(small: torch.Size, big: torch.Size) -> bool:
    """Whether ``small`` broadcasts to ``big`` unchanged (``torch.broadcast_shapes`` would
    import sympy, about a second)."""
    pairs = zip(reversed(small), reversed(big))
    return len(small) <= len(big) and all(s in (1, b) for s, b in pairs)


@dataclass(frozen=True)
class Spectrum:
    """Real FFTs of signals ``(..., L1)``, zero-padded for the full linear convolution with
    kernels of length ``L2``: ``n_fft`` (5-smooth, at least ``length = L1 + L2 - 1``) points.
    A signal convolved with many kernels (smECE's bandwidth search) is transformed once."""

    values: torch.Tensor
    n_fft: int
    length: int

    @classmethod
    def of(cls, signal: torch.Tensor, kernel_length: int) -> Spectrum:
        length = signal.shape[-1] + kernel_length - 1
        n_fft = next_fast_len(length)
        return cls(torch.fft.rfft(signal, n_fft), n_fft, length)

    def rows(self, index: torch.Tensor) -> Spectrum:
        """The spectra of the signals ``index`` selects along the first axis (a copy)."""
        return Spectrum(self.values[index], self.n_fft, self.length)

    def convolve(self, kernel: torch.Tensor | Spectrum) -> torch.Tensor:
        """The full linear convolutions (``(..., length)``) with ``kernel`` (``(..., L2)``,
        leading dimensions broadcasting to the signals'), or with kernels already transformed
        (``Spectrum.of(kernel, L1)``: the same ``n_fft``). Consumes this spectrum: without an
        autograd graph it is multiplied by the kernel's in place (the same products, bit for
        bit), saving a copy of the largest array."""
        spec = self.values
        if isinstance(kernel, Spectrum):
            kernel_spec = kernel.values
        else:
            kernel_spec = torch.fft.rfft(kernel, self.n_fft)
        in_place = not (spec.requires_grad or kernel_spec.requires_grad) and _fits_into(
            kernel_spec.shape, spec.shape
        )
        spec = spec.mul_(kernel_spec) if in_place else spec * kernel_spec
        return torch.fft.irfft(spec, self.n_fft)[..., : self.length]


def fft_convolve(signal: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """Full linear convolution along the last axis of ``signal`` (``(..., L1)``) with a
    ``kernel`` (``(..., L2)``) whose leading dimensions broadcast to the signal's
    (:class:`Spectrum`)."""
    return Spectrum.of(signal, kernel.shape[-1]).convolve(kernel)


def interp(grid: torch.Tensor, left: torch.Tensor, frac: torch.Tensor) -> torch.Tensor:
    """Linear interpolation of ``(B, G)`` grid values at points given by index and fraction."""
    return grid[:, left] * (1 - frac) + grid[:, left + 1] * frac
