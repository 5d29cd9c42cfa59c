"""The Venn-Abers tables: for every map (a class's one-vs-rest problem, or the top-label
one), the two isotonic fits with a test object added, at every place a test score can fall
among the calibration scores -- computed once, looked up by ``searchsorted``.

**What is computed** (Vovk, Petej & Fedorova 2015, "Large-scale probabilistic predictors with
and without guarantees of validity", Algorithms 1-4). Let ``s'_1 < ... < s'_k`` be the
distinct calibration scores of a map, ``w_j`` the calibration rows at ``s'_j`` and ``y_j``
the positives among them. For a test score ``s`` and a hypothetical label ``b``, ``p_b(s)`` is
the value at ``s`` of the isotonic (least-squares, non-decreasing) regression of the labels
on the scores of the calibration rows plus ``(s, b)``, tied scores sharing one value (what
scikit-learn's ``IsotonicRegression`` fits). It depends only on where ``s`` falls:

* ``p0(s) = lower[g]`` with ``g = #{j : s'_j <= s}`` (a label 0 tied with ``s'_g`` pools as
  if just above it);
* ``p1(s) = upper[g]`` with ``g = #{j : s'_j < s}`` (a label 1 tied with ``s'_{g+1}`` pools as
  if just below it); ``upper[k] = 1``, ``lower[0] = 0``.

These tie rules are the ``venn-abers`` package's (``searchsorted`` ``"right"`` for ``p0``,
``"left"`` for ``p1``) and are exact, not a convention: the tests compare every entry with
scikit-learn refitted on the calibration rows plus the test row.

**How.** The isotonic value at the test object is the slope of the greatest convex minorant
(GCM) of the cumulative sum diagram ``P_j = (w_1 + ... + w_j, y_1 + ... + y_j)`` (``P_0 =
(0, 0)``) with the test object's step inserted, at that step. For label 1 inserted with
``s'_i``, moving the diagram's left part down by ``(1, 1)`` instead, the points are ``P_{-1} =
(-1, -1)``, ``P_u - (1, 1)`` (``u < i``) and ``P_v`` (``v >= i``); Algorithm 1 builds the GCM
of ``P_{-1}, P_0, ..., P_k`` with a stack, Algorithm 2 walks ``i = 1..k`` reading the slope of
its first segment and replacing ``P_{i-1}`` by ``P_i - (1, 1)`` (pushing it onto the front
when it lies below that segment, after popping the corners it hides). Algorithms 3-4 are the
mirror image for label 0 (``P_{k+1} = P_k + (1, 0)``, points moved right by ``(1, 0)``). Each
pass is ``O(k)`` amortised after sorting; every test is an exact int64 cross product and every
value one float64 division, so the numba and torch paths agree bit for bit.

**Which path.** The stack walks are sequential within a map. With numba (the ``full`` extra)
each map is a compiled loop and blocks of maps run on all threads
(:mod:`selfcal._kernels.venn_abers`); without it (or with ``SELFCAL_KERNELS=0``, or off the
CPU) the same walks run in torch in lockstep over the maps (:func:`_lockstep_tables`), each
step a few dozen vector operations on ``(M,)`` tensors. Measured on two cores, fitting
25,000 calibration rows of 1,000 classes (one-vs-rest): 6.9 s with numba, 39.4 s with the
lockstep -- the sorting and the diagrams are the same (4 s), the walks are the difference
(0.3 s against 32 s) -- so numba is the path and torch the fallback; predicting 25,000 test
rows takes about 5 s either way.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from selfcal._kernels import venn_abers_kernels

FIT_ELEMENTS = 1 << 22
"""Calibration scores sorted at a time (maps per block: this over the rows) on the numba
path; the lockstep path takes every map at once (its cost is per step, not per map)."""
LOOKUP_ELEMENTS = 1 << 22
"""Test scores looked up at a time (maps per block: this over the test rows)."""


def fit_tables(
    scores: torch.Tensor, targets: torch.Tensor
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The tables of the ``M`` maps of ``(n, M)`` float64 ``scores`` and ``(n, M)`` 0/1
    ``targets``: ``(thresholds, lower, upper, sizes)``, each map's distinct scores ``s'``
    (``sizes[m]`` of them) and its ``sizes[m] + 1`` values of ``p0`` and ``p1`` (module
    docstring), concatenated map after map."""
    kernels = venn_abers_kernels(scores.device)
    per_block = scores.shape[1] if kernels is None else max(1, FIT_ELEMENTS // scores.shape[0])
    parts = []
    for start in range(0, scores.shape[1], per_block):
        block = slice(start, start + per_block)
        s = scores[:, block].T.contiguous()
        t = targets[:, block].T.to(torch.int64)
        thresholds, w, y, sizes = _diagrams(s, t)
        if kernels is not None:
            lower, upper = kernels.tables(w.cpu(), y.cpu(), sizes.cpu())
        else:
            lower, upper = _lockstep_tables(w, y, sizes)
        parts.append(_ragged(thresholds, lower, upper, sizes))
    return tuple(np.concatenate(column) for column in zip(*parts))  # type: ignore[return-value]


def _diagrams(
    s: torch.Tensor, t: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each row's distinct scores (padded with ``+inf``), its cumulative sum diagram ``(w, y)``
    (``(M, K + 1)`` int64, column 0 zero, padded by repeating the last point) and the number
    of distinct scores."""
    m, n = s.shape
    ss, order = torch.sort(s, dim=1)  # the order within ties does not matter
    last = torch.ones_like(ss, dtype=torch.bool)
    last[:, :-1] = ss[:, 1:] != ss[:, :-1]  # the last row of each run of tied scores
    sizes = last.sum(1)
    k = int(sizes.max())
    groups = torch.arange(k, device=s.device) < sizes.unsqueeze(1)  # row-major, as `last`
    thresholds = torch.full((m, k), math.inf, dtype=s.dtype, device=s.device)
    thresholds[groups] = ss[last]
    w = torch.zeros((m, k + 1), dtype=torch.int64, device=s.device)
    y = torch.zeros_like(w)
    w[:, 1:][groups] = torch.arange(1, n + 1, device=s.device).expand(m, n)[last]
    y[:, 1:][groups] = torch.cumsum(t.gather(1, order), 1)[last]
    pad = torch.arange(k + 1, device=s.device) > sizes.unsqueeze(1)
    w = torch.where(pad, w.gather(1, sizes.unsqueeze(1)), w)
    y = torch.where(pad, y.gather(1, sizes.unsqueeze(1)), y)
    return thresholds, w, y, sizes


def _ragged(
    thresholds: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor, sizes: torch.Tensor
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The padded tables of a block of maps as concatenated numpy arrays."""
    counts = sizes.cpu().unsqueeze(1)
    positions = torch.arange(thresholds.shape[1] + 1)
    values = positions <= counts
    return (
        thresholds.cpu()[positions[:-1] < counts].numpy(),
        lower.cpu()[values].numpy(),
        upper.cpu()[values].numpy(),
        sizes.cpu().numpy().astype(np.int64),
    )


def padded(
    thresholds: np.ndarray, lower: np.ndarray, upper: np.ndarray, sizes: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Concatenated tables back as ``(M, K)`` thresholds padded with ``+inf`` (never at or
    below a score, so ``searchsorted`` stops at a map's own ``k``) and ``(M, K + 1)`` values
    padded with 0 (never read)."""
    counts = torch.as_tensor(np.asarray(sizes, dtype=np.int64)).unsqueeze(1)
    positions = torch.arange(int(counts.max()) + 1)
    thr = torch.full((len(counts), len(positions) - 1), math.inf, dtype=torch.float64)
    thr[positions[:-1] < counts] = torch.as_tensor(np.asarray(thresholds, dtype=np.float64))
    values = positions <= counts
    low = torch.zeros((len(counts), len(positions)), dtype=torch.float64)
    high = torch.zeros_like(low)
    low[values] = torch.as_tensor(np.asarray(lower, dtype=np.float64))
    high[values] = torch.as_tensor(np.asarray(upper, dtype=np.float64))
    return thr, low, high


def lookup(
    tables: tuple[torch.Tensor, torch.Tensor, torch.Tensor], scores: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(p0, p1)`` of ``(N, M)`` test ``scores`` under the padded ``tables`` of ``M`` maps
    (:func:`padded`), each ``(N, M)`` float64 on the scores' device."""
    thr, lower, upper = (t.to(scores.device) for t in tables)
    n, m = scores.shape
    p0 = torch.empty((n, m), dtype=torch.float64, device=scores.device)
    p1 = torch.empty_like(p0)
    per_block = max(1, LOOKUP_ELEMENTS // max(n, 1))
    for start in range(0, m, per_block):
        block = slice(start, start + per_block)
        s = scores[:, block].T.contiguous().to(thr.dtype)
        at_or_below = torch.searchsorted(thr[block], s, right=True)
        below = torch.searchsorted(thr[block], s, right=False)
        p0[:, block] = lower[block].gather(1, at_or_below).T
        p1[:, block] = upper[block].gather(1, below).T
    return p0, p1


def merge(p0: torch.Tensor, p1: torch.Tensor, rule: str) -> torch.Tensor:
    """The merged probability of ``F`` Venn-Abers pairs (``(F, ...)`` tensors, one per fold):
    ``"log"`` -- ``GM(p1) / (GM(1 - p0) + GM(p1))`` with ``GM`` the geometric mean over folds,
    ``p1 / (1 - p0 + p1)`` for one fold (Vovk et al.'s minimax probability for log loss;
    the formula of ``venn-abers`` and MAPIE's cross Venn-Abers); ``"brier"`` -- ``mean(p1) +
    mean(p0^2) / 2 - mean(p1^2) / 2`` (their Brier-loss merge). Both lie in ``[min p0,
    max p1]``."""
    if rule == "brier":
        return p1.mean(0) + (p0.square().mean(0) - p1.square().mean(0)) / 2
    if p0.shape[0] == 1:
        return p1[0] / (1 - p0[0] + p1[0])
    high = _geometric_mean(p1)
    return high / (_geometric_mean(1 - p0) + high)


def _geometric_mean(x: torch.Tensor) -> torch.Tensor:
    """``prod(x) ** (1 / F)`` over the first axis, as ``venn-abers`` computes it."""
    return x.prod(0) ** (1.0 / x.shape[0])


# ------------------------------------------------------------------- the lockstep torch path
def _lockstep_tables(
    w: torch.Tensor, y: torch.Tensor, sizes: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The numba kernel's tables, its stack walks run in torch on all maps at once: step
    ``t`` handles the ``t``-th point of every map still that long, and each pop loop repeats
    while any map pops."""
    return _lockstep_lower(w, y, sizes), _lockstep_upper(w, y, sizes)


def _turn(
    ax: torch.Tensor,
    ay: torch.Tensor,
    bx: torch.Tensor,
    by: torch.Tensor,
    cx: torch.Tensor,
    cy: torch.Tensor,
) -> torch.Tensor:
    """``(b - a) x (c - b)`` elementwise (see :func:`selfcal._kernels.venn_abers._turn`)."""
    return (bx - ax) * (cy - by) - (by - ay) * (cx - bx)


class _Deque:
    """A stack per map, ``(M, L)`` int64 points ``(hx, hy)``: a hull built by pushing at
    the top (``h`` points), then read from the bottom as a deque whose front is ``b``."""

    def __init__(self, m: int, length: int, device: torch.device) -> None:
        self.hx = torch.zeros((m, length), dtype=torch.int64, device=device)
        self.hy = torch.zeros_like(self.hx)
        self.h = torch.zeros(m, dtype=torch.int64, device=device)
        self.b = torch.zeros_like(self.h)
        self.rows = torch.arange(m, device=device)
        self.last = length - 1

    def at(self, i: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        i = i.clamp(0, self.last)
        return self.hx[self.rows, i], self.hy[self.rows, i]

    def put(self, i: torch.Tensor, x: torch.Tensor, y: torch.Tensor, where: torch.Tensor) -> None:
        i = i.clamp(0, self.last)
        ox, oy = self.at(i)
        self.hx[self.rows, i] = torch.where(where, x, ox)
        self.hy[self.rows, i] = torch.where(where, y, oy)

    def build(self, px: torch.Tensor, py: torch.Tensor, active: torch.Tensor, sign: int) -> None:
        """Push one point per active map, first popping the top while it does not turn
        left (``sign`` 1; right for -1) -- the lower hull's stack."""
        while True:
            ax, ay = self.at(self.h - 2)
            bx, by = self.at(self.h - 1)
            pop = active & (self.h >= 2) & (sign * _turn(ax, ay, bx, by, px, py) <= 0)
            if not bool(pop.any()):
                break
            self.h -= pop.long()
        self.put(self.h, px, py, active)
        self.h += active.long()

    def slope(self) -> torch.Tensor:
        ax, ay = self.at(self.b)
        bx, by = self.at(self.b + 1)
        return (by - ay).double() / (bx - ax).double()

    def replace_front(
        self, px: torch.Tensor, py: torch.Tensor, active: torch.Tensor, sign: int
    ) -> None:
        """Algorithm 2's (``sign`` 1) or 4's (-1) step: where the new point lies below the
        first segment, pop the front and the corners the point hides, and push it."""
        ax, ay = self.at(self.b)
        bx, by = self.at(self.b + 1)
        below = active & (sign * _turn(ax, ay, bx, by, px, py) < 0)
        if not bool(below.any()):
            return
        self.b += below.long()
        while True:
            ax, ay = self.at(self.b)
            bx, by = self.at(self.b + 1)
            hidden = below & (self.h - self.b >= 2) & (sign * _turn(px, py, ax, ay, bx, by) <= 0)
            if not bool(hidden.any()):
                break
            self.b += hidden.long()
        self.b -= below.long()
        self.put(self.b, px, py, below)


def _lockstep_upper(w: torch.Tensor, y: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    m, k1 = w.shape
    stack = _Deque(m, k1 + 2, w.device)
    minus = torch.full((m,), -1, dtype=torch.int64, device=w.device)
    for t in range(k1 + 1):  # P_{-1}, P_0, ..., P_k
        px, py = (minus, minus) if t == 0 else (w[:, t - 1], y[:, t - 1])
        stack.build(px, py, t <= sizes + 1, 1)
    upper = torch.ones((m, k1), dtype=torch.float64, device=w.device)
    for i in range(1, k1):
        active = i <= sizes
        upper[:, i - 1] = torch.where(active, stack.slope(), upper[:, i - 1])
        stack.replace_front(w[:, i] - 1, y[:, i] - 1, active, 1)
    return upper


def _lockstep_lower(w: torch.Tensor, y: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    m, k1 = w.shape
    stack = _Deque(m, k1 + 2, w.device)
    rows = torch.arange(m, device=w.device)
    for step in range(k1 + 1):  # P_{k+1} = P_k + (1, 0), P_k, ..., P_0
        t = sizes + 1 - step
        j = t.clamp(0, k1 - 1)
        extra = t == sizes + 1
        px = torch.where(extra, w[rows, sizes] + 1, w[rows, j])
        py = torch.where(extra, y[rows, sizes], y[rows, j])
        stack.build(px, py, t >= 0, -1)
    lower = torch.zeros((m, k1), dtype=torch.float64, device=w.device)
    for step in range(k1 - 1):
        i = sizes - step
        active = i >= 1
        at = i.clamp(1, k1 - 1)
        lower[rows, at] = torch.where(active, stack.slope(), lower[rows, at])
        stack.replace_front(w[rows, at - 1] + 1, y[rows, at - 1], active, -1)
    return lower
