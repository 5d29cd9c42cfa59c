"""The one validated pass over class scores that every :class:`~selfcal.predictions.Predictions`
makes: top-label confidence and predicted class, and the checks of the input contract (finite
scores; probabilities in ``[0, 1]`` whose rows sum to 1), in chunks that bound the memory on any
device. The fused CPU kernel (:mod:`selfcal._kernels`) takes large CPU inputs.
"""

from __future__ import annotations

from typing import Literal

import torch

from selfcal._kernels import kernels_for

ScoreKind = Literal["logits", "probs"]

PROB_ATOL = 1e-4
"""Tolerance on ``|sum(row) - 1|`` for probability inputs of float32 / float64 (see
:func:`prob_atol` for the lower precisions)."""

CHUNK_ROWS = 1 << 18
"""Rows per chunk in the fused validation pass on the CPU (keeps each chunk in cache)."""

DEVICE_CHUNK_ELEMENTS = 1 << 24
"""Scores per chunk of the validation pass on other devices: the float64 copy of a chunk is
at most 128 MB whatever ``N`` (a whole ``(50 000, 21 000)`` float64 copy would be 8 GB)."""


def first_row(mask: torch.Tensor) -> int:
    """Index of the first True entry of a 1-D boolean tensor."""
    return int(torch.nonzero(mask)[0, 0])


def top_label_pass(scores: torch.Tensor, kind: ScoreKind) -> tuple[torch.Tensor, ...]:
    """One chunked pass: top-label confidence (float64), predicted class, and what validation
    needs -- row sums and each chunk's minimum (a whole-chunk reduction, much cheaper than
    per-row minima; rows are located only when a chunk fails).

    Chunks of :data:`CHUNK_ROWS` rows stay in cache while every reduction reads them (on other
    devices, chunks of :data:`DEVICE_CHUNK_ELEMENTS` scores bound the memory: ``O(chunk)``
    temporaries whatever ``N``), and the outputs are written in place (no concatenation). Row
    sums of probabilities (validation only) are one matrix-vector product (BLAS) in the input
    dtype: its rounding error is far below :data:`PROB_ATOL`. The softmax denominator of
    logits is a row reduction instead: BLAS gemv rounds a row's sum differently with the row's
    position in the block, and a confidence that changes in its last bit when rows are
    reordered breaks ties and moves samples across bin edges (AURC and AdaECE would depend on
    the row order)."""
    n, n_classes = scores.shape
    device = scores.device
    conf = torch.empty(n, dtype=torch.float64, device=device)
    pred = torch.empty(n, dtype=torch.long, device=device)
    row_sum = torch.empty(
        n, dtype=scores.dtype if kind == "probs" else torch.float64, device=device
    )
    chunk_min = []
    rows = CHUNK_ROWS if device.type == "cpu" else max(1, DEVICE_CHUNK_ELEMENTS // n_classes)
    top = torch.empty(min(rows, n), dtype=scores.dtype, device=device)
    ones = torch.ones(n_classes, dtype=row_sum.dtype, device=device)
    for start in range(0, n, rows):
        chunk = scores[start : start + rows]
        span = slice(start, start + chunk.shape[0])
        chunk_top = top[: chunk.shape[0]]
        torch.max(chunk, dim=1, out=(chunk_top, pred[span]))
        chunk_min.append(chunk.amin())
        if kind == "probs":
            conf[span].copy_(chunk_top)
            torch.mv(chunk, ones, out=row_sum[span])
        else:  # softmax max = 1 / sum_k exp(z_k - max z)
            shifted = (chunk.double() - chunk_top.double().unsqueeze(1)).exp_()
            torch.sum(shifted, dim=1, out=row_sum[span])
            torch.reciprocal(row_sum[span], out=conf[span])
    return conf, pred, row_sum, torch.stack(chunk_min)


def top_label(
    scores: torch.Tensor, kind: ScoreKind, atol: float = PROB_ATOL, *, checked: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validated top-label confidence (float64) and predicted class: one fused kernel pass
    on large CPU inputs (:mod:`selfcal._kernels`), else :func:`top_label_pass`, which also
    finds and names the first invalid row when the kernel reports one. ``atol``: the row-sum
    tolerance of probabilities (:func:`prob_atol` of their dtype as given). ``checked=False``
    skips the rows' check (the same numbers; no value is read on the host), for scores the
    caller already trusts."""
    kernels = kernels_for(scores.numel(), scores.device)
    if kernels is not None:
        fast = kernels.top_label(scores, kind, atol)
        if fast is not None:
            return fast
    with torch.no_grad():
        stats = top_label_pass(scores, kind)
    if checked:
        check_rows(scores, kind, stats, atol)
    return stats[0], stats[1]


def differentiable_confidence(
    scores: torch.Tensor, kind: ScoreKind, predicted: torch.Tensor
) -> torch.Tensor:
    """``p_{i, argmax}`` in float64 with the autograd graph back to ``scores``."""
    top = scores.double().gather(1, predicted.unsqueeze(1)).squeeze(1)
    if kind == "probs":
        return top
    return torch.exp(top - torch.logsumexp(scores.double(), dim=1))


def _rows_ok(
    scores: torch.Tensor, kind: ScoreKind, stats: tuple[torch.Tensor, ...], atol: float
) -> bool:
    """Fast path: whole-array reductions (a few scalars) that are all true iff every row is
    valid; NaN fails every comparison, so it lands on the slow path too."""
    conf, _, row_sum, chunk_min = stats
    if kind == "logits":  # a NaN or +inf logit makes the row sum NaN; -inf shows in the minimum
        return bool(torch.isfinite(row_sum).all() & torch.isfinite(chunk_min).all())
    lo, hi = torch.aminmax(row_sum)
    return bool((chunk_min.amin() >= 0) & (conf.amax() <= 1) & (lo >= 1 - atol) & (hi <= 1 + atol))


NOT_NORMALISED = 1e-2
"""A row sum this far from 1 reads as unnormalised scores (logits), not rounded probabilities."""


def check_rows(
    scores: torch.Tensor,
    kind: ScoreKind,
    stats: tuple[torch.Tensor, ...],
    atol: float = PROB_ATOL,
) -> None:
    """Raise for the first invalid row (see the module docstring for the rules)."""
    if _rows_ok(scores, kind, stats, atol):
        return
    conf, _, row_sum = stats[:3]
    nonfinite = ~torch.isfinite(scores).all(dim=1)
    if bool(nonfinite.any()):
        i = first_row(nonfinite)
        raise ValueError(f"{kind} contain NaN or infinity; first at row {i}")
    bad = (scores.amin(dim=1) < 0) | (conf > 1)
    if bool(bad.any()):
        i = first_row(bad)
        raise ValueError(
            f"probs must lie in [0, 1]; row {i} has values in "
            f"[{scores[i].min().item():.6g}, {conf[i].item():.6g}] "
            "(raw scores are logits, not probs)"
        )
    i = first_row((row_sum - 1).abs() > atol)
    total = row_sum[i].item()
    hint = (
        "unnormalised scores are logits, not probs"
        if abs(total - 1) > NOT_NORMALISED
        else "renormalise them, p / p.sum(1, keepdims=True), or pass float16 / bfloat16 "
        "probabilities in their own dtype, whose rounding is allowed for"
    )
    raise ValueError(
        f"probs rows must sum to 1 (tolerance {atol:g}); row {i} sums to {total:.6g} ({hint})"
    )
