"""The input contract shared by every metric, calibrator and plot.

A user always says what the class scores are -- ``logits=`` or ``probs=`` -- and never has
selfcal guess from the value range. Scores may be numpy arrays or torch tensors (any device);
labels are integers in ``[0, C)``. One validated :class:`Predictions` object carries them, so a
caller who computes many metrics validates once.

Rules (each violation raises :class:`ValueError` naming the problem and, where it applies, the
first offending row):

* scores are 2-D ``(N, C)`` with ``C >= 2``, or binary given as one column: shape ``(N,)`` or
  ``(N, 1)`` holding the positive-class probability ``p`` (expanded to ``[1 - p, p]``) or the
  positive-class logit ``z`` (expanded to ``[0, z]``, whose softmax is ``[1 - sigmoid(z),
  sigmoid(z)]``). One and two columns give identical answers.
* ``N >= 1``; every score finite.
* probabilities lie in ``[0, 1]`` and each row sums to 1 within :func:`prob_atol` of their
  dtype: ``PROB_ATOL`` (absolute), or the dtype's machine epsilon where that is larger
  (float16 ``9.8e-4``, bfloat16 ``7.8e-3``: rounding each probability of a row to the dtype
  moves the row sum by at most half of it, so AMP outputs are accepted as they come).
* labels are 1-D of length ``N``, integer-valued (integer dtype, bool, or floats that are whole
  numbers) and in ``[0, C)`` -- the one label rule of every boundary
  (:func:`selfcal._inputs.as_labels`). Class *names* (strings) are refused with one message
  (:data:`STRING_LABELS`): score columns have no names, so nothing says which column is
  ``'cat'``.
* groups, where given, name each row's group (or groups: overlapping membership columns),
  checked by the one group rule (:func:`selfcal._inputs.as_groups`): one per row, no missing
  or empty name. Metrics that ignore groups read the same rows as without them; the group
  metrics (:mod:`selfcal.metrics.groups`) read them from here.

Scores keep their floating dtype on input (float16/bfloat16 are widened to float32); every
quantity derived from them is computed and accumulated in float64. On a device without float64
(Apple MPS, :data:`NO_FLOAT64_DEVICES`) the scores and labels are copied to the CPU first, so the
numbers are the CPU's exactly -- no float32 approximation of a metric, at the price of one copy
of the ``(N, C)`` scores (on Apple silicon's unified memory, a memory copy); results are then CPU
tensors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch

from selfcal._inputs import Groups, as_groups, as_labels, to_tensor
from selfcal._kernels import kernels_for
from selfcal._top_label import (
    DEVICE_CHUNK_ELEMENTS,
    PROB_ATOL,
    ScoreKind,
    differentiable_confidence,
    first_row,
    top_label,
)

ArrayLike = Any  # numpy array, torch tensor, or nested sequence

NO_FLOAT64_DEVICES = frozenset({"mps"})
"""Device types that cannot hold float64 tensors; predictions made there are scored on the CPU."""


def on_float64_device(t: torch.Tensor) -> torch.Tensor:
    """``t``, or its copy on the CPU where its device has no float64 (:data:`NO_FLOAT64_DEVICES`);
    autograd follows the copy."""
    return t.cpu() if t.device.type in NO_FLOAT64_DEVICES else t


def prob_atol(dtype: torch.dtype) -> float:
    """Tolerance on ``|sum(row) - 1|`` for probabilities stored in ``dtype``:
    ``max(PROB_ATOL, eps(dtype))``. Rounding each entry of a row that sums to 1 moves the sum
    by at most ``eps / 2``; the bound is doubled for a softmax computed in that dtype."""
    if not dtype.is_floating_point:
        return PROB_ATOL
    return max(PROB_ATOL, float(torch.finfo(dtype).eps))


def _as_float_scores(scores: torch.Tensor, kind: ScoreKind) -> torch.Tensor:
    if scores.dtype in (torch.float16, torch.bfloat16):
        return scores.float()
    if scores.dtype == torch.bool or not scores.is_floating_point():
        if scores.is_complex():
            raise ValueError(f"{kind} must be real numbers, got {scores.dtype}")
        return scores.double()
    return scores


def _expand_binary(scores: torch.Tensor, kind: ScoreKind) -> torch.Tensor:
    """(N,) or (N, 1) positive-class scores -> (N, 2)."""
    col = scores.reshape(-1)
    if kind == "probs":
        return torch.stack([1 - col, col], dim=1)
    return torch.stack([torch.zeros_like(col), col], dim=1)


def validate_scores(scores: ArrayLike, kind: ScoreKind) -> torch.Tensor:
    """Shape and dtype checks; returns a float ``(N, C)`` tensor with ``C >= 2``."""
    t = _as_float_scores(to_tensor(scores, kind), kind)
    if t.ndim == 1 or (t.ndim == 2 and t.shape[1] == 1):
        t = _expand_binary(t, kind)
    if t.ndim != 2:
        raise ValueError(f"{kind} must be 1-D (binary) or 2-D (N, C); got shape {tuple(t.shape)}")
    if t.shape[0] == 0:
        raise ValueError(f"{kind} is empty: need at least one row")
    if t.shape[1] < 2:
        raise ValueError(f"{kind} needs at least 2 classes, got C={t.shape[1]}")
    return t


def looks_like_probabilities(scores: ArrayLike) -> bool:
    """Whether every row of ``scores`` (any dtype; one column = binary) lies in ``[0, 1]``
    and sums to 1 within :func:`prob_atol` of its dtype -- the evidence, never a guess, that
    scores offered as logits (or without a kind) are in fact probabilities. Scores that are
    not a finite 1-D / 2-D float array give ``False``."""
    try:
        t = to_tensor(scores, "scores")
    except ValueError:
        return False
    if not t.is_floating_point() or t.ndim not in (1, 2) or t.numel() == 0:
        return False
    with torch.no_grad():  # one pass for the range, one for the row sums: no float64 copy
        x = t.detach().reshape(t.shape[0], -1)
        low, high = torch.aminmax(x)
        if not bool((low >= 0) & (high <= 1)):  # also False for NaN
            return False
        sums = x.sum(1, dtype=torch.float64)
        return x.shape[1] == 1 or bool(((sums - 1).abs() <= prob_atol(t.dtype)).all())


HEAD_ROWS = 1024
"""The rows :func:`warn_if_probabilities` reads first."""


def warn_if_probabilities(logits: torch.Tensor) -> None:
    """Warn :class:`~selfcal.exceptions.LikelyProbabilities` when ``(N, C)`` scores given as
    logits look like probabilities (:func:`looks_like_probabilities`): read as logits they
    give wrong numbers without an error (an ECE of 0.35 for 0.056, a temperature of 0.24).
    Real logits fail the test on their first rows, so the whole array is read only when those
    pass: on real logits the check reads :data:`HEAD_ROWS` rows, whatever ``N``."""
    if logits.shape[1] < 2 or not looks_like_probabilities(logits[:HEAD_ROWS]):
        return
    if looks_like_probabilities(logits):
        from selfcal._warnings import warn_user
        from selfcal.exceptions import LikelyProbabilities

        warn_user(
            "logits= got scores that look like probabilities (every row lies in [0, 1] and "
            "sums to 1); they are read as logits, as asked -- pass probs= if they are "
            "probabilities",
            LikelyProbabilities,
        )


def validate_labels(
    labels: ArrayLike, n: int, n_classes: int, device: torch.device
) -> torch.Tensor:
    """Labels as int64 on ``device``, checked by the one label rule
    (:func:`selfcal._inputs.as_labels`: length, integrality and range)."""
    return as_labels(labels, n, n_classes, device=device).values


@dataclass(frozen=True, eq=False)
class Predictions:
    """Validated class scores (logits or probabilities) with optional labels.

    Build with :meth:`from_logits`, :meth:`from_probs` or :func:`as_predictions`. Derived
    quantities are float64 and computed once, on the device of the input (the CPU for a device
    without float64: :data:`NO_FLOAT64_DEVICES`).
    """

    scores: torch.Tensor
    """``(N, C)`` float scores as given (binary columns expanded)."""
    kind: ScoreKind
    labels: torch.Tensor | None
    """``(N,)`` int64 labels on the scores' device, or ``None``."""
    confidence: torch.Tensor
    """``(N,)`` float64 top-label confidence ``max_k p_k``."""
    predicted: torch.Tensor
    """``(N,)`` int64 ``argmax_k p_k`` (first index on ties)."""
    from_numpy: bool
    """Whether the caller passed numpy (results are then returned as Python floats / numpy)."""
    groups: Groups | None = None
    """Each row's group(s) (:class:`~selfcal._inputs.Groups`, on the scores' device), or
    ``None``."""

    @classmethod
    def from_logits(
        cls, logits: ArrayLike, labels: ArrayLike | None = None, groups: ArrayLike | None = None
    ) -> Predictions:
        return cls._build(logits, "logits", labels, groups)

    @classmethod
    def from_probs(
        cls, probs: ArrayLike, labels: ArrayLike | None = None, groups: ArrayLike | None = None
    ) -> Predictions:
        return cls._build(probs, "probs", labels, groups)

    @classmethod
    def trusted(cls, scores: torch.Tensor, kind: ScoreKind, labels: torch.Tensor) -> Predictions:
        """Predictions of a float32 / float64 ``(N, C)`` tensor and int64 labels that the caller
        has validated already, built without reading any value on the host (no device sync):
        only shapes and dtypes are checked. For the inside of a training step, whose data the
        loop checked once and whose divergence check catches a non-finite score; the numbers
        are those of :meth:`from_logits` / :meth:`from_probs`. (On a device without float64 the
        copy to the CPU is itself a synchronisation.)"""
        if (
            scores.ndim != 2
            or scores.shape[1] < 2
            or scores.dtype not in (torch.float32, torch.float64)
            or labels.shape != scores.shape[:1]
            or labels.dtype != torch.long
        ):
            raise ValueError(
                "trusted predictions need float32/float64 (N, C >= 2) scores and int64 (N,) "
                f"labels, got {scores.dtype} {tuple(scores.shape)} and {labels.dtype} "
                f"{tuple(labels.shape)}"
            )
        scores, labels = on_float64_device(scores), on_float64_device(labels)
        confidence, predicted = top_label(scores, kind, prob_atol(scores.dtype), checked=False)
        if scores.requires_grad:
            confidence = differentiable_confidence(scores, kind, predicted)
        return cls(scores, kind, labels, confidence, predicted, False)

    @classmethod
    def _build(
        cls,
        raw: ArrayLike,
        kind: ScoreKind,
        labels: ArrayLike | None,
        groups: ArrayLike | None = None,
    ) -> Predictions:
        numpy_in = not isinstance(raw, torch.Tensor)
        given = on_float64_device(to_tensor(raw, kind))
        scores = validate_scores(given, kind)
        confidence, predicted = top_label(scores, kind, prob_atol(given.dtype))
        if scores.requires_grad:  # the smooth metrics differentiate through the confidence
            confidence = differentiable_confidence(scores, kind, predicted)
        y = None
        if labels is not None:
            y = validate_labels(labels, scores.shape[0], scores.shape[1], scores.device)
        g = None if groups is None else as_groups(groups, scores.shape[0], device=scores.device)
        return cls(scores, kind, y, confidence, predicted, numpy_in, g)

    # ----------------------------------------------------------------- derived quantities
    @property
    def n_samples(self) -> int:
        return self.scores.shape[0]

    @property
    def n_classes(self) -> int:
        return self.scores.shape[1]

    @property
    def device(self) -> torch.device:
        return self.scores.device

    def require_groups(self) -> Groups:
        if self.groups is None:
            raise ValueError("groups are required for this computation: pass groups=")
        return self.groups

    def with_groups(self, groups: ArrayLike | None) -> Predictions:
        """The same predictions with ``groups`` (checked by the group rule), or none."""
        g = None if groups is None else as_groups(groups, self.n_samples, device=self.device)
        return dataclasses.replace(self, groups=g)

    def require_labels(self) -> torch.Tensor:
        if self.labels is None:
            raise ValueError("labels are required for this computation")
        return self.labels

    @cached_property
    def log_probs(self) -> torch.Tensor:
        """``(N, C)`` float64 log-probabilities. For probability input, ``log(max(p, tiny))``
        so that a zero probability gives a large finite loss rather than ``inf``."""
        if self.kind == "logits":
            return torch.log_softmax(self.scores.double(), dim=1)
        return self.log_probs_of(self.scores)

    def log_probs_of(self, scores: torch.Tensor) -> torch.Tensor:
        """``log(max(p, tiny))`` in float64 of some of these probability rows: a chunk of
        :attr:`log_probs` for probability input, bit for bit."""
        return scores.double().clamp_min(torch.finfo(torch.float64).tiny).log()

    @cached_property
    def probs(self) -> torch.Tensor:
        """``(N, C)`` float64 probabilities."""
        return self.probs_of(self.scores)

    def probs_of(self, scores: torch.Tensor) -> torch.Tensor:
        """Float64 probabilities of some of these score rows (``softmax`` of logits, row by
        row): a chunk of :attr:`probs`, bit for bit."""
        if self.kind == "logits":
            return torch.softmax(scores.double(), dim=1)
        return scores.double()

    def row_chunks(self, per_row: int | None = None) -> list[slice]:
        """Consecutive slices of the rows, each holding
        :data:`~selfcal._top_label.DEVICE_CHUNK_ELEMENTS` values of ``per_row`` (default: the
        ``C`` scores) a row: a row-wise computation over them keeps its float64 temporaries
        ``O(chunk)`` whatever ``N`` (one slice, every row, below that size)."""
        rows = max(1, DEVICE_CHUNK_ELEMENTS // (per_row or self.n_classes))
        return [slice(start, start + rows) for start in range(0, self.n_samples, rows)]

    def map_rows(
        self, row_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    ) -> torch.Tensor:
        """``row_fn(scores, labels[:, None])`` -> ``(N,)`` over :meth:`row_chunks`. Each row's
        value is computed by the same row-wise operations in any chunk."""
        y = self.require_labels().unsqueeze(1)
        chunks = self.row_chunks()
        if len(chunks) == 1:
            return row_fn(self.scores, y)
        return torch.cat([row_fn(self.scores[rows], y[rows]) for rows in chunks])

    @cached_property
    def correct(self) -> torch.Tensor:
        """``(N,)`` float64 indicator ``1[argmax p = y]``."""
        labels = self.require_labels()
        kernels = kernels_for(self.n_samples, self.device)
        if kernels is not None:
            return kernels.matches(self.predicted, labels)
        return (self.predicted == labels).double()

    def with_confidence(self, confidence: ArrayLike) -> Predictions:
        """The same predictions judged by another top-label confidence -- a calibrated one
        (isotonic ``f(max_k p_k)``) or a smooth maximum (BO4SC's ``boltz_beta(p)``). The
        predicted class, labels and scores are unchanged, so every top-label metric (ECE,
        MCE, AdaECE, AURC, ...) reads the new confidence against the same correctness."""
        c = to_tensor(confidence, "confidence").to(device=self.device, dtype=torch.float64)
        if c.shape != (self.n_samples,):
            raise ValueError(
                f"confidence must have shape ({self.n_samples},), got {tuple(c.shape)}"
            )
        bad = ~torch.isfinite(c) | (c < 0) | (c > 1)
        if bool(bad.any()):
            i = first_row(bad)
            raise ValueError(f"confidence must lie in [0, 1]; row {i} has {c[i].item()!r}")
        return dataclasses.replace(self, confidence=c)

    def with_floor(self, floor: float) -> Predictions:
        """Probabilities below ``floor`` raised to it and each row renormalised,
        ``p' = max(p, floor) / sum_k max(p_k, floor)`` (``self`` for logits, ``floor <= 0``, or
        no probability below it). The predicted class is unchanged while ``floor`` is at most
        every row's largest probability."""
        if self.kind != "probs" or floor <= 0.0 or not bool((self.scores < floor).any()):
            return self
        raised = self.scores.clamp_min(floor)
        p = raised / raised.sum(dim=1, keepdim=True)
        confidence, predicted = top_label(p, "probs", prob_atol(p.dtype))
        return dataclasses.replace(
            self, scores=p, kind="probs", confidence=confidence, predicted=predicted
        )

    def subset(self, index: torch.Tensor | slice) -> Predictions:
        """Rows ``index`` (indices, a mask or a slice; no re-validation needed)."""
        y = None if self.labels is None else self.labels[index]
        g = None if self.groups is None else self.groups[index]
        return Predictions(
            self.scores[index],
            self.kind,
            y,
            self.confidence[index],
            self.predicted[index],
            self.from_numpy,
            g,
        )

    def output(self, value: torch.Tensor) -> Any:
        """Return a result in the caller's form: Python float / numpy for numpy input, a
        float64 tensor on the input device for torch input."""
        if not self.from_numpy:
            return value
        if value.ndim == 0:
            return float(value.detach().cpu())
        return value.detach().cpu().numpy()


def as_predictions(
    predictions: Predictions | None = None,
    *,
    labels: ArrayLike | None = None,
    logits: ArrayLike | None = None,
    probs: ArrayLike | None = None,
    need_labels: bool = True,
    groups: ArrayLike | None = None,
) -> Predictions:
    """Resolve the public ``(predictions | logits= | probs=, labels=, groups=)`` arguments
    (``groups`` given with a :class:`Predictions` replaces its groups)."""
    given = [x is not None for x in (predictions, logits, probs)]
    if sum(given) != 1:
        raise ValueError(
            "pass exactly one of: a Predictions object, logits=..., or probs=... "
            "(selfcal never guesses which one an array is)"
        )
    if predictions is not None:
        if not isinstance(predictions, Predictions):
            raise ValueError(
                "the positional argument must be a selfcal Predictions object; pass arrays as "
                "logits=... or probs=..."
            )
        if labels is not None:
            y = validate_labels(
                labels, predictions.n_samples, predictions.n_classes, predictions.device
            )
            predictions = dataclasses.replace(predictions, labels=y)
        out = predictions if groups is None else predictions.with_groups(groups)
    elif logits is not None:
        out = Predictions.from_logits(logits, labels, groups)
        warn_if_probabilities(out.scores)
    else:
        out = Predictions.from_probs(probs, labels, groups)
    if need_labels:
        out.require_labels()
    return out
