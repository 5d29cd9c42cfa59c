"""numba kernel of the Venn-Abers tables: Vovk, Petej & Fedorova's stack scans over the
cumulative sum diagram (:mod:`selfcal.posthoc._venn_abers_tables` states the construction and
runs the same steps in torch, in lockstep over the maps, when numba is absent).

Each map (one class's, or the top-label one) is a serial, GIL-free loop over its distinct
calibration scores; blocks of maps run on ``torch.get_num_threads()`` threads
(:func:`selfcal._kernels.cpu._map_blocks`). Every geometric test is an exact int64 cross
product of integer points, and every value one float64 division of two exact integers, so the
tables equal the torch path's bit for bit.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from selfcal._kernels.cpu import _array, _blocks, _map_blocks

_jit = numba.njit(nogil=True, cache=True)


@_jit
def _turn(ax: int, ay: int, bx: int, by: int, cx: int, cy: int) -> int:
    """``(b - a) x (c - b)``: positive when ``a, b, c`` turn left, zero when collinear; also
    ``(b - a) x (c - a)``, positive when ``c`` lies above the line from ``a`` to ``b``
    (``b`` right of ``a``)."""
    return (bx - ax) * (cy - by) - (by - ay) * (cx - bx)


@_jit
def _upper_row(
    w: np.ndarray, y: np.ndarray, k: int, hx: np.ndarray, hy: np.ndarray, out: np.ndarray
) -> None:
    """``out[g]`` (``g = 0..k``): the isotonic value at a test object of label 1 placed after
    the first ``g`` distinct scores (Vovk et al.'s Algorithms 1 and 2)."""
    h = 0
    for t in range(k + 2):  # the lower hull of P_{-1} = (-1, -1), P_0, ..., P_k
        px = w[t - 1] if t > 0 else -1
        py = y[t - 1] if t > 0 else -1
        while h >= 2 and _turn(hx[h - 2], hy[h - 2], hx[h - 1], hy[h - 1], px, py) <= 0:
            h -= 1
        hx[h] = px
        hy[h] = py
        h += 1
    b = 0  # the hull read from its left end: a deque whose front is hx[b]
    for i in range(1, k + 1):
        ax, ay, bx, by = hx[b], hy[b], hx[b + 1], hy[b + 1]
        out[i - 1] = np.float64(by - ay) / np.float64(bx - ax)
        lx, ly = w[i] - 1, y[i] - 1  # P_i - (1, 1)
        if _turn(ax, ay, bx, by, lx, ly) >= 0:  # on or above the first segment
            continue
        b += 1
        while h - b >= 2 and _turn(lx, ly, hx[b], hy[b], hx[b + 1], hy[b + 1]) <= 0:
            b += 1
        b -= 1
        hx[b] = lx
        hy[b] = ly
    out[k] = 1.0


@_jit
def _lower_row(
    w: np.ndarray, y: np.ndarray, k: int, hx: np.ndarray, hy: np.ndarray, out: np.ndarray
) -> None:
    """``out[g]`` (``g = 0..k``): the isotonic value at a test object of label 0 placed with
    the ``g``-th distinct score (Vovk et al.'s Algorithms 3 and 4, mirrored)."""
    h = 0
    for t in range(k + 1, -1, -1):  # the lower hull of P_0, ..., P_k + (1, 0), from the right
        px = w[t] if t <= k else w[k] + 1
        py = y[t] if t <= k else y[k]
        while h >= 2 and _turn(hx[h - 2], hy[h - 2], hx[h - 1], hy[h - 1], px, py) >= 0:
            h -= 1
        hx[h] = px
        hy[h] = py
        h += 1
    b = 0
    for i in range(k, 0, -1):
        ax, ay, bx, by = hx[b], hy[b], hx[b + 1], hy[b + 1]
        out[i] = np.float64(by - ay) / np.float64(bx - ax)
        rx, ry = w[i - 1] + 1, y[i - 1]  # P_{i-1} + (1, 0)
        if _turn(ax, ay, bx, by, rx, ry) <= 0:  # on or above (the segment runs leftwards)
            continue
        b += 1
        while h - b >= 2 and _turn(rx, ry, hx[b], hy[b], hx[b + 1], hy[b + 1]) >= 0:
            b += 1
        b -= 1
        hx[b] = rx
        hy[b] = ry
    out[0] = 0.0


@_jit
def _tables_block(
    w: np.ndarray, y: np.ndarray, sizes: np.ndarray, lower: np.ndarray, upper: np.ndarray
) -> None:
    hx = np.empty(w.shape[1] + 2, dtype=np.int64)
    hy = np.empty(w.shape[1] + 2, dtype=np.int64)
    for r in range(w.shape[0]):
        _upper_row(w[r], y[r], sizes[r], hx, hy, upper[r])
        _lower_row(w[r], y[r], sizes[r], hx, hy, lower[r])


def tables(
    w: torch.Tensor, y: torch.Tensor, sizes: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(lower, upper)``, ``(M, K + 1)`` float64, of ``M`` maps given their cumulative sum
    diagrams: ``w[m, j]`` / ``y[m, j]`` the calibration rows / positives among the first ``j``
    distinct scores (int64, ``(M, K + 1)``, column 0 zero), ``sizes[m]`` the distinct scores
    (entries past ``sizes[m]`` are ignored, and so are the tables' there)."""
    wa, ya, ka = _array(w), _array(y), _array(sizes)
    m = wa.shape[0]
    lower = np.zeros(wa.shape, dtype=np.float64)
    upper = np.ones(wa.shape, dtype=np.float64)
    blocks = _blocks(m, wa.shape[1])
    _map_blocks(lambda _, b: _tables_block(wa[b], ya[b], ka[b], lower[b], upper[b]), blocks)
    return torch.from_numpy(lower), torch.from_numpy(upper)
