"""DECE, the differentiable ECE of Meta-Calibration (Bohdal et al.; methods §5.1): soft
bin membership (DNDT-style soft binning, with the Meta-Calibration code's smoothing quirk) and
the soft accuracy of :mod:`selfcal.metrics.smooth.kernel`.
"""

from __future__ import annotations

import torch

from selfcal.metrics._api import metric
from selfcal.metrics.binning import Weights, check_n_bins
from selfcal.metrics.smooth._grid import finish
from selfcal.metrics.smooth.kernel import soft_inputs
from selfcal.predictions import Predictions

DECE_EPS = 1e-6
"""Additive smoothing of the soft-bin memberships in the Meta-Calibration code."""


def soft_bin_membership(
    confidence: torch.Tensor, n_bins: int = 15, t_b: float = 0.01, eps: float = DECE_EPS
) -> torch.Tensor:
    """Soft membership ``o_im`` of confidences in ``M`` equal-width bins (DNDT-style soft
    binning, methods §5.1 step 1).

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


@metric(differentiable=True, takes_bins=True)
def dece(
    pred: Predictions,
    weights: Weights = None,
    *,
    n_bins: int = 15,
    t_a: float = 100.0,
    t_b: float = 0.01,
) -> torch.Tensor:
    """Differentiable ECE of Meta-Calibration (Bohdal et al.; methods §5.1).

    ``o_im`` = :func:`soft_bin_membership` of the confidences ``c_i`` (``M = n_bins``,
    temperature ``t_b``), ``a_i`` = :func:`~selfcal.metrics.smooth.kernel.soft_accuracy` (scale
    ``t_a``), and

        conf_m = sum_i o_im c_i / sum_i o_im,   acc_m = sum_i o_im a_i / sum_i o_im,
        DECE   = sum_m (sum_i o_im / N) |acc_m - conf_m|   (a batch mean)

    computed as the algebraically identical ``sum_m |sum_i o_im (a_i - c_i)| / N``. Bootstrap
    weights multiply every sum over ``i`` and replace ``N`` by the resample size.
    """
    c, acc, w = soft_inputs(pred, weights, t_a)
    member = soft_bin_membership(c, n_bins, t_b)
    gap_mass = (w * (acc - c)) @ member  # (B, M): sum_i w_i o_im (a_i - c_i)
    return finish(gap_mass.abs().sum(1) / w.sum(1), weights)
