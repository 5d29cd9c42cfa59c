"""The grid helpers the smooth estimators share (:mod:`selfcal.metrics.smooth._grid`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from selfcal.metrics.smooth._grid import (
    Spectrum,
    fft_convolve,
    finish,
    fixed_bandwidth,
    interp,
    linear_bin,
    next_fast_len,
    rows,
)
from selfcal.predictions import Predictions


def test_next_fast_len_is_scipys_for_real_transforms():
    """Our 5-smooth length is scipy's ``next_fast_len(n, real=True)`` (which it replaces to
    spare every command scipy.fft's import), so every FFT runs at the same length as before."""
    scipy_fft = pytest.importorskip("scipy.fft")
    n = np.concatenate([np.arange(1, 20_001), np.arange(20_001, 3_000_000, 997)])
    ours = np.array([next_fast_len(int(k)) for k in n])
    theirs = np.array([scipy_fft.next_fast_len(int(k), real=True) for k in n])
    np.testing.assert_array_equal(ours, theirs)


def test_linear_binning_keeps_mass_and_first_moment():
    """Each point splits its mass between its two neighbours by proximity, so the binned grid
    has the points' total mass and mean position (rows ``B`` binned independently)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(200, generator=gen, dtype=torch.float64)
    mass = torch.rand(3, 200, generator=gen, dtype=torch.float64)
    start, n_grid = -0.1, 57
    inv_step = (n_grid - 1) / 1.2
    grid, left, frac = linear_bin(x, start, inv_step, n_grid, mass)
    points = start + torch.arange(n_grid, dtype=torch.float64) / inv_step
    torch.testing.assert_close(grid.sum(1), mass.sum(1), rtol=1e-13, atol=0)
    torch.testing.assert_close(grid @ points, mass @ x, rtol=1e-12, atol=0)
    torch.testing.assert_close(points[left] + frac / inv_step, x, rtol=0, atol=1e-14)


def test_linear_binning_in_place_equals_out_of_place_bit_for_bit():
    """The in-place accumulation gives exactly the grid (and gradients) of the out-of-place
    ``index_add`` it replaced, duplicates of a grid point included."""
    gen = torch.Generator().manual_seed(1)
    x = torch.cat([torch.rand(300, generator=gen, dtype=torch.float64), torch.full((5,), 0.5)])
    x.requires_grad_(True)
    mass = torch.rand(4, 305, generator=gen, dtype=torch.float64, requires_grad=True)
    grid, _, _ = linear_bin(x, 0.0, 40.0, 41, mass)
    pos = x * 40.0
    left = pos.detach().long().clamp(0, 39)
    frac = pos - left
    want = torch.zeros(4, 41, dtype=torch.float64)
    want = want.index_add(1, left, mass * (1 - frac)).index_add(1, left + 1, mass * frac)
    assert torch.equal(grid, want)
    weights = torch.rand(4, 41, generator=gen, dtype=torch.float64)
    got_grads = torch.autograd.grad((grid * weights).sum(), (x, mass))
    want_grads = torch.autograd.grad((want * weights).sum(), (x, mass))
    for got, expected in zip(got_grads, want_grads, strict=True):
        assert torch.equal(got, expected)


def test_interpolation_reads_a_linear_function_back_exactly():
    x = torch.tensor([0.0, 0.13, 0.5, 0.999], dtype=torch.float64)
    _, left, frac = linear_bin(x, 0.0, 10.0, 11, torch.ones(1, 4, dtype=torch.float64))
    values = (2 + 3 * torch.arange(11, dtype=torch.float64) / 10).unsqueeze(0)
    torch.testing.assert_close(interp(values, left, frac)[0], 2 + 3 * x, rtol=0, atol=1e-14)


def test_fft_convolution_is_the_full_linear_convolution():
    rng = np.random.default_rng(1)
    signal, kernel = rng.normal(size=(2, 40)), rng.normal(size=(1, 9))
    got = fft_convolve(torch.from_numpy(signal), torch.from_numpy(kernel)).numpy()
    want = np.stack([np.convolve(row, kernel[0]) for row in signal])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("grad", [False, True])
def test_fft_convolution_in_place_equals_out_of_place_bit_for_bit(grad):
    """Without autograd the spectra are multiplied in place: exactly the out-of-place result;
    with autograd (or a kernel with more rows than the signal) out of place, as before."""
    import scipy.fft

    gen = torch.Generator().manual_seed(2)
    signal = torch.rand(6, 300, generator=gen, dtype=torch.float64, requires_grad=grad)
    kernel = torch.rand(1, 41, generator=gen, dtype=torch.float64)
    n_fft = scipy.fft.next_fast_len(340, real=True)

    def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        spec = torch.fft.rfft(a, n_fft) * torch.fft.rfft(b, n_fft)
        return torch.fft.irfft(spec, n_fft)[..., :340]

    assert torch.equal(fft_convolve(signal, kernel), reference(signal, kernel))
    wide = kernel.expand(3, 41)  # more rows than the signal: the product broadcasts
    assert torch.equal(fft_convolve(signal[:1], wide), reference(signal[:1], wide))


def test_rows_finish_and_fixed_bandwidth():
    pred = Predictions.from_logits(np.zeros((5, 3)), np.zeros(5, dtype=int))
    ones = rows(pred, None)
    assert ones.shape == (1, 5) and ones.dtype == torch.float64 and bool((ones == 1).all())
    assert finish(torch.tensor([0.25]), None).ndim == 0
    weights = torch.arange(10).reshape(2, 5)
    assert rows(pred, weights).dtype == torch.float64
    assert finish(torch.tensor([0.25, 0.5]), weights).shape == (2,)
    assert fixed_bandwidth(0.05, 3, pred.device).tolist() == [0.05] * 3
    with pytest.raises(ValueError, match="bandwidth"):
        fixed_bandwidth(0.0, 3, pred.device)


def test_a_kernel_transformed_once_convolves_bit_for_bit_as_each_time():
    """KDE-ECE convolves two densities with the same kernels: transformed once
    (``Spectrum.of(kernel, L1)``, the same FFT length), the same bits as each time."""
    gen = torch.Generator().manual_seed(3)
    signal = torch.rand(4, 500, generator=gen, dtype=torch.float64)
    kernel = torch.rand(4, 61, generator=gen, dtype=torch.float64)
    once = Spectrum.of(kernel, signal.shape[-1])
    got = Spectrum.of(signal, kernel.shape[-1]).convolve(once)
    assert torch.equal(got, fft_convolve(signal, kernel))
    assert got.shape == (4, 500 + 61 - 1)
