"""The one binning core: every bin-edge rule, per-bin (weighted) counts, confidence sums and
accuracy sums.

ECE, MCE, AdaECE, classwise ECE, the debiased ECE, streaming accumulation, reliability diagrams
and the ECE-vs-number-of-bins curve all read :class:`BinStats`, with edges from one of the rules
here:

* :func:`uniform_edges` -- equal width, ``e_m = m / M`` computed in float64 (ECE, MCE,
  classwise ECE, the diagrams);
* :func:`equal_mass_edges` -- equal mass as in the AdaECE reference code (quantiles of the
  confidences, the last edge their maximum);
* :func:`kumar_equal_mass_edges` -- equal mass as in Kumar et al.'s ``get_equal_bins``
  (midpoints between ``numpy.array_split`` groups, the last edge 1; the debiased ECE);
* :func:`discrete_edges` -- one bin per distinct value (their ``get_discrete_bins``).

:func:`confidence_bins`, :func:`top_label_bins` and :func:`classwise_bins` bin predictions
with them; :func:`order_statistics` selects the ranks the equal-mass rule reads.

Bin convention: with edges ``e_0 < e_1 < ... < e_M``, bin ``m`` holds ``e_m < c <= e_{m+1}``
(open on the left, closed on the right, as in the reference code of Guo et al. / Mukhoti et
al.). Bin 0 is also closed on the left, so a confidence of exactly ``e_0`` (e.g. a class
probability of exactly 0 in classwise ECE, or the minimum confidence under equal-mass edges)
is counted rather than silently dropped -- the reference code drops it; a test pins the
difference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from selfcal._kernels import kernels_for
from selfcal._validation import check_choice, check_int
from selfcal.predictions import Predictions

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


def _bin_sum(
    index: torch.Tensor, x: torch.Tensor | None, n_bins: int, weights: Weights
) -> torch.Tensor:
    """Sum of ``x`` (or of ones) per bin; ``(M,)`` or ``(B, M)`` when weights are given.

    On the CPU: ``bincount`` / ``index_add_``, which add in row order. On other devices those
    add with atomics in an order that changes from run to run, so the sums are
    :func:`_onehot_sum` instead: deterministic, ``O(CHUNK x M)`` memory."""
    if index.device.type != "cpu" and index.ndim == 1 and (x is not None or weights is not None):
        return _onehot_sum(index, x, n_bins, weights)
    if weights is None:
        w = None if x is None else x
        return torch.bincount(index, weights=w, minlength=n_bins).to(torch.float64)[:n_bins]
    src = weights if x is None else weights * x
    if index.ndim == 1:
        out = torch.zeros(weights.shape[0], n_bins, dtype=torch.float64, device=src.device)
        return out.index_add_(1, index, src)
    out = torch.zeros(weights.shape[0], n_bins, dtype=torch.float64, device=src.device)
    return out.scatter_add_(1, index, src)


def _onehot_sum(
    index: torch.Tensor, x: torch.Tensor | None, n_bins: int, weights: Weights
) -> torch.Tensor:
    """``sum_i w_i x_i [index_i = m]`` as products with the one-hot matrix of the bins,
    :data:`CHUNK` rows at a time, in float64: a matrix product has no atomics, so a CUDA
    device gives the same sums on every run (cuBLAS is deterministic for a given GPU and
    library version); the rounding differs from the CPU's row-order sum by a few ulps."""
    bins = torch.arange(n_bins, device=index.device)
    rows = torch.ones_like(index, dtype=torch.float64) if x is None else x.double()
    shape = (n_bins,) if weights is None else (weights.shape[0], n_bins)
    out = torch.zeros(shape, dtype=torch.float64, device=index.device)
    for start in range(0, index.shape[0], CHUNK):
        span = slice(start, start + CHUNK)
        onehot = (index[span].unsqueeze(1) == bins).double()
        src = rows[span] if weights is None else weights[:, span] * rows[span]
        out += src @ onehot
    return out


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


def _sums(
    values: torch.Tensor,
    targets: torch.Tensor,
    edges: torch.Tensor,
    n_bins: int,
    weights: Weights,
    index: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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


# ------------------------------------------------------------------------ equal-mass edges
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
    sizes = cw[:, -1:]  # resample sizes
    steps = torch.linspace(0, 1, n_bins + 1, dtype=torch.float64, device=values.device)
    pos = torch.minimum(steps * sizes, sizes - 1)  # (B, M+1)
    lo = pos.floor()
    frac = pos - lo
    hi = torch.minimum(lo + 1, sizes - 1)
    # the j-th smallest element of a resample is s[first k with cw[k] > j]
    s_lo = s[torch.searchsorted(cw, lo.contiguous(), right=True).clamp_max(s.shape[0] - 1)]
    s_hi = s[torch.searchsorted(cw, hi.contiguous(), right=True).clamp_max(s.shape[0] - 1)]
    return s_lo + frac * (s_hi - s_lo)


def _resampled_rank(
    sorted_values: torch.Tensor, cum_weights: torch.Tensor, ranks: torch.Tensor
) -> torch.Tensor:
    """The ``ranks``-th smallest (0-based) element of each resample; ``(B, K)``."""
    idx = torch.searchsorted(cum_weights, ranks.contiguous(), right=True)
    return sorted_values[idx.clamp_max(sorted_values.shape[0] - 1)]


def kumar_equal_mass_edges(
    values: torch.Tensor, n_bins: int, weights: Weights = None
) -> torch.Tensor:
    """Edges of ``get_equal_bins`` (Kumar et al.'s ``uncertainty-calibration``): the sorted
    values are split into ``min(M, n)`` consecutive groups as ``numpy.array_split`` does (the
    first ``n mod M`` groups one larger); an inner edge is the midpoint between the last value
    of a group and the first of the next; the last edge is 1. Returns ``(M+1,)`` edges, or
    ``(B, M+1)`` per resample; unused inner edges (``n < M``) and repeated edges just leave
    empty bins."""
    check_n_bins(n_bins)
    order = torch.argsort(values)
    s = values[order].double()
    w = torch.ones(1, s.shape[0], dtype=torch.float64, device=s.device)
    if weights is not None:
        w = weights[:, order].double()
    cw = w.cumsum(1)
    n = cw[:, -1:].round()
    parts = torch.minimum(torch.full_like(n, n_bins), n)
    i = torch.arange(1, n_bins, dtype=torch.float64, device=s.device).unsqueeze(0)
    size, extra = torch.div(n, parts, rounding_mode="floor"), torch.remainder(n, parts)
    boundary = i * size + torch.minimum(i, extra)  # first rank of group i (0-based)
    used = i < parts
    boundary = torch.where(used, boundary, torch.ones_like(boundary))
    mid = (_resampled_rank(s, cw, boundary - 1) + _resampled_rank(s, cw, boundary)) / 2
    inner = torch.where(used, mid, torch.ones_like(mid))
    zero, one = torch.zeros_like(n), torch.ones_like(n)
    edges = torch.cat([zero, inner, one], dim=1)
    return edges[0] if weights is None else edges


def discrete_edges(values: torch.Tensor) -> torch.Tensor:
    """Edges of ``get_discrete_bins``: midpoints between consecutive distinct values, then 1,
    so every distinct value has its own bin (also valid for any resample of ``values``)."""
    u = torch.unique(values.double())
    inner = (u[:-1] + u[1:]) / 2
    return torch.cat([u.new_zeros(1), inner, u.new_ones(1)])


# ------------------------------------------------------------------- bins of predictions
STRATEGIES = ("uniform", "quantile")
"""Edge rules of :func:`confidence_bins`: equal width or equal mass (:func:`equal_mass_edges`)."""


def confidence_bins(
    confidence: torch.Tensor,
    correct: torch.Tensor,
    n_bins: int = 15,
    strategy: str = "uniform",
    weights: Weights = None,
) -> BinStats:
    """Bin statistics of confidences against correctness (float64 ``(N,)`` each)."""
    check_choice("strategy", strategy, STRATEGIES)
    if strategy == "uniform":
        edges = uniform_edges(n_bins, confidence.device)
    else:
        edges = equal_mass_edges(confidence, n_bins, weights)
    if edges.ndim == 2:  # per-resample edges: bin each resample separately
        confidence = confidence.expand(edges.shape[0], -1)
    return bin_statistics(confidence, correct, edges, weights)


def top_label_bins(
    pred: Predictions, n_bins: int = 15, strategy: str = "uniform", weights: Weights = None
) -> BinStats:
    """Bin statistics of top-label confidence against correctness (``strategy`` uniform or
    quantile; also the bars of reliability diagrams)."""
    return confidence_bins(pred.confidence, pred.correct, n_bins, strategy, weights)


def classwise_bins(pred: Predictions, n_bins: int = 15, weights: Weights = None) -> BinStats:
    """Per-class bin statistics of ``p_{.j}`` against ``1[y = j]``: shape ``(..., C, M)``, over
    chunks of rows (memory ``O(chunk)`` whatever ``N``): on the CPU
    :func:`_classwise_ordered_sums`, on other devices :func:`_classwise_onehot_sums`."""
    edges = uniform_edges(n_bins, pred.device)
    if pred.device.type != "cpu":
        return BinStats(edges, *_classwise_onehot_sums(pred, edges, weights))
    return BinStats(edges, *_classwise_ordered_sums(pred, edges, weights))


TEMPORARIES = 8
"""About how many ``(rows, C)`` temporaries :func:`_classwise_ordered_sums` holds: its chunks
have ``1/8`` of the usual rows, so that together they stay near one chunk (236 MiB above
100,000 x 1,000 logits: ``benchmarks/results/metric_memory.md``)."""


def _classwise_ordered_sums(
    pred: Predictions, edges: torch.Tensor, weights: Weights
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-class, per-bin count, probability and target sums, ``(C, M)`` or ``(B, C, M)``, on
    the CPU: each chunk of rows is binned and added in row order into float64 sums that carry
    over from chunk to chunk (``index_add_``, which on the CPU adds one entry after another, as
    ``bincount`` does): the sums of one pass over every row, bit for bit, at the memory of a
    chunk. Unweighted, a chunk's classes are binned in one flat pass (class ``j``'s bins offset
    by ``j M``); with ``(B, N)`` resampling weights, one class at a time."""
    n_bins, c = edges.shape[0] - 1, pred.n_classes
    labels = pred.require_labels()
    lead = () if weights is None else (weights.shape[0],)
    sums = torch.zeros(3, c, *lead, n_bins, dtype=torch.float64, device=pred.device)
    offsets = torch.arange(c, device=pred.device) * n_bins
    for span in pred.row_chunks(TEMPORARIES * c):
        p, y = pred.probs_of(pred.scores[span]), labels[span]
        index = bin_index(p, edges)
        if weights is None:
            flat = (index + offsets).reshape(-1)
            target = torch.nn.functional.one_hot(y, c).double()
            for total, x in zip(sums.flatten(1), (torch.ones_like(p), p, target), strict=True):
                total.index_add_(0, flat, x.reshape(-1))
            continue
        w, by_class = weights[:, span], zip(p.T.contiguous(), index.T.contiguous(), strict=True)
        for j, (p_j, index_j) in enumerate(by_class):
            for total, x in zip(sums[:, j], (None, p_j, (y == j).double()), strict=True):
                total.index_add_(1, index_j, w if x is None else w * x)
    count, conf, acc = sums if weights is None else sums.transpose(1, 2)
    return count, conf, acc


def _classwise_onehot_sums(
    pred: Predictions, edges: torch.Tensor, weights: Weights
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-class, per-bin count, probability and target sums, ``(C, M)`` or ``(B, C, M)``, on
    a device other than the CPU: over chunks of rows, the rows' one-hot bin membership
    ``(rows, C M)`` multiplied by their weights (ones, or the ``(B, rows)`` resampling weights).

    Matrix products have no atomics, so the sums are deterministic (as :func:`_onehot_sum`);
    the chunks (:meth:`~selfcal.predictions.Predictions.row_chunks`) hold a bounded number of
    memberships, so memory is ``O(chunk)`` whatever ``N``. (The flat pass's bins, ``C M`` of
    them, would make a one-hot of ``N C x C M`` entries: 47 s and 68,332 MiB at 200,000 x
    1,000 on an H200.)"""
    n_bins, c = edges.shape[0] - 1, pred.n_classes
    labels = pred.require_labels()
    bins = torch.arange(n_bins, device=pred.device)
    lead = 1 if weights is None else weights.shape[0]
    sums = torch.zeros(3, lead, c * n_bins, dtype=torch.float64, device=pred.device)
    for span in pred.row_chunks(c * n_bins):
        p = pred.probs_of(pred.scores[span])
        member = (bin_index(p, edges).unsqueeze(-1) == bins).double()  # (rows, C, M)
        target = torch.nn.functional.one_hot(labels[span], c).double().unsqueeze(-1)
        w = p.new_ones(1, p.shape[0]) if weights is None else weights[:, span].double()
        sums[0] += w @ member.flatten(1)
        sums[1] += w @ (member * p.unsqueeze(-1)).flatten(1)
        sums[2] += w @ (member * target).flatten(1)
    sums = sums.unflatten(-1, (c, n_bins))
    count, conf, acc = sums[:, 0] if weights is None else sums
    return count, conf, acc
