"""Deployment modules: the fitted map of every calibrator as a ``torch.nn.Module``
(:meth:`selfcal.posthoc.Calibrator.to_module`).

Each module takes ``(N, C)`` scores -- logits, or probabilities when built with
``from_probs=True`` -- and returns ``(N, C)`` calibrated logits: the new logits of the linear
calibrators, the log of the calibrated probabilities for the others. ``softmax`` of the output
is the calibrator's ``predict_proba``: the modules turn scores into the calibrators' inputs
exactly as :class:`~selfcal.Predictions` does (``log(max(p, tiny))`` for probabilities,
``1 / sum_k exp(z_k - max z)`` for the top-label confidence of logits) and then apply the same
float64 formulas.

The fitted values are buffers (``state_dict`` holds them; ``module.to(device)`` /
``module.float()`` move and cast them); the input is cast to the buffers' dtype. Every forward
is written in the TorchScript subset with shapes fixed by the buffers (no data-dependent
Python control flow), so ``torch.export.export`` and ``torch.jit.script`` both accept it. Tables
of different lengths per class (isotonic knots, BBQ cut points) are padded to one ``(R, K)``
tensor: cut points with ``+inf`` (never below a score), knots by repeating the last one, with
the true lengths in a buffer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch


def _tiny(x: torch.Tensor) -> float:
    """``torch.finfo(x.dtype).tiny`` for float64 and float32 (TorchScript has neither
    ``finfo`` nor module constants)."""
    if x.dtype == torch.float64:
        return 2.2250738585072014e-308
    return 1.1754943508222875e-38


def score_logits(scores: torch.Tensor, from_probs: bool) -> torch.Tensor:
    """The scores the logit-based calibrators use: logits as given, ``log(max(p, tiny))`` for
    probabilities (``selfcal.posthoc._scores.scores_as_logits``)."""
    if from_probs:
        return scores.clamp_min(_tiny(scores)).log()
    return scores


def score_log_probs(scores: torch.Tensor, from_probs: bool) -> torch.Tensor:
    """``log p``: ``log_softmax(z)``, or ``log(max(p, tiny))`` (``Predictions.log_probs``)."""
    if from_probs:
        return scores.clamp_min(_tiny(scores)).log()
    return torch.log_softmax(scores, dim=1)


def score_probs(scores: torch.Tensor, from_probs: bool) -> torch.Tensor:
    """``p``: ``softmax(z)``, or the probabilities as given (``Predictions.probs``)."""
    if from_probs:
        return scores
    return torch.softmax(scores, dim=1)


def top_label(scores: torch.Tensor, from_probs: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-label confidence and predicted class (first index on ties) as
    :class:`~selfcal.Predictions` computes them: ``max p``, or ``1 / sum_k exp(z_k - max z)``."""
    top, predicted = torch.max(scores, dim=1)
    if from_probs:
        return top, predicted
    return torch.exp(scores - top.unsqueeze(1)).sum(1).reciprocal(), predicted


def renormalise(p: torch.Tensor) -> torch.Tensor:
    """Rows divided by their sums; a row summing to 0 becomes uniform ``1/C`` (as
    scikit-learn's ``CalibratedClassifierCV`` does). One function for the calibrators and
    their modules (TorchScript-compatible)."""
    total = p.sum(1, keepdim=True)
    uniform = torch.full_like(p, 1.0 / p.shape[1])
    return torch.where(total > 0, p / total.clamp_min(_tiny(p)), uniform)


def log_one_minus(log_p: torch.Tensor) -> torch.Tensor:
    """``log(1 - p_j) = log sum_{k != j} p_k`` per entry from the log-probabilities, without
    the cancellation of ``1 - p_j`` near 1: with ``e_k = exp(log p_k - max_l log p_l)`` and
    ``S = sum_k e_k``, the sum over ``k != j`` is ``S - e_j`` for every ``j`` but the row's
    argmax (``e_j <= e_max``, so ``S - e_j >= S / C``: no cancellation), and the directly
    summed non-top entries for the argmax."""
    top, arg = torch.max(log_p, dim=1, keepdim=True)
    e = torch.exp(log_p - top)
    total = e.sum(1, keepdim=True)
    rest_of_top = e.scatter(1, arg, 0.0).sum(1, keepdim=True)
    others = (total - e).scatter(1, arg, rest_of_top)
    return others.clamp_min(_tiny(log_p)).log() - total.log()


def padded_table(values: np.ndarray, counts: np.ndarray, fill: float) -> np.ndarray:
    """Concatenated per-row tables (``counts[r]`` entries each) as one ``(R, max count)``
    array, each row padded with ``fill`` (``nan``: repeat the row's last entry)."""
    width = max(int(counts.max()), 1)
    out = np.empty((len(counts), width), dtype=np.float64)
    start = 0
    for r, n in enumerate(int(c) for c in counts):
        row = values[start : start + n]
        out[r, :n] = row
        out[r, n:] = row[-1] if np.isnan(fill) and n else fill
        start += n
    return out


def batched_interp(
    x: torch.Tensor, xp: torch.Tensor, fp: torch.Tensor, counts: torch.Tensor
) -> torch.Tensor:
    """``interp`` of ``selfcal.posthoc._tensors`` for ``R`` maps at once: column ``r`` of ``x``
    ``(N, R)`` through the knots ``xp[r, :counts[r]]``, ``fp[r, :counts[r]]`` (rows padded by
    repeating the last knot), constant beyond the ends; a single-knot map is constant. The
    same float64 arithmetic as ``interp``, so the values are identical."""
    last = (counts - 1).unsqueeze(0)
    lo = xp[:, 0].unsqueeze(0)
    hi = xp.gather(1, (counts - 1).unsqueeze(1)).squeeze(1).unsqueeze(0)
    xc = torch.minimum(torch.maximum(x, lo), hi)
    i = torch.searchsorted(xp, xc.t().contiguous(), right=True).t() - 1
    i = torch.minimum(i.clamp_min(0), (last - 1).clamp_min(0))
    x0 = xp.t().gather(0, i)
    y0 = fp.t().gather(0, i)
    x1 = xp.t().gather(0, torch.minimum(i + 1, last))
    y1 = fp.t().gather(0, torch.minimum(i + 1, last))
    single = (counts == 1).unsqueeze(0)
    width = torch.where(single, torch.ones_like(x1), x1 - x0)
    return torch.where(single, y0, y0 + (xc - x0) * ((y1 - y0) / width))


def _buffer(value: np.ndarray | float) -> torch.Tensor:
    return torch.as_tensor(np.asarray(value, dtype=np.float64))


class ProbFloorModule(torch.nn.Module):
    """Probabilities below ``floor`` raised to it, rows renormalised
    (:meth:`selfcal.Predictions.with_floor`): what a likelihood fit that saw exact zeros
    reads (``prob_floor_``)."""

    if TYPE_CHECKING:
        floor: torch.Tensor

    def __init__(self, floor: float) -> None:
        super().__init__()
        self.register_buffer("floor", _buffer(floor))

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        raised = torch.maximum(scores.to(self.floor.dtype), self.floor)
        return raised / raised.sum(dim=1, keepdim=True)


class TemperatureModule(torch.nn.Module):
    """``z / T`` (logits), or ``log(p) / T`` (probabilities)."""

    if TYPE_CHECKING:  # buffers (TorchScript cannot read string annotations)
        temperature: torch.Tensor
    __constants__ = ("from_probs",)

    def __init__(self, temperature: float, from_probs: bool) -> None:
        super().__init__()
        self.register_buffer("temperature", _buffer(temperature))
        self.from_probs = from_probs

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        x = scores.to(self.temperature.dtype)
        return score_logits(x, self.from_probs) / self.temperature


class VectorScalingModule(torch.nn.Module):
    """``w * z + b`` per class (``z = log p`` for probabilities)."""

    if TYPE_CHECKING:  # buffers (TorchScript cannot read string annotations)
        weight: torch.Tensor
        bias: torch.Tensor
    __constants__ = ("from_probs",)

    def __init__(self, weight: np.ndarray, bias: np.ndarray, from_probs: bool) -> None:
        super().__init__()
        self.register_buffer("weight", _buffer(weight))
        self.register_buffer("bias", _buffer(bias))
        self.from_probs = from_probs

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        x = score_logits(scores.to(self.weight.dtype), self.from_probs)
        return x * self.weight + self.bias


class AffineModule(torch.nn.Module):
    """``x W^T + b`` on the logits (matrix scaling) or on ``log p`` (Dirichlet calibration)."""

    if TYPE_CHECKING:  # buffers (TorchScript cannot read string annotations)
        weight: torch.Tensor
        bias: torch.Tensor
    __constants__ = ("from_probs", "on_log_probs")

    def __init__(
        self, weight: np.ndarray, bias: np.ndarray, from_probs: bool, on_log_probs: bool
    ) -> None:
        super().__init__()
        self.register_buffer("weight", _buffer(weight))
        self.register_buffer("bias", _buffer(bias))
        self.from_probs = from_probs
        self.on_log_probs = on_log_probs

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        x = scores.to(self.weight.dtype)
        if self.on_log_probs:
            x = score_log_probs(x, self.from_probs)
        else:
            x = score_logits(x, self.from_probs)
        return x @ self.weight.t() + self.bias


class PlattModule(torch.nn.Module):
    """``[0, a s + b + q s^2]`` with ``s = z_1 - z_0`` (``logit p_1`` for probabilities);
    ``q = 0`` for Platt scaling."""

    if TYPE_CHECKING:  # buffers (TorchScript cannot read string annotations)
        slope: torch.Tensor
        intercept: torch.Tensor
        quadratic: torch.Tensor
    __constants__ = ("from_probs",)

    def __init__(
        self, slope: float, intercept: float, from_probs: bool, quadratic: float = 0.0
    ) -> None:
        super().__init__()
        self.register_buffer("slope", _buffer(slope))
        self.register_buffer("intercept", _buffer(intercept))
        self.register_buffer("quadratic", _buffer(quadratic))
        self.from_probs = from_probs

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        x = score_logits(scores.to(self.slope.dtype), self.from_probs)
        s = x[:, 1] - x[:, 0]
        u = self.slope * s + self.intercept + self.quadratic * s * s
        return torch.stack([torch.zeros_like(u), u], 1)


class HistogramModule(torch.nn.Module):
    """``log`` of the renormalised per-class bin values, bins ``(e_m, e_{m+1}]``."""

    if TYPE_CHECKING:  # buffers (TorchScript cannot read string annotations)
        inner_edges: torch.Tensor
        bin_values: torch.Tensor
    __constants__ = ("from_probs",)

    def __init__(self, edges: np.ndarray, values: np.ndarray, from_probs: bool) -> None:
        super().__init__()
        self.register_buffer("inner_edges", _buffer(edges[1:-1]))
        self.register_buffer("bin_values", _buffer(values))
        self.from_probs = from_probs

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        p = score_probs(scores.to(self.bin_values.dtype), self.from_probs)
        index = torch.bucketize(p.contiguous(), self.inner_edges, right=False)
        return renormalise(self.bin_values.t().gather(0, index)).log()


class TopLabelIsotonicModule(torch.nn.Module):
    """``log`` of top-label isotonic regression's probabilities: ``f(c)`` on the predicted
    class, ``1 - f(c)`` spread over the others in proportion to their probabilities."""

    if TYPE_CHECKING:  # buffers (TorchScript cannot read string annotations)
        x_thresholds: torch.Tensor
        y_thresholds: torch.Tensor
        knot_counts: torch.Tensor
    __constants__ = ("from_probs",)

    def __init__(self, x: np.ndarray, y: np.ndarray, from_probs: bool) -> None:
        super().__init__()
        self.register_buffer("x_thresholds", _buffer(x).reshape(1, -1))
        self.register_buffer("y_thresholds", _buffer(y).reshape(1, -1))
        self.register_buffer("knot_counts", torch.tensor([len(x)], dtype=torch.long))
        self.from_probs = from_probs

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        x = scores.to(self.x_thresholds.dtype)
        p = score_probs(x, self.from_probs)
        conf, predicted = top_label(x, self.from_probs)
        f = batched_interp(
            conf.unsqueeze(1), self.x_thresholds, self.y_thresholds, self.knot_counts
        )
        return log_with_confidence(x, p, predicted, f, self.from_probs)


def log_with_confidence(
    x: torch.Tensor, p: torch.Tensor, predicted: torch.Tensor, f: torch.Tensor, from_probs: bool
) -> torch.Tensor:
    """``log`` of the top-label calibrators' probabilities: the ``(N, 1)`` calibrated
    confidence ``f`` on the predicted class, ``1 - f`` spread over the others in proportion
    to their probabilities ``p`` (``isotonic.with_confidence``; ``x`` the scores)."""
    top = predicted.unsqueeze(1)
    others = p.scatter(1, top, 0.0)
    rest = others.sum(1, keepdim=True)
    normal = rest >= _tiny(p)
    share = others / torch.where(normal, rest, torch.ones_like(rest))
    # runner-ups that underflowed: softmax of their log-scores (isotonic.py's rule)
    masked = (p.log() if from_probs else x).scatter(1, top, float("-inf"))
    uniform = torch.full_like(p, 1.0 / (p.shape[1] - 1)).scatter(1, top, 0.0)
    none = torch.isneginf(masked).all(dim=1, keepdim=True)
    spread = torch.where(none, uniform, torch.softmax(masked.masked_fill(none, 0.0), dim=1))
    share = torch.where(normal, share, spread)
    return (share * (1 - f)).scatter(1, top, f).log()


class OneVsRestModule(torch.nn.Module):
    """``log`` of per-class isotonic maps, renormalised; for two classes one map on class 1,
    ``[1 - f(p_1), f(p_1)]``."""

    if TYPE_CHECKING:  # buffers (TorchScript cannot read string annotations)
        x_thresholds: torch.Tensor
        y_thresholds: torch.Tensor
        knot_counts: torch.Tensor
    __constants__ = ("from_probs", "binary")

    def __init__(self, x: np.ndarray, y: np.ndarray, counts: np.ndarray, from_probs: bool) -> None:
        super().__init__()
        self.register_buffer("x_thresholds", _buffer(padded_table(x, counts, np.nan)))
        self.register_buffer("y_thresholds", _buffer(padded_table(y, counts, np.nan)))
        self.register_buffer("knot_counts", torch.as_tensor(counts, dtype=torch.long))
        self.from_probs = from_probs
        self.binary = len(counts) == 1

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        p = score_probs(scores.to(self.x_thresholds.dtype), self.from_probs)
        if self.binary:
            p1 = batched_interp(
                p[:, 1:], self.x_thresholds, self.y_thresholds, self.knot_counts
            ).squeeze(1)
            return torch.stack([1 - p1, p1], 1).log()
        out = batched_interp(p, self.x_thresholds, self.y_thresholds, self.knot_counts)
        return renormalise(out).log()


class MixtureModule(torch.nn.Module):
    """A calibrator's map mixed with the uniform distribution:
    ``log((1 - eps) softmax(inner(x)) + eps / C)`` (``mix_`` of the calibrator)."""

    if TYPE_CHECKING:  # buffers (TorchScript cannot read string annotations)
        weight: torch.Tensor

    def __init__(self, inner: torch.nn.Module, weight: float) -> None:
        super().__init__()
        self.inner = inner
        self.register_buffer("weight", _buffer(weight))

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        log_p = torch.log_softmax(self.inner(scores), dim=1)
        uniform = torch.log(self.weight / log_p.shape[1])
        return torch.logaddexp(log_p + torch.log1p(-self.weight), uniform)
