"""The one binning core: per-bin (weighted) counts, confidence sums and accuracy sums.

ECE, MCE, AdaECE, classwise ECE, streaming accumulation, reliability diagrams and the
ECE-vs-number-of-bins curve all read :class:`BinStats`.

Bin convention: with edges ``e_0 < e_1 < ... < e_M``, bin ``m`` holds ``e_m < c <= e_{m+1}``
(open on the left, closed on the right, as in the reference code of Guo et al. / Mukhoti et
al.). Bin 0 is also closed on the left, so a confidence of exactly ``e_0`` (e.g. a class
probability of exactly 0 in classwise ECE, or the minimum confidence under equal-mass edges)
is counted rather than silently dropped -- the reference code drops it; a test pins the
difference. Equal-width edges are ``e_m = m / M`` computed in float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from selfcal._kernels import kernels_for
from selfcal._validation import check_int

Weights = torch.Tensor | None
"""``None`` (every sample once) or a ``(B, N)`` float64 matrix of resample multiplicities."""


def uniform_edges(n_bins: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Equal-width edges ``m / M``, ``m = 0..M``, in float64."""
    check_n_bins(n_bins)
    return torch.arange(n_bins + 1, dtype=torch.float64, device=device) / n_bins


def check_n_bins(n_bins: int) -> None:
    check_int("n_bins", n_bins)


CHUNK = 1 << 18
"""Values per chunk when binning on the CPU (the chunk's temporaries stay in cache)."""


def is_uniform(edges: torch.Tensor) -> bool:
    """Whether ``edges`` are exactly :func:`uniform_edges` of their length (1-D only)."""
    return edges.ndim == 1 and torch.equal(edges, uniform_edges(edges.shape[0] - 1, edges.device))


def bin_index(values: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    """Bin of each value under the ``(e_m, e_{m+1}]`` convention (values below ``e_1`` go to
    bin 0, values above ``e_{M-1}`` to bin ``M-1``), comparing in float64. ``edges`` may be
    ``(M+1,)`` or batched ``(B, M+1)`` with ``values`` ``(B, N)``.

    Equal-width edges take an arithmetic path (:func:`_uniform_index`), exactly equal to the
    binary search used for any other edges."""
    values = values.to(torch.float64)
    if is_uniform(edges):
        return _uniform_index(values, edges.shape[0] - 1)
    inner = edges[..., 1:-1].contiguous()
    if inner.ndim == 1:
        return torch.bucketize(values, inner, right=False)
    return torch.searchsorted(inner, values.contiguous(), right=False)


def _uniform_index(values: torch.Tensor, n_bins: int) -> torch.Tensor:
    """Bin of float64 ``values`` under the edges ``e_m = m / M`` (float64 division).

    ``f = ceil(M c)`` is the bin number plus one up to rounding: ``M c`` can land a value
    within a few ulps of an edge one bin off, never more. So ``f`` moves up one when
    ``c > e_f`` and down one when ``c <= e_{f-1}`` (``f > 1``), comparing with the edges
    themselves -- recomputed as ``f / M``, the same float64 division that made them -- and
    the result equals the comparison convention exactly."""
    f = torch.mul(values, n_bins).ceil_()
    f += values > f / n_bins
    f -= ((values <= (f - 1) / n_bins) & (f > 1)).to(f.dtype)
    return f.sub_(1).clamp_(0, n_bins - 1).long()


def _bin_sum(index: torch.Tensor, x: torch.Tensor | None, n_bins: int, weights: Weights):
    """Sum of ``x`` (or of ones) per bin; ``(M,)`` or ``(B, M)`` when weights are given."""
    if weights is None:
        w = None if x is None else x
        return torch.bincount(index, weights=w, minlength=n_bins).to(torch.float64)[:n_bins]
    src = weights if x is None else weights * x
    if index.ndim == 1:
        out = torch.zeros(weights.shape[0], n_bins, dtype=torch.float64, device=src.device)
        return out.index_add_(1, index, src)
    out = torch.zeros(weights.shape[0], n_bins, dtype=torch.float64, device=src.device)
    return out.scatter_add_(1, index, src)


@dataclass(frozen=True)
class BinStats:
    """Per-bin sufficient statistics (float64). Shapes ``(M,)``, or ``(B, M)`` for a batch of
    bootstrap resamples."""

    edges: torch.Tensor
    count: torch.Tensor
    confidence_sum: torch.Tensor
    accuracy_sum: torch.Tensor

    @property
    def n_bins(self) -> int:
        return self.count.shape[-1]

    @property
    def total(self) -> torch.Tensor:
        return self.count.sum(-1)

    @property
    def mean_confidence(self) -> torch.Tensor:
        """Mean confidence per bin (NaN for empty bins)."""
        return self.confidence_sum / self.count

    @property
    def accuracy(self) -> torch.Tensor:
        """Accuracy (mean target) per bin (NaN for empty bins)."""
        return self.accuracy_sum / self.count

    @property
    def weight(self) -> torch.Tensor:
        """Share of samples per bin, ``|B_m| / N``."""
        return self.count / self.total.unsqueeze(-1)

    def __add__(self, other: BinStats) -> BinStats:
        if not torch.equal(self.edges, other.edges):
            raise ValueError("cannot add bin statistics with different edges")
        return BinStats(
            self.edges,
            self.count + other.count,
            self.confidence_sum + other.confidence_sum,
            self.accuracy_sum + other.accuracy_sum,
        )


def bin_statistics(
    values: torch.Tensor,
    targets: torch.Tensor,
    edges: torch.Tensor,
    weights: Weights = None,
    index: torch.Tensor | None = None,
) -> BinStats:
    """Bin ``values`` (confidences) by ``edges`` and sum ``values`` and ``targets`` per bin.

    Without resampling weights, CPU inputs are binned :data:`CHUNK` values at a time and the
    per-chunk sums added in float64 (the same sums as one pass, a fraction of the memory
    traffic); large ones by one fused kernel pass (:mod:`selfcal._kernels`)."""
    n_bins = edges.shape[-1] - 1
    if weights is None and index is None and values.ndim == 1 and values.device.type == "cpu":
        kernels = kernels_for(values.shape[0], values.device)
        if kernels is not None:
            return BinStats(edges, *kernels.bin_sums(values, targets, edges, is_uniform(edges)))
        parts = [
            _sums(v, t, edges, n_bins, None, None)
            for v, t in zip(values.split(CHUNK), targets.split(CHUNK), strict=True)
        ]
        count, conf, acc = (torch.stack(p).sum(0) for p in zip(*parts, strict=True))
        return BinStats(edges, count, conf, acc)
    return BinStats(edges, *_sums(values, targets, edges, n_bins, weights, index))


def _sums(values, targets, edges, n_bins, weights, index):
    """Per-bin count, value sum and target sum."""
    if index is None:
        index = bin_index(values, edges)
    return (
        _bin_sum(index, None, n_bins, weights),
        _bin_sum(index, values, n_bins, weights),
        _bin_sum(index, targets, n_bins, weights),
    )


def calibration_error(stats: BinStats, norm: str = "l1") -> torch.Tensor:
    """Binned calibration error from bin statistics.

    * ``l1`` (ECE): ``sum_m |B_m|/N * |acc_m - conf_m|``
    * ``l2`` (RMS calibration error): ``sqrt(sum_m |B_m|/N * (acc_m - conf_m)^2)``
    * ``max`` (MCE): ``max_m |acc_m - conf_m|`` over non-empty bins
    """
    diff = stats.accuracy_sum - stats.confidence_sum  # = |B_m| (acc_m - conf_m)
    if norm == "l1":
        return diff.abs().sum(-1) / stats.total
    nonempty = stats.count > 0
    gap = torch.where(nonempty, diff / stats.count.clamp_min(1e-300), torch.zeros_like(diff))
    if norm == "l2":
        return torch.sqrt((gap.square() * stats.count).sum(-1) / stats.total)
    if norm == "max":
        return gap.abs().amax(-1)
    raise ValueError(f"norm must be 'l1', 'l2' or 'max', got {norm!r}")
