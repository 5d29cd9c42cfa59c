"""Top-label KDE-ECE of Zhang, Kailkhura & Han (2020, "Mix-n-Match"), as their
``ece_kde_binary`` computes it with KDEpy's ``FFTKDE``: triweight kernel densities, reflected
at 0 and 1, evaluated on their fixed grid (:data:`KDE_GRID`) by linear binning and FFT
convolution (:mod:`selfcal.metrics.smooth._grid`).
"""

from __future__ import annotations

import numpy as np
import torch

from selfcal._validation import check_int
from selfcal.metrics._api import metric
from selfcal.metrics.binning import Weights
from selfcal.metrics.smooth._grid import Spectrum, finish, fixed_bandwidth, linear_bin, rows
from selfcal.predictions import Predictions

KDE_GRID = np.linspace(-0.6, 1.6, num=2**14)
"""Zhang et al.'s evaluation / integration grid for KDE-ECE."""

KDE_STEP = float(KDE_GRID[1] - KDE_GRID[0])
"""The grid's step, ``2.2 / (2^14 - 1) = 1.34e-4``: the smallest bandwidth the estimator
resolves. Below it the kernel is one grid point, and the reference procedure's carrying of
the integrand across empty grid points returns values far above 1 (113.99 for confidences
``0.7 + 1e-6 randn(100)``): ``kde_ece`` refuses such a bandwidth instead."""

KDE_DENSITY_FLOOR = 1e-6
"""Zhang et al.: grid points where both densities are <= this carry the previous integrand."""


def _kde_bandwidth(c: torch.Tensor, correct: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
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


def _kde_on_grid(
    c: torch.Tensor, masses: tuple[torch.Tensor, ...], bandwidth: torch.Tensor, grid: torch.Tensor
) -> list[torch.Tensor]:
    """Zhang et al.'s boundary-corrected densities on ``grid`` (``(B, G)``), one per
    ``(B, N)`` mass of ``masses`` (row ``b`` with ``bandwidth[b]``): KDE (linearly binned
    data, FFT convolution, as KDEpy's FFTKDE) of the points plus their mirror images, each of
    weight ``mass / (2 sum mass)``, set to 0 outside ``(0, 1)`` and doubled. The densities
    share one transform of the kernels."""
    points = torch.cat([c, _mirror(c)])
    step = float(grid[1] - grid[0])
    taps = _triweight_taps(bandwidth, step)
    radius = (taps.shape[1] - 1) // 2
    kernel = Spectrum.of(taps, grid.shape[0])
    inside = (grid > 0) & (grid < 1)
    densities = []
    for mass in masses:
        weight = torch.cat([mass, mass], dim=1)
        weight = weight / weight.sum(1, keepdim=True).clamp_min(1e-300)  # no mass: density 0
        binned, _, _ = linear_bin(points, float(grid[0]), 1.0 / step, grid.shape[0], weight)
        density = Spectrum.of(binned, taps.shape[1]).convolve(kernel)
        density = density[:, radius : radius + grid.shape[0]]
        densities.append(torch.where(inside, 2 * density, torch.zeros_like(density)))
    return densities


def _carry_forward(values: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Replace invalid entries by the last valid one to their left (0 if none)."""
    idx = torch.arange(values.shape[1], device=values.device).expand_as(values)
    last = torch.where(valid, idx, torch.full_like(idx, -1)).cummax(dim=1).values
    taken = values.gather(1, last.clamp_min(0))
    return torch.where(last >= 0, taken, torch.zeros_like(taken))


def _kde_integrand(
    grid: torch.Tensor,
    dens_correct: torch.Tensor,
    dens_all: torch.Tensor,
    accuracy: torch.Tensor,
    order: int,
) -> torch.Tensor:
    """``|x - min(acc * f1(x) / f(x), 1)|^order * f(x)`` with Zhang et al.'s handling of
    low-density points (carry the previous value forward)."""
    valid = torch.maximum(dens_correct, dens_all) > KDE_DENSITY_FLOOR
    safe = torch.where(dens_all > 0, dens_all, torch.ones_like(dens_all))
    ratio = accuracy.unsqueeze(1) * dens_correct / safe
    reliability = torch.where(dens_all > 0, ratio.clamp_max(1.0), torch.ones_like(ratio))
    integrand = (grid - reliability).abs() ** order * dens_all
    return _carry_forward(torch.where(valid, integrand, torch.zeros_like(integrand)), valid)


def _bandwidth_problem(bw: float, default: bool) -> str:
    """The one-line error for a bandwidth the estimator cannot use."""
    if default:
        what = "the default bandwidth std(confidence | correct) * (2N)^(-1/5)"
        cause = (
            "undefined (no correct prediction)"
            if not np.isfinite(bw)
            else f"{bw:.3g}, below the estimator's grid step {KDE_STEP:.3g} (the correct "
            "predictions' confidences barely differ)"
        )
        return f"kde_ece: {what} is {cause}; pass a bandwidth of at least {KDE_STEP:.2g}"
    return f"kde_ece: bandwidth={bw:.3g} is below the estimator's grid step {KDE_STEP:.3g}"


def _carried_problem(value: float, bw: float) -> str:
    """The one-line error for an estimate the reference grid cannot resolve."""
    return (
        f"kde_ece: the estimate is {value:.3g}, above its bound 1: the bandwidth {bw:.3g} spans "
        f"{bw / KDE_STEP:.1f} grid steps, so the density falls to zero within a step and the "
        "reference procedure's carried-forward integrand dominates; pass a larger bandwidth"
    )


@metric(differentiable=True)
def kde_ece(
    pred: Predictions, weights: Weights = None, *, bandwidth: float | None = None, order: int = 1
) -> torch.Tensor:
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

    ``order=1`` is the L1 error. Without a correct prediction the default bandwidth is
    undefined, and one below the grid step (:data:`KDE_STEP`: confidences that barely differ)
    is not resolved: ``ValueError`` (bootstrap resamples get NaN). Nor is a bandwidth of a few
    grid steps whose carried-forward integrand (the rule above, after a density that falls to
    zero within a step) lifts the estimate above its bound 1, which no ``|x - r(x)|^order``
    can reach: ``ValueError`` (NaN), never a value above 1.
    """
    check_int("order", order)
    c = pred.confidence
    correct = pred.correct
    w = rows(pred, weights)
    if bandwidth is None:
        bw = _kde_bandwidth(c, correct, w)
    else:
        bw = fixed_bandwidth(bandwidth, w.shape[0], c.device)
    ok = torch.isfinite(bw) & (bw >= KDE_STEP)
    if weights is None and not bool(ok.all()):
        raise ValueError(_bandwidth_problem(float(bw[0]), bandwidth is None))
    bw = torch.where(ok, bw, torch.ones_like(bw))
    grid = torch.from_numpy(KDE_GRID).to(c.device)
    # Only [0, 1] is integrated, and the grid points left of it carry nothing forward (their
    # densities are zeroed), so the integrand is formed there alone: the same numbers.
    inside = (grid >= 0) & (grid <= 1)
    x = grid[inside]
    dens_correct, dens_all = (d[:, inside] for d in _kde_on_grid(c, (w * correct, w), bw, grid))
    accuracy = (w * correct).sum(1) / w.sum(1)
    integrand = _kde_integrand(x, dens_correct, dens_all, accuracy, order)
    value = torch.trapezoid(integrand, x) / torch.trapezoid(dens_all, x)
    unresolved = value > 1  # only the carried integrand exceeds the bound of |x - r(x)|^order
    if weights is None and bool(ok.all()) and bool(unresolved.any()):
        raise ValueError(_carried_problem(float(value[0]), float(bw[0])))
    value = torch.where(ok & ~unresolved, value, torch.full_like(value, float("nan")))
    return finish(value, weights)
