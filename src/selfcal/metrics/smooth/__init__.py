"""Smooth (kernel / soft-binned) calibration errors, all differentiable in torch: one module per
estimator, each replicating its own reference.

* :func:`sece` -- SECE of the meta-regularization paper (methods §6.3);
  :mod:`selfcal.metrics.smooth.kernel`.
* :func:`dece` -- DECE of Meta-Calibration (methods §5.1), soft bins + soft accuracy;
  :mod:`selfcal.metrics.smooth.soft_binning`.
* :func:`kde_ece` -- top-label KDE-ECE of Zhang, Kailkhura & Han (2020, "Mix-n-Match");
  :mod:`selfcal.metrics.smooth.kde`.
* :func:`smooth_ece` -- smECE of Błasiok & Nakkiran (2023), as computed by ``relplot.smECE``;
  :mod:`selfcal.metrics.smooth.smece`.

Building blocks :func:`soft_accuracy` and :func:`soft_bin_membership` are plain torch functions;
the grid helpers the estimators share (linear binning, FFT convolution, interpolation, bootstrap
rows) live in :mod:`selfcal.metrics.smooth._grid`.

Gradients flow from every result back to ``pred.scores`` (``pred.confidence`` and
``pred.probs`` keep autograd). Bandwidth *selection* (the Zhang et al. rule's dependence on the
data aside) and every grid index are piecewise constant, so gradients are those of the
estimator at the selected bandwidth / grid cell.

Every core accepts bootstrap ``weights`` (``(B, N)`` multiplicities) and returns ``(B,)``
values equal to the metric evaluated on the resampled data set (each row ``i`` repeated
``w_bi`` times), computed in one batched tensor pass.

Large inputs: SECE's exact kernel sums run over all pairs as one matrix up to
:data:`SECE_EXACT_MAX_N` samples and in blocks of sorted confidences above; where that would
cost more than a grid algorithm (linear binning + FFT convolution, with a documented error
bound) -- many samples crowded near one confidence -- the grid is used (:func:`sece_method`).
KDE-ECE and smECE are defined by grid procedures in their reference code; we reproduce those
grids, so their cost is O(N + G log G) at any N.
"""

from selfcal.metrics.smooth.kde import KDE_DENSITY_FLOOR, KDE_GRID, kde_ece
from selfcal.metrics.smooth.kernel import (
    SECE_EXACT_MAX_N,
    SECE_GRID_STEPS_PER_BANDWIDTH,
    SECE_KERNEL_RADIUS,
    SECE_MAX_GRID,
    sece,
    sece_method,
    soft_accuracy,
)
from selfcal.metrics.smooth.smece import SMECE_DENSITY_EPS, smooth_ece, smooth_ece_bandwidth
from selfcal.metrics.smooth.soft_binning import DECE_EPS, dece, soft_bin_membership

__all__ = [
    "DECE_EPS",
    "KDE_DENSITY_FLOOR",
    "KDE_GRID",
    "SECE_EXACT_MAX_N",
    "SECE_GRID_STEPS_PER_BANDWIDTH",
    "SECE_KERNEL_RADIUS",
    "SECE_MAX_GRID",
    "SMECE_DENSITY_EPS",
    "dece",
    "kde_ece",
    "sece",
    "sece_method",
    "smooth_ece",
    "smooth_ece_bandwidth",
    "soft_accuracy",
    "soft_bin_membership",
]
