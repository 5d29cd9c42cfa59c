"""numba kernels: the top-label pass, per-bin sums, exact order statistics.

Each kernel is a serial, GIL-free loop over a block of rows; :func:`_map_blocks` runs the
blocks on ``torch.get_num_threads()`` threads. Serial kernels compile in about two seconds
in all and are cached on disk (numba's ``parallel=True`` compiled an order of magnitude
slower). Block boundaries do not depend on the number of threads, so neither does any result.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
import torch

BLOCK_ELEMENTS = 1 << 20
"""Elements per block: a block's rows are one task for the thread pool."""

CELLS = 1 << 16
"""Histogram cells for order-statistic selection."""

EDGE_CELLS = 1 << 12
"""Lookup-table cells for binning by arbitrary edges."""

_jit = numba.njit(nogil=True, cache=True)


# ------------------------------------------------------------------------ the top-label pass
@_jit
def _top_label_probs(p: np.ndarray, atol: float, conf: np.ndarray, pred: np.ndarray) -> int:
    """Max, first argmax, and the contract of each probability row; returns the first row
    that breaks it (a value outside [0, 1], NaN, or ``|sum - 1| > atol``), else -1."""
    n, c = p.shape
    for i in range(n):
        top = p[i, 0]
        arg = 0
        low = top
        total = 0.0
        for j in range(c):
            v = p[i, j]
            total += v
            if v > top:
                top = v
                arg = j
            if v < low:
                low = v
        if not (low >= 0 and top <= 1 and abs(total - 1.0) <= atol):
            return i
        conf[i] = top
        pred[i] = arg
    return -1


@_jit
def _top_label_logits(z: np.ndarray, atol: float, conf: np.ndarray, pred: np.ndarray) -> int:
    """Softmax maximum ``1 / sum_k exp(z_k - max z)`` and first argmax of each logit row;
    returns the first row with a non-finite logit, else -1. ``atol`` is unused."""
    n, c = z.shape
    for i in range(n):
        top = z[i, 0]
        arg = 0
        for j in range(c):
            v = z[i, j]
            if not math.isfinite(v):
                return i
            if v > top:
                top = v
                arg = j
        total = 0.0
        for j in range(c):
            total += math.exp(np.float64(z[i, j]) - np.float64(top))
        conf[i] = 1.0 / total
        pred[i] = arg
    return -1


@_jit
def _matches(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    for i in range(a.shape[0]):
        out[i] = 1.0 if a[i] == b[i] else 0.0


# ------------------------------------------------------------------------------- bin sums
@_jit
def _uniform_sums(values: np.ndarray, targets: np.ndarray, n_bins: int, out: np.ndarray) -> None:
    """Count, value sum and target sum per equal-width bin, the bin found as
    :func:`selfcal.metrics.binning._uniform_index` finds it (``ceil(M c)`` corrected
    against the float64 edges ``m / M``)."""
    for i in range(values.shape[0]):
        v = values[i]
        f = math.ceil(v * n_bins)
        if v > f / n_bins:
            f += 1
        if f > 1 and v <= (f - 1) / n_bins:
            f -= 1
        b = min(max(int(f) - 1, 0), n_bins - 1)
        out[0, b] += 1.0
        out[1, b] += v
        out[2, b] += targets[i]


@_jit
def _edge_table(inner: np.ndarray, low: float, scale: float, cells: int) -> np.ndarray:
    """``table[k]``: how many inner edges lie in cells before cell ``k`` of ``[low, ...]``
    (cell ``floor((x - low) * scale)``, capped at the last)."""
    per_cell = np.zeros(cells + 1, dtype=np.int64)
    for e in inner:
        f = (e - low) * scale
        per_cell[(int(f) if f < cells - 1 else cells - 1) + 1] += 1
    return np.cumsum(per_cell)[:cells]


@_jit
def _edge_sums(
    values: np.ndarray,
    targets: np.ndarray,
    inner: np.ndarray,
    table: np.ndarray,
    scale: float,
    out: np.ndarray,
) -> None:
    """Same sums for sorted inner edges: the bin is the number of inner edges ``< v``.

    The cell is a non-decreasing function of the value, so edges in earlier cells are below
    ``v`` and edges in later cells above it: ``table[cell]`` counts the first kind, and only
    edges sharing ``v``'s cell are compared (usually none)."""
    n = inner.shape[0]
    last = table.shape[0] - 1
    for i in range(values.shape[0]):
        v = values[i]
        if v <= inner[0]:
            b = 0
        elif v > inner[n - 1]:
            b = n
        else:
            f = (v - inner[0]) * scale
            b = table[int(f) if f < last else last]
            while b < n and inner[b] < v:
                b += 1
        out[0, b] += 1.0
        out[1, b] += v
        out[2, b] += targets[i]


# ----------------------------------------------------------------------- order statistics
@_jit
def _cell_counts(values: np.ndarray, low: float, scale: float, counts: np.ndarray) -> None:
    """Histogram over cells ``floor((v - low) * scale)``, a non-decreasing function of ``v``
    (rounded arithmetic is monotone), so a smaller cell never holds a larger value."""
    last = counts.shape[0] - 1
    for i in range(values.shape[0]):
        f = (values[i] - low) * scale
        counts[int(f) if f < last else last] += 1


@_jit
def _gather_cells(
    values: np.ndarray,
    low: float,
    scale: float,
    slot: np.ndarray,
    cursor: np.ndarray,
    out: np.ndarray,
) -> None:
    """Copy the values whose cell has a slot (``slot[cell] >= 0``) to ``out`` at that slot's
    cursor."""
    last = slot.shape[0] - 1
    for i in range(values.shape[0]):
        f = (values[i] - low) * scale
        s = slot[int(f) if f < last else last]
        if s >= 0:
            out[cursor[s]] = values[i]
            cursor[s] += 1


# -------------------------------------------------------------------------------- drivers
def _blocks(n: int, per_row: int = 1, at_most: int | None = None) -> list[slice]:
    """Row blocks of about :data:`BLOCK_ELEMENTS` elements (larger if there would be more
    than ``at_most`` blocks)."""
    rows = max(1, BLOCK_ELEMENTS // per_row)
    if at_most is not None:
        rows = max(rows, -(-n // at_most))
    return [slice(start, min(n, start + rows)) for start in range(0, n, rows)]


def _map_blocks(task: Callable[[int, slice], object], blocks: list[slice]) -> list:
    """``task(k, block)`` for every block, on ``torch.get_num_threads()`` threads."""
    workers = min(torch.get_num_threads(), len(blocks))
    if workers <= 1:
        return [task(k, b) for k, b in enumerate(blocks)]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(task, range(len(blocks)), blocks))


def _array(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()


def top_label(
    scores: torch.Tensor, kind: str, atol: float
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Top-label confidence (float64) and predicted class (int64) of ``(N, C)`` CPU scores,
    or ``None`` when a row breaks the input contract (the caller's torch path then finds it
    and says why)."""
    x = _array(scores)
    n = x.shape[0]
    conf = np.empty(n, dtype=np.float64)
    pred = np.empty(n, dtype=np.int64)
    kernel = _top_label_probs if kind == "probs" else _top_label_logits
    bad = _map_blocks(lambda _, b: kernel(x[b], atol, conf[b], pred[b]), _blocks(n, x.shape[1]))
    if any(row >= 0 for row in bad):
        return None
    return torch.from_numpy(conf), torch.from_numpy(pred)


def matches(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """float64 indicator ``a == b`` of two int64 vectors."""
    x, y = _array(a), _array(b)
    out = np.empty(x.shape[0], dtype=np.float64)
    _map_blocks(lambda _, s: _matches(x[s], y[s], out[s]), _blocks(x.shape[0]))
    return torch.from_numpy(out)


def bin_sums(
    values: torch.Tensor, targets: torch.Tensor, edges: torch.Tensor, uniform: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-bin count, value sum and target sum (float64) under the ``(e_m, e_{m+1}]``
    convention; ``uniform`` says the edges are ``m / M``."""
    v = _array(values.to(torch.float64))
    t = _array(targets.to(torch.float64))
    n_bins = edges.shape[0] - 1
    blocks = _blocks(v.shape[0])
    # each block's sums padded by a cache line, so concurrent blocks never share one
    out = np.zeros((len(blocks), 3, n_bins + 8), dtype=np.float64)
    if uniform or n_bins == 1:  # one bin takes every value, whatever its edges
        _map_blocks(lambda k, b: _uniform_sums(v[b], t[b], n_bins, out[k]), blocks)
    else:
        inner = _array(edges[1:-1].to(torch.float64))
        span = float(inner[-1] - inner[0])
        scale = EDGE_CELLS / span if span > 0 else 0.0
        scale = scale if math.isfinite(scale) else 0.0  # then every edge is compared
        table = _edge_table(inner, inner[0], scale, EDGE_CELLS)
        _map_blocks(lambda k, b: _edge_sums(v[b], t[b], inner, table, scale, out[k]), blocks)
    total = out[:, :, :n_bins].sum(axis=0)
    return tuple(torch.from_numpy(row) for row in total)  # type: ignore[return-value]


def order_statistics(values: torch.Tensor, ranks: torch.Tensor) -> torch.Tensor | None:
    """The ``ranks``-th smallest (0-based) of finite ``values``, exactly, in O(N): a histogram
    over :data:`CELLS` equal-width cells locates the cell holding each rank, only those
    cells' values are copied out, and each copy is partitioned. ``None`` when the value range
    is too narrow for the cell arithmetic (the caller then partitions the whole array)."""
    x = _array(values)
    r = ranks.cpu().numpy()
    low, high = (float(m) for m in torch.aminmax(values.detach()))
    if low == high:
        return torch.full((r.shape[0],), low, dtype=values.dtype)
    scale = CELLS / (high - low)
    if not math.isfinite(scale):
        return None
    parts = _blocks(x.shape[0], at_most=64)  # one histogram per block
    counts = np.zeros((len(parts), CELLS), dtype=np.int64)
    _map_blocks(lambda k, b: _cell_counts(x[b], low, scale, counts[k]), parts)
    total = counts.sum(axis=0)
    cumulative = np.cumsum(total)
    cell_of_rank = np.searchsorted(cumulative, r, side="right")
    cells = np.unique(cell_of_rank)
    slot = np.full(CELLS, -1, dtype=np.int64)
    slot[cells] = np.arange(cells.shape[0])
    sizes = total[cells]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    # block k writes cell j's values after those of blocks 0..k-1
    cursors = starts + np.cumsum(counts[:, cells], axis=0) - counts[:, cells]
    gathered = np.empty(int(sizes.sum()), dtype=x.dtype)
    _map_blocks(
        lambda k, b: _gather_cells(x[b], low, scale, slot, cursors[k].copy(), gathered), parts
    )
    out = np.empty(r.shape[0], dtype=x.dtype)
    for j, cell in enumerate(cells):
        mine = cell_of_rank == cell
        local = r[mine] - (cumulative[cell] - total[cell])
        segment = np.partition(gathered[starts[j] : starts[j] + sizes[j]], local)
        out[mine] = segment[local]
    return torch.from_numpy(out)
