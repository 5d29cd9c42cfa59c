"""Multicalibration error: the worst calibration over every group and every class, measured by
the cumulative (binning-free) calibration error of Arrieta-Ibarra et al. (2022) and scaled as
in Guy et al. (2025, "Measuring multi-calibration") -- the metric of Meta's ``mcgrad``
(``mcgrad.metrics.ecce``, ``MulticalibrationError``), extended from binary to ``C`` classes.

**Cells.** A *segment* ``S`` is the set of all rows or one group's rows (``n_S`` rows); a
*cell* ``(S, k)`` is the binary question "is the label ``k``?" on ``S``, with scores
``p_ik`` and outcomes ``o_ik = 1[y_i = k]``. For ``C = 2`` the two classes' cells are mirror
images with the same numbers (up to the order of tied scores), so the binary case is
``mcgrad``'s positive-class metric.

**ECCE** of a cell: sort the segment's rows by ``p_ik`` ascending (ties in row order) and
walk the cumulative differences

    D_0 = 0,   D_j = (1 / n_S) sum_{t <= j} (o_{i_t k} - p_{i_t k}),   j = 1..n_S,

    ECCE_{S,k} = max_j D_j - min_j D_j                          (the range, Kuiper's form)

a calibrated cell's walk stays near 0; a band of scores whose outcomes differ from them moves
it. No bins, so no bin-count choice. Its scale under perfect calibration is

    sigma_{S,k} = sqrt(sum_{i in S} p_ik (1 - p_ik)) / n_S

(the standard deviation of ``D_{n_S}`` when ``o_ik ~ Bernoulli(p_ik)``).

**Multicalibration error.** The number of standard deviations of the worst cell, and that
significance expressed on the scale of the whole data set's cell of the same class:

    multicalibration_sigma = max_{S, k} ECCE_{S,k} / sigma_{S,k}
    multicalibration_error = max_{S, k} (ECCE_{S,k} / sigma_{S,k}) sigma_{all,k}

(``ECCE / sigma`` is ``inf`` where ``sigma = 0 < ECCE``, 0 where both are 0: a segment of
certain scores). For ``C = 2`` these are ``MulticalibrationError(...).mce_sigma`` and
``.mce`` with the groups as the segments (depth 1, every group kept), cross-checked in
``tests/metrics/test_groups_reference.py``. ``mcgrad``'s p-value (Kuiper's distribution) and
its ``relative`` scale are not reproduced. Segments are the whole set and every group with
rows; overlapping groups are segments as they are.

Under bootstrap weights ``w`` (``(B, N)`` multiplicities) a cell's walk is
``D_j = sum_{t<=j} w_t (o - p) / sum w`` and ``sigma = sqrt(sum w^2 p (1-p)) / sum w``, as
``mcgrad`` weighs rows.
"""

from __future__ import annotations

import torch

from selfcal.metrics._api import metric
from selfcal.metrics.binning import Weights
from selfcal.predictions import Predictions

CELL_ELEMENTS = 1 << 24
"""About how many float64 ``(row, class)`` values (times resamples) a chunk of classes holds."""


def _walk_range(d: torch.Tensor, w: Weights) -> tuple[torch.Tensor, torch.Tensor]:
    """ECCE and the weight sum of sorted differences ``d`` ``(n, k)`` (``w``: ``(B, n, k)``,
    each column sorted as ``d``'s): the range of ``D`` over ``j = 0..n``; ``(k,)`` or ``(B, k)``."""
    if w is None:
        total = torch.tensor(float(d.shape[0]), dtype=torch.float64, device=d.device)
        walk = d.cumsum(0) / total
        dim = 0
    else:
        total = w.sum(-2)
        walk = (w * d).cumsum(-2) / total.unsqueeze(-2)
        dim = -2
    high, low = walk.amax(dim).clamp_min(0), walk.amin(dim).clamp_max(0)
    return high - low, total


def _segment_cells(
    pred: Predictions, rows: torch.Tensor | slice, weights: Weights
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ECCE, sigma)`` of every class's cell on the segment ``rows``: ``(C,)`` each, or
    ``(B, C)`` under ``weights``; over chunks of classes (memory ``O(chunk)``)."""
    labels = pred.require_labels()[rows]
    z = pred.scores[rows].double()
    n, lead = int(labels.shape[0]), 1 if weights is None else weights.shape[0]
    if n == 0:
        nan = torch.full((lead, pred.n_classes), torch.nan, dtype=torch.float64)
        return (nan[0], nan[0]) if weights is None else (nan, nan)
    lse = torch.logsumexp(z, 1, keepdim=True) if pred.kind == "logits" else None
    step = max(1, CELL_ELEMENTS // (n * lead * 4))
    eccs, sigmas = [], []
    for start in range(0, pred.n_classes, step):
        cols = torch.arange(start, min(pred.n_classes, start + step), device=pred.device)
        p = z[:, cols] if lse is None else (z[:, cols] - lse).exp()
        order = torch.argsort(p, dim=0, stable=True)
        d = ((labels.unsqueeze(1) == cols).double() - p).gather(0, order)
        var = p * (1 - p)
        w = None if weights is None else weights[:, rows][:, order]  # (B, n, k)
        ecce, total = _walk_range(d, w)
        if w is None:
            sigma = var.sum(0).sqrt() / n
        else:
            sigma = (w.square() * var.gather(0, order)).sum(-2).sqrt() / total
        eccs.append(ecce)
        sigmas.append(sigma)
    return torch.cat(eccs, -1), torch.cat(sigmas, -1)


def cumulative_calibration_errors(
    pred: Predictions, weights: Weights = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ECCE, sigma)`` of every cell (module docstring): ``(1 + G, C)`` each, row 0 the
    whole set, row ``1 + g`` group ``g`` (NaN rows for a group without rows); ``(B, 1 + G,
    C)`` under resampling ``weights``."""
    segments: list[torch.Tensor | slice] = [slice(None)]
    if pred.groups is not None:
        segments += pred.groups.rows()
    cells = [_segment_cells(pred, rows, weights) for rows in segments]
    return torch.stack([c[0] for c in cells], -2), torch.stack([c[1] for c in cells], -2)


def _significance(ecce: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """``ECCE / sigma`` with ``mcgrad``'s rule for ``sigma = 0`` (inf, or 0 when ECCE is)."""
    ratio = ecce / sigma
    zero = sigma == 0
    return torch.where(zero, torch.where(ecce != 0, torch.inf, 0.0), ratio).nan_to_num(nan=0.0)


@metric(takes_groups=True)
def multicalibration_sigma(pred: Predictions, weights: Weights = None) -> torch.Tensor:
    """``max_{S,k} ECCE_{S,k} / sigma_{S,k}`` over the whole set, every group and every class
    (module docstring): how many standard deviations of a calibrated model the worst cell's
    cumulative error is. Without groups, the whole set's classes only."""
    ecce, sigma = cumulative_calibration_errors(pred, weights)
    return _significance(ecce, sigma).flatten(-2).amax(-1)


@metric(takes_groups=True)
def multicalibration_error(pred: Predictions, weights: Weights = None) -> torch.Tensor:
    """``max_{S,k} (ECCE_{S,k} / sigma_{S,k}) sigma_{all,k}`` (module docstring): the worst
    cell's significance on the scale of its class's cell over the whole set -- a probability
    gap, ``mcgrad``'s ``MulticalibrationError.mce`` for ``C = 2``."""
    ecce, sigma = cumulative_calibration_errors(pred, weights)
    scaled = _significance(ecce, sigma) * sigma[..., :1, :]
    return scaled.flatten(-2).amax(-1)
