"""Calibration per group: each group's ECE, what a perfectly calibrated model would show at
that group's size, the worst group's, and a per-group report.

Groups come with the predictions (``groups=``, checked once by the input rule:
:func:`selfcal._inputs.as_groups`): one label a row or overlapping membership columns. A
group's rows ``R_g`` (``n_g = |R_g|``) are scored as a data set of their own, by the one
binning core (:func:`~selfcal.metrics.binning.bin_statistics`, equal-width bins of the
top-label confidence ``c_i = max_k p_ik`` against correctness ``a_i = 1[argmax_k p_ik = y_i]``):

    ECE_g = sum_m (|B_gm| / n_g) |acc(B_gm) - conf(B_gm)|            (group_ece)

**Small groups look miscalibrated by noise alone.** ``|acc - conf|`` is never negative, so
a bin's sampling noise only adds to it: a perfectly calibrated model scored on 45 rows shows
an ECE of several points, and the largest of 57 such numbers more still. The yardstick here
is the model's own probabilities (*consistency resampling*, Bröcker & Smith 2007): draw
correctness as a perfectly calibrated model would produce it, ``a*_ri ~ Bernoulli(c_i)``
independently for ``r = 1..R`` (the same as drawing the label from ``p_i`` and checking the
top class), keep every confidence, and score each draw as the data. Then per group

    null_g   = (1/R) sum_r ECE_g(a*_r)                   (the ECE calibration shows at n_g)
    excess_g = ECE_g - null_g                            (debiased_group_ece)
    p_g      = (1 + #{r : ECE_g(a*_r) >= ECE_g}) / (R + 1)

``excess_g`` estimates how much of the group's ECE is more than its size explains: about 0
for a calibrated group of any size, negative when the group is better calibrated than the
noise would suggest. The worst group is judged the same way against the maximum over groups
of each draw, ``max_g ECE_g(a*_r)``: its mean is what the worst of that many groups of those
sizes shows under perfect calibration (the upward bias of the maximum), its quantiles a
yardstick, and ``p`` of the observed worst against it a test that already counts the number
of groups. The draws are seeded (``draw_seed``: not ``seed``, which is the bootstrap's); ``R``
(``n_draws``) sets their Monte-Carlo error, about ``sd_g / sqrt(R)``.

Bootstrap intervals (:func:`~selfcal.metrics.bootstrap.bootstrap_ci`) resample rows: under
resampling weights ``w`` a group's bins and each draw's accuracy are weighted sums, and the
draws are shared by the duplicates of a row (the resampled data set's labels are the rows'
own), so ``debiased_group_ece`` has intervals like any metric. A group with no rows (or no
weight in a resample) has no ECE (NaN) and is left out of the worst.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from selfcal._validation import check_int
from selfcal.metrics._api import metric
from selfcal.metrics.binning import (
    BinStats,
    Weights,
    bin_index,
    bin_statistics,
    calibration_error,
    uniform_edges,
)
from selfcal.metrics.scores import nll_terms
from selfcal.predictions import Predictions

N_DRAWS = 200
"""Default calibrated draws ``R`` of the null yardstick."""
DRAW_ELEMENTS = 1 << 22
"""Draws are made this many ``(draw, row)`` values at a time (memory ``O(chunk)``)."""


def _group_stats(pred: Predictions, n_bins: int, weights: Weights) -> list[BinStats]:
    """Each group's bin statistics of confidence against correctness, ``(M,)`` or ``(B, M)``."""
    edges = uniform_edges(n_bins, pred.device)
    conf, correct = pred.confidence.detach(), pred.correct
    out = []
    for rows in pred.require_groups().rows():
        w = None if weights is None else weights[:, rows]
        out.append(bin_statistics(conf[rows], correct[rows], edges, w))
    return out


def _errors(stats: list[BinStats], norm: str) -> torch.Tensor:
    """``(G,)`` or ``(B, G)`` calibration errors; NaN for a group without rows (or weight)."""
    return torch.stack([calibration_error(s, norm) for s in stats], -1)


@metric(takes_bins=True, takes_groups=True)
def group_ece(
    pred: Predictions, weights: Weights = None, *, n_bins: int = 15, norm: str = "l1"
) -> torch.Tensor:
    """Each group's ECE, ``(G,)`` in the order of the group names (module docstring):
    ``ECE_g = sum_m (|B_gm| / n_g) |acc(B_gm) - conf(B_gm)|`` over the group's rows, with
    :func:`~selfcal.metrics.ece`'s equal-width bins (``norm`` as there); NaN for a group with
    no rows.

    >>> import numpy as np
    >>> from selfcal.metrics import group_ece
    >>> probs = np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    >>> group_ece(probs=probs, labels=[0, 1, 1, 0], groups=["a", "a", "b", "b"]).round(4)
    array([0.45, 0.35])
    """
    return _errors(_group_stats(pred, n_bins, weights), norm)


def _worst(values: torch.Tensor) -> torch.Tensor:
    """Largest value along the last dimension, NaN (a group without rows) left out."""
    return values.nan_to_num(nan=-math.inf).amax(-1)


@metric(takes_bins=True, takes_groups=True)
def worst_group_ece(
    pred: Predictions, weights: Weights = None, *, n_bins: int = 15, norm: str = "l1"
) -> torch.Tensor:
    """The largest :func:`group_ece`, ``max_g ECE_g`` over the groups with rows. Biased
    upward by noise on small groups (module docstring): compare it with
    :func:`group_calibration`'s ``worst_null`` or use :func:`worst_group_debiased_ece`."""
    return _worst(group_ece.core(pred, weights, n_bins=n_bins, norm=norm))


def calibrated_draws(pred: Predictions, n_draws: int, seed: int) -> list[torch.Tensor]:
    """``R = n_draws`` seeded draws of the correctness of a perfectly calibrated model,
    ``a*_ri ~ Bernoulli(c_i)``: float64 ``(r, N)`` chunks of about :data:`DRAW_ELEMENTS`."""
    check_int("n_draws", n_draws)
    gen = torch.Generator(device=pred.device)
    gen.manual_seed(seed)
    conf = pred.confidence.detach().double()
    size = max(1, min(n_draws, DRAW_ELEMENTS // max(1, pred.n_samples)))
    chunks = []
    for start in range(0, n_draws, size):
        r = min(size, n_draws - start)
        u = torch.rand(r, pred.n_samples, generator=gen, device=pred.device, dtype=torch.float64)
        chunks.append((u < conf).double())
    return chunks


def _null_errors(
    stats: BinStats, index: torch.Tensor, draws: torch.Tensor, w: Weights, norm: str
) -> torch.Tensor:
    """One group's calibration error under each draw: ``(R,)``, or ``(B, R)`` with its rows'
    resampling weights ``w`` (``(B, n_g)``). ``stats``: the group's observed bins, whose counts
    and confidence sums a draw keeps; ``index``: its rows' bins; ``draws``: ``(R, n_g)``."""
    n_bins = stats.n_bins
    if w is None:
        acc = torch.zeros(draws.shape[0], n_bins, dtype=torch.float64, device=draws.device)
        acc.index_add_(1, index, draws)
        count, conf = stats.count.expand_as(acc), stats.confidence_sum.expand_as(acc)
    else:
        acc = torch.stack(
            [w[:, index == m] @ draws[:, index == m].T for m in range(n_bins)], -1
        )  # (B, R, M): sum_i w_bi a*_ri over bin m
        count = stats.count.unsqueeze(1).expand_as(acc)
        conf = stats.confidence_sum.unsqueeze(1).expand_as(acc)
    return calibration_error(BinStats(stats.edges, count, conf, acc), norm)


def null_group_ece(
    pred: Predictions,
    weights: Weights = None,
    *,
    n_bins: int = 15,
    norm: str = "l1",
    n_draws: int = N_DRAWS,
    draw_seed: int = 0,
) -> torch.Tensor:
    """Each group's ECE under each calibrated draw (module docstring): ``(R, G)``, or
    ``(B, R, G)`` under resampling ``weights``."""
    stats = _group_stats(pred, n_bins, weights)
    edges = uniform_edges(n_bins, pred.device)
    conf = pred.confidence.detach()
    rows = pred.require_groups().rows()
    index = [bin_index(conf[r], edges) for r in rows]
    out = []
    for draws in calibrated_draws(pred, n_draws, draw_seed):
        per_group = [
            _null_errors(s, i, draws[:, r], None if weights is None else weights[:, r], norm)
            for s, i, r in zip(stats, index, rows, strict=True)
        ]
        out.append(torch.stack(per_group, -1))
    return torch.cat(out, -2)


@metric(takes_bins=True, takes_groups=True)
def debiased_group_ece(
    pred: Predictions,
    weights: Weights = None,
    *,
    n_bins: int = 15,
    norm: str = "l1",
    n_draws: int = N_DRAWS,
    draw_seed: int = 0,
) -> torch.Tensor:
    """Each group's ECE less what a perfectly calibrated model shows at its size,
    ``excess_g = ECE_g - (1/R) sum_r ECE_g(a*_r)``, ``(G,)`` (module docstring: ``R =
    n_draws`` seeded Bernoulli draws of correctness from the model's own confidences). About
    0 for a calibrated group whatever its size; can be negative."""
    null = null_group_ece(
        pred, weights, n_bins=n_bins, norm=norm, n_draws=n_draws, draw_seed=draw_seed
    )
    return group_ece.core(pred, weights, n_bins=n_bins, norm=norm) - null.mean(-2)


@metric(takes_bins=True, takes_groups=True)
def worst_group_debiased_ece(
    pred: Predictions,
    weights: Weights = None,
    *,
    n_bins: int = 15,
    norm: str = "l1",
    n_draws: int = N_DRAWS,
    draw_seed: int = 0,
) -> torch.Tensor:
    """The largest :func:`debiased_group_ece`, ``max_g excess_g``: the group whose ECE most
    exceeds what its size explains."""
    options = {"n_bins": n_bins, "norm": norm, "n_draws": n_draws, "draw_seed": draw_seed}
    return _worst(debiased_group_ece.core(pred, weights, **options))


@dataclass(frozen=True)
class GroupCalibration:
    """Per-group calibration of one set of predictions (:func:`group_calibration`); each
    array is ``(G,)`` float64 in the order of ``names`` (NaN for a group without rows)."""

    names: tuple[str, ...]
    size: torch.Tensor
    accuracy: torch.Tensor
    nll: torch.Tensor
    ece: torch.Tensor
    null_ece: torch.Tensor
    """Mean ECE of the calibrated draws at the group's size (``null_g``)."""
    excess_ece: torch.Tensor
    """``ece - null_ece`` (:func:`debiased_group_ece`)."""
    p_value: torch.Tensor
    """``(1 + #{r: ECE_g(a*_r) >= ECE_g}) / (R + 1)``."""
    worst_null: torch.Tensor
    """``(R,)`` the worst group's ECE in each calibrated draw, ``max_g ECE_g(a*_r)``."""

    @property
    def worst(self) -> int:
        """Index of the group with the largest ECE."""
        return int(self.ece.nan_to_num(nan=-math.inf).argmax())

    @property
    def worst_p_value(self) -> float:
        """``(1 + #{r: max_g ECE_g(a*_r) >= max_g ECE_g}) / (R + 1)``: how often the worst
        of the groups is as bad under perfect calibration."""
        observed = self.ece[self.worst]
        hits = int((self.worst_null >= observed).sum())
        return (1 + hits) / (self.worst_null.shape[0] + 1)


def group_calibration(
    pred: Predictions, *, n_bins: int = 15, n_draws: int = N_DRAWS, draw_seed: int = 0
) -> GroupCalibration:
    """Each group's size, accuracy, NLL (``-(1/n_g) sum_{i in R_g} log p_{i,y_i}``), ECE and
    its calibrated yardstick (module docstring), from one set of ``n_draws`` seeded draws."""
    groups = pred.require_groups()
    rows = groups.rows()
    terms, correct = nll_terms(pred), pred.correct
    ece = group_ece.core(pred, n_bins=n_bins)
    null = null_group_ece(pred, n_bins=n_bins, n_draws=n_draws, draw_seed=draw_seed)
    p = (1 + (null >= ece).sum(0)) / (n_draws + 1)
    return GroupCalibration(
        groups.names,
        groups.sizes().double(),
        torch.stack([correct[r].mean() for r in rows]),
        torch.stack([terms[r].mean() for r in rows]),
        ece,
        null.mean(0),
        ece - null.mean(0),
        torch.where(ece.isnan(), ece, p.double()),
        _worst(null),
    )
