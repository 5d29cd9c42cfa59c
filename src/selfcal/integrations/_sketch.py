"""The AdaECE sketch: equal-mass ECE from a fixed-size histogram of the confidences, with a
certified bound on its difference from the exact value (what
:class:`selfcal.integrations.torchmetrics.AdaECE` keeps with ``mode="sketch"``).

The grid's ``G`` cells ``(k/G, (k+1)/G]`` (those of
:func:`~selfcal.metrics.binning.uniform_edges`, cell 0 closed; ``G = 2^16`` by default) keep
each cell's count ``n_k``, confidence sum and number of correct predictions ``A_k``: a sum
state of ``3 G`` numbers whatever the number of samples. The exact rule
(:func:`~selfcal.metrics.binning.equal_mass_edges`) puts inner edge ``j`` between the order
statistics of ranks ``lo_j = floor(min(j N / M, N - 1))`` and ``lo_j + 1``; the cumulative
counts give the cell ``K_j`` that holds rank ``lo_j``, and the sketch puts edge ``j`` at that
cell's upper boundary ``(K_j + 1) / G``. Its value is the ECE of these bins, computed exactly
from the cell sums (:func:`adaece_from_sketch`). A sample is binned differently than by the
exact rule only if it lies in a cell that holds the order statistic of rank ``lo_j`` or
``lo_j + 1`` (the cells between those two are empty). Moving one sample ``(c_i, a_i)`` to
another bin changes ``sum_m |sum_{i in B_m} (a_i - c_i)|`` by at most ``2 |a_i - c_i|``, so

``|AdaECE_sketch - AdaECE_exact| <= (2 / N) sum_{k in E} [A_k (1 - k/G) + (n_k - A_k) (k+1)/G]``

where ``E`` is that set of at most ``2 (M - 1)`` cells and the bracket bounds
``sum_{i in cell k} |a_i - c_i|`` (correct: ``1 - c < 1 - k/G``; wrong: ``c <= (k+1)/G``).
:meth:`selfcal.integrations.torchmetrics.AdaECE.error_bound` returns this bound, computed from
the sketch itself. A priori, if the confidences have a density at most ``f``, each cell holds
about ``N f / G`` samples and the bound is about ``4 (M - 1) f / G`` (``8.5e-4 f`` for
``M = 15``, ``G = 2^16``); where the confidences pile up (a saturated network's near 1), it
grows, and ``mode="exact"`` is the choice. The actual error is usually far smaller: a move
between two bins whose gaps have the same sign changes nothing.
"""

from __future__ import annotations

import torch

from selfcal._validation import check_int
from selfcal.metrics.binning import BinStats, calibration_error

SKETCH_GRID = 1 << 16
"""Cells of the AdaECE sketch's grid on ``[0, 1]`` (``3 * 2^16`` float64 numbers, 1.5 MiB)."""

_F64 = torch.float64


def require_samples(total: torch.Tensor) -> None:
    """A ``ValueError`` when no sample has been accumulated."""
    if not bool(total > 0):
        raise ValueError("no sample has been added yet: call update(...) before compute()")


def adaece_from_sketch(cells: BinStats, n_bins: int = 15) -> tuple[torch.Tensor, torch.Tensor]:
    """AdaECE from a histogram of the confidences, and its certified error bound.

    ``cells`` are the bin statistics of the top-label confidences against correctness on a
    fine grid of equal-width cells (:func:`~selfcal.metrics.binning.bin_statistics` with
    :func:`~selfcal.metrics.binning.uniform_edges`). Inner edge ``j`` of the exact equal-mass
    rule lies between the order statistics of ranks ``lo_j = floor(min(j N / M, N - 1))`` and
    ``lo_j + 1``; it is moved up to the upper boundary of the cell holding rank ``lo_j``, so
    each bin is a union of whole cells and its sums are exact. Returns ``(value, bound)``
    with ``|value - exact AdaECE| <= bound`` (derivation in the module docstring)."""
    check_int("n_bins", n_bins)
    count = cells.count
    total = count.sum()
    require_samples(total)
    n_cells = count.shape[0]
    n = float(total)
    cumulative = count.cumsum(0)
    # the ranks equal_mass_edges reads, computed as it does
    pos = torch.linspace(0, n, n_bins + 1, dtype=_F64, device=count.device)
    lo = pos.clamp(0, n - 1).floor()[1:-1]
    hi = (lo + 1).clamp_max(n - 1)
    cell_lo = torch.searchsorted(cumulative, lo, right=True)  # first cell with cum > rank
    cell_hi = torch.searchsorted(cumulative, hi, right=True)
    grid = torch.arange(n_cells, device=count.device)
    bin_of_cell = torch.searchsorted(cell_lo, grid)  # #{j : K_j < k}: cell K_j below edge j

    def per_bin(x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(n_bins, dtype=_F64, device=x.device).index_add_(0, bin_of_cell, x)

    ends = torch.tensor([0.0, n - 1], dtype=_F64, device=count.device)
    first, last = torch.searchsorted(cumulative, ends, right=True).to(_F64)
    edges = torch.cat([first[None], cell_lo.to(_F64) + 1, last[None] + 1]) / n_cells
    stats = BinStats(
        edges, per_bin(count), per_bin(cells.confidence_sum), per_bin(cells.accuracy_sum)
    )
    value = calibration_error(stats, "l1")
    edge_cells = torch.unique(torch.cat([cell_lo, cell_hi]))
    k = edge_cells.to(_F64)
    n_k, a_k = count[edge_cells], cells.accuracy_sum[edge_cells]
    gaps = a_k * (1 - k / n_cells) + (n_k - a_k) * ((k + 1) / n_cells)
    return value, 2 * gaps.sum() / total
