"""Binned calibration errors: ECE (L1 / L2), MCE, AdaECE (equal-mass), classwise ECE.

All read the one binning core (:mod:`selfcal.metrics.binning`), which also holds their bin-edge
rules and bin helpers (:func:`~selfcal.metrics.binning.top_label_bins`,
:func:`~selfcal.metrics.binning.classwise_bins`, ...). Top-label metrics bin the confidence
``c_i = max_k p_ik`` against correctness ``1[argmax_k p_ik = y_i]``.
"""

from __future__ import annotations

import torch

from selfcal.metrics._api import metric
from selfcal.metrics.binning import Weights, calibration_error, classwise_bins, top_label_bins
from selfcal.predictions import Predictions


@metric(takes_bins=True)
def ece(
    pred: Predictions, weights: Weights = None, *, n_bins: int = 15, norm: str = "l1"
) -> torch.Tensor:
    """Expected calibration error with equal-width bins.

    ``ECE = sum_m (|B_m| / N) |acc(B_m) - conf(B_m)|`` over ``M = n_bins`` bins ``((m-1)/M,
    m/M]``; ``norm="l2"`` gives the RMS calibration error ``sqrt(sum_m |B_m|/N (acc - conf)^2)``
    and ``norm="max"`` the MCE. Empty bins contribute 0. Returned as a fraction (not x100).

    Examples: four predictions with confidences 0.9, 0.8, 0.7, 0.6, of which the second is
    wrong. With 15 bins each sits alone in its bin, so ECE is the mean ``|acc - conf|`` =
    ``(0.1 + 0.8 + 0.3 + 0.4) / 4``; one bin averages the gaps away (mean confidence = accuracy
    = 0.75):

    >>> import numpy as np
    >>> from selfcal.metrics import ece
    >>> probs = np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    >>> labels = np.array([0, 1, 1, 0])
    >>> round(ece(probs=probs, labels=labels), 4)
    0.4
    >>> round(ece(probs=probs, labels=labels, n_bins=1), 4)
    0.0
    """
    return calibration_error(top_label_bins(pred, n_bins, "uniform", weights), norm)


@metric(takes_bins=True)
def mce(pred: Predictions, weights: Weights = None, *, n_bins: int = 15) -> torch.Tensor:
    """Maximum calibration error: ``max_m |acc(B_m) - conf(B_m)|`` over non-empty equal-width
    bins."""
    return calibration_error(top_label_bins(pred, n_bins, "uniform", weights), "max")


@metric(takes_bins=True)
def adaece(
    pred: Predictions, weights: Weights = None, *, n_bins: int = 15, norm: str = "l1"
) -> torch.Tensor:
    """Adaptive (equal-mass) ECE, called ACE in the meta-regularization paper.

    Same sum as :func:`ece` over bins whose edges are equal-mass quantiles of the confidence
    (:func:`~selfcal.metrics.binning.equal_mass_edges`). Unlike the reference code, samples
    equal to the smallest confidence are kept (in the first bin), so every sample counts once.
    """
    return calibration_error(top_label_bins(pred, n_bins, "quantile", weights), norm)


@metric(takes_bins=True)
def classwise_ece(
    pred: Predictions, weights: Weights = None, *, n_bins: int = 15, norm: str = "l1"
) -> torch.Tensor:
    """Classwise ECE (static calibration error): for each class ``j``, bin ``p_{.j}`` into
    equal-width bins and compare its mean with the frequency of ``y = j``; average over the
    ``C`` classes: ``(1/C) sum_j sum_b (|B_b|/N) |acc_jb - conf_jb|``.

    ``C`` is the number of score columns (the reference code infers it as ``max(label) + 1``).
    """
    return calibration_error(classwise_bins(pred, n_bins, weights), norm).mean(-1)
