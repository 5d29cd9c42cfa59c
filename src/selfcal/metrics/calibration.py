"""Binned calibration errors: ECE (L1 / L2), MCE, AdaECE (equal-mass), classwise ECE.

All read the one binning core (:mod:`selfcal.metrics.binning`). Top-label metrics bin the
confidence ``c_i = max_k p_ik`` against correctness ``1[argmax_k p_ik = y_i]``.
"""

from __future__ import annotations

import numpy as np
import torch

from selfcal._kernels import kernels_for
from selfcal.metrics._api import metric
from selfcal.metrics.binning import (
    BinStats,
    Weights,
    bin_index,
    bin_statistics,
    calibration_error,
    check_n_bins,
    uniform_edges,
)
from selfcal.predictions import Predictions

STRATEGIES = ("uniform", "quantile")


def _interp_sorted(sorted_values: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``numpy.interp(positions, arange(N), sorted_values)`` (clamped at both ends)."""
    n = sorted_values.shape[-1]
    pos = positions.clamp(0, n - 1)
    lo = pos.floor().long()
    hi = (lo + 1).clamp_max(n - 1)
    frac = pos - lo
    s_lo, s_hi = sorted_values[..., lo], sorted_values[..., hi]
    return s_lo + frac * (s_hi - s_lo)


def order_statistics(values: torch.Tensor, ranks: torch.Tensor) -> torch.Tensor:
    """The ``ranks``-th smallest of ``values`` (0-based), exactly. On CPU a histogram
    selection for large inputs (:func:`selfcal._kernels.cpu.order_statistics`, O(N)), else a
    multi-pivot partial selection (``numpy.partition``, O(N log k)) instead of a full sort."""
    values = values.detach()
    if values.device.type == "cpu":
        kernels = kernels_for(values.shape[0], values.device)
        selected = None if kernels is None else kernels.order_statistics(values, ranks)
        if selected is not None:
            return selected
        r = ranks.cpu().numpy()
        return torch.from_numpy(np.partition(values.numpy(), r)[r])
    return torch.sort(values).values[ranks]


def equal_mass_edges(values: torch.Tensor, n_bins: int, weights: Weights = None) -> torch.Tensor:
    """Equal-mass edges as in the AdaECE reference code: the sorted values interpolated at
    positions ``linspace(0, N, M + 1)`` against ``0 .. N-1`` (so the last edge is the maximum).

    With bootstrap ``weights`` the same rule is applied to each resample (``(B, M+1)`` edges),
    reading the resample's sorted values through cumulative multiplicities.
    """
    check_n_bins(n_bins)
    if weights is None:
        n = values.shape[0]
        pos = torch.linspace(0, n, n_bins + 1, dtype=torch.float64, device=values.device)
        lo = pos.clamp(0, n - 1).floor().long()
        ranks = torch.unique(torch.cat([lo, (lo + 1).clamp_max(n - 1)]))
        table = torch.zeros(n, dtype=values.dtype, device=values.device)
        table[ranks] = order_statistics(values, ranks)  # sparse: only these ranks are read
        return _interp_sorted(table, pos)
    order = torch.argsort(values)
    s = values[order]
    cw = weights[:, order].cumsum(-1)  # (B, N)
    n = cw[:, -1:]  # resample sizes
    steps = torch.linspace(0, 1, n_bins + 1, dtype=torch.float64, device=values.device)
    pos = torch.minimum(steps * n, n - 1)  # (B, M+1)
    lo = pos.floor()
    frac = pos - lo
    hi = torch.minimum(lo + 1, n - 1)
    # the j-th smallest element of a resample is s[first k with cw[k] > j]
    s_lo = s[torch.searchsorted(cw, lo.contiguous(), right=True).clamp_max(s.shape[0] - 1)]
    s_hi = s[torch.searchsorted(cw, hi.contiguous(), right=True).clamp_max(s.shape[0] - 1)]
    return s_lo + frac * (s_hi - s_lo)


def confidence_bins(
    confidence: torch.Tensor,
    correct: torch.Tensor,
    n_bins: int = 15,
    strategy: str = "uniform",
    weights: Weights = None,
) -> BinStats:
    """Bin statistics of confidences against correctness (float64 ``(N,)`` each)."""
    if strategy == "uniform":
        edges = uniform_edges(n_bins, confidence.device)
    elif strategy == "quantile":
        edges = equal_mass_edges(confidence, n_bins, weights)
    else:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if edges.ndim == 2:  # per-resample edges: bin each resample separately
        confidence = confidence.expand(edges.shape[0], -1)
    return bin_statistics(confidence, correct, edges, weights)


def top_label_bins(
    pred: Predictions, n_bins: int = 15, strategy: str = "uniform", weights: Weights = None
) -> BinStats:
    """Bin statistics of top-label confidence against correctness."""
    return confidence_bins(pred.confidence, pred.correct, n_bins, strategy, weights)


@metric()
def ece(pred: Predictions, weights: Weights = None, *, n_bins: int = 15, norm: str = "l1"):
    """Expected calibration error with equal-width bins.

    ``ECE = sum_m (|B_m| / N) |acc(B_m) - conf(B_m)|`` over ``M = n_bins`` bins ``((m-1)/M,
    m/M]``; ``norm="l2"`` gives the RMS calibration error ``sqrt(sum_m |B_m|/N (acc - conf)^2)``
    and ``norm="max"`` the MCE. Empty bins contribute 0. Returned as a fraction (not x100).
    """
    return calibration_error(top_label_bins(pred, n_bins, "uniform", weights), norm)


@metric()
def mce(pred: Predictions, weights: Weights = None, *, n_bins: int = 15):
    """Maximum calibration error: ``max_m |acc(B_m) - conf(B_m)|`` over non-empty equal-width
    bins."""
    return calibration_error(top_label_bins(pred, n_bins, "uniform", weights), "max")


@metric()
def adaece(pred: Predictions, weights: Weights = None, *, n_bins: int = 15, norm: str = "l1"):
    """Adaptive (equal-mass) ECE, called ACE in the meta-regularization paper.

    Same sum as :func:`ece` over bins whose edges are equal-mass quantiles of the confidence
    (:func:`equal_mass_edges`). Unlike the reference code, samples equal to the smallest
    confidence are kept (in the first bin), so every sample counts once.
    """
    return calibration_error(top_label_bins(pred, n_bins, "quantile", weights), norm)


def classwise_bins(pred: Predictions, n_bins: int = 15, weights: Weights = None) -> BinStats:
    """Per-class bin statistics of ``p_{.j}`` against ``1[y = j]``: shape ``(..., C, M)``.

    Unweighted, all classes are binned in one flat pass (class ``j``'s bins offset by ``j M``).
    With ``(B, N)`` resampling weights, one class at a time, so memory stays ``O(B N)`` rather
    than ``O(B N C)``."""
    c = pred.n_classes
    edges = uniform_edges(n_bins, pred.device)
    probs = pred.probs
    labels = pred.require_labels()
    index = bin_index(probs, edges)
    if weights is not None:
        per_class = [
            bin_statistics(probs[:, j], (labels == j).double(), edges, weights, index=index[:, j])
            for j in range(c)
        ]
        return BinStats(
            edges,
            *(
                torch.stack([getattr(s, f) for s in per_class], dim=-2)
                for f in ("count", "confidence_sum", "accuracy_sum")
            ),
        )
    targets = torch.nn.functional.one_hot(labels, c).double()
    index += torch.arange(c, device=pred.device) * n_bins
    flat = bin_statistics(
        probs.reshape(-1),
        targets.reshape(-1),
        uniform_edges(c * n_bins, pred.device),
        index=index.reshape(-1),
    )
    shape = (c, n_bins)
    return BinStats(
        edges,
        flat.count.reshape(shape),
        flat.confidence_sum.reshape(shape),
        flat.accuracy_sum.reshape(shape),
    )


@metric()
def classwise_ece(
    pred: Predictions, weights: Weights = None, *, n_bins: int = 15, norm: str = "l1"
):
    """Classwise ECE (static calibration error): for each class ``j``, bin ``p_{.j}`` into
    equal-width bins and compare its mean with the frequency of ``y = j``; average over the
    ``C`` classes: ``(1/C) sum_j sum_b (|B_b|/N) |acc_jb - conf_jb|``.

    ``C`` is the number of score columns (the reference code infers it as ``max(label) + 1``).
    """
    return calibration_error(classwise_bins(pred, n_bins, weights), norm).mean(-1)


def calibration_bins(pred: Predictions, n_bins: int = 15, strategy: str = "uniform") -> BinStats:
    """Top-label bin statistics for reliability diagrams (``strategy`` uniform or quantile)."""
    return top_label_bins(pred, n_bins, strategy)
