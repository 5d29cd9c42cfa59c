"""Debiased top-label L2 calibration error (Kumar, Liang & Ma 2019, "Verified Uncertainty
Calibration"), with the binning conventions of their ``uncertainty-calibration`` package.

Binning goes through the one binning core (:func:`selfcal.metrics.binning.bin_statistics`),
which also holds their two edge rules (:func:`~selfcal.metrics.binning.kumar_equal_mass_edges`,
:func:`~selfcal.metrics.binning.discrete_edges`).
"""

from __future__ import annotations

import torch

from selfcal._validation import check_choice
from selfcal.metrics._api import metric
from selfcal.metrics.binning import (
    BinStats,
    Weights,
    bin_statistics,
    discrete_edges,
    kumar_equal_mass_edges,
)
from selfcal.predictions import Predictions

BINNINGS = ("equal_mass", "discrete", "auto")


def looks_discrete(probs: torch.Tensor) -> bool:
    """uncertainty-calibration's ``is_discrete``: every class column has fewer than ``N/4``
    distinct values."""
    n = probs.shape[0]
    return all(torch.unique(col).shape[0] < n / 4 for col in probs.detach().T)


def debiased_squared_error(stats: BinStats) -> torch.Tensor:
    """Unbiased estimate of the binned squared calibration error (``unbiased_square_ce``):

        sum_b (n_b / n) [ (conf_b - acc_b)^2 - acc_b (1 - acc_b) / (n_b - 1) ]

    over bins with ``n_b >= 2`` (bins with fewer samples contribute 0). Can be negative."""
    count = stats.count
    big = count >= 2
    safe = torch.where(big, count, torch.full_like(count, 2.0))
    acc = stats.accuracy_sum / safe
    gap = stats.confidence_sum / safe - acc
    term = gap.square() - acc * (1 - acc) / (safe - 1)
    return (torch.where(big, term, torch.zeros_like(term)) * count).sum(-1) / stats.total


@metric(takes_bins=True)
def debiased_ece(
    pred: Predictions,
    weights: Weights = None,
    *,
    n_bins: int = 15,
    binning: str = "equal_mass",
    squared: bool = False,
) -> torch.Tensor:
    """Debiased top-label L2 calibration error (Kumar et al. 2019), i.e.
    ``uncertainty-calibration``'s ``get_calibration_error(probs, labels, p=2, debias=True,
    mode='top-label')``.

    Confidences ``c_i = max_k p_ik`` are binned against correctness; per bin ``b`` with
    ``n_b >= 2`` samples the plug-in squared gap is corrected by the label variance,

        D = sum_b (n_b / n) [ (conf_b - acc_b)^2 - acc_b (1 - acc_b) / (n_b - 1) ],

    and the result is ``sqrt(max(D, 0))`` (the L2 error, as their ``unbiased_l2_ce``), or the
    unbiased, possibly negative ``D`` itself with ``squared=True``.

    ``binning``:

    * ``"equal_mass"`` (default): their ``get_equal_bins`` with ``n_bins`` bins (what
      ``get_calibration_error`` uses for continuous outputs, via ``lower_bound_scaling_ce``;
      see :func:`~selfcal.metrics.binning.kumar_equal_mass_edges`);
    * ``"discrete"``: one bin per distinct confidence (their ``get_discrete_bins``, used for
      the outputs of a binning calibrator; ``n_bins`` is ignored);
    * ``"auto"``: their heuristic -- ``"discrete"`` when every class column of the
      probabilities has fewer than ``N/4`` distinct values, else ``"equal_mass"``. Decided
      once on the observed sample, also for bootstrap resamples.

    Bins are ``(e_b, e_{b+1}]`` (their ``searchsorted`` side left), as in the binning core.
    Only ``p = 2`` is offered: their ``p != 2`` debiasing is a random Monte-Carlo correction.
    """
    check_choice("binning", binning, BINNINGS)
    c = pred.confidence.detach()
    if binning == "auto":
        binning = "discrete" if looks_discrete(pred.probs) else "equal_mass"
    if binning == "discrete":
        edges = discrete_edges(c)
    else:
        edges = kumar_equal_mass_edges(c, n_bins, weights)
    values = c if edges.ndim == 1 else c.expand(edges.shape[0], -1)
    stats = bin_statistics(values, pred.correct, edges, weights)
    estimate = debiased_squared_error(stats)
    return estimate if squared else estimate.clamp_min(0).sqrt()
