"""Input checks and reductions shared by every training loss.

Losses run inside the training loop, once per minibatch, so the per-call checks are cheap:
shapes and dtypes (Python only) and one ``aminmax`` over the labels -- skipped inside
:func:`labels_checked`, which the training loop enters once it has checked every label of its
data (reading the ``aminmax`` would make each step wait for the device). Logits are *not* scanned
for NaN/inf: a non-finite logit gives a non-finite loss, which
:func:`selfcal.training.fit` reports as :class:`~selfcal.exceptions.TrainingDiverged` -- raising
``ValueError`` here would turn a diverged run into a crash. Hyperparameters are checked once,
when a loss or weight object is built.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Literal

import torch

from selfcal._validation import check_choice

Reduction = Literal["sum", "mean", "none"]
REDUCTIONS: tuple[str, ...] = ("sum", "mean", "none")
_INTEGER_DTYPES = frozenset({torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8})


_LABELS_CHECKED: ContextVar[bool] = ContextVar("labels_checked", default=False)


@contextmanager
def labels_checked() -> Iterator[None]:
    """Inside, the losses trust that their labels lie in ``[0, C)``: the caller has checked
    them (the training loop checks its training and validation labels once)."""
    token = _LABELS_CHECKED.set(True)
    try:
        yield
    finally:
        _LABELS_CHECKED.reset(token)


_GAMMAS_CHECKED: ContextVar[bool] = ContextVar("gammas_checked", default=False)


@contextmanager
def gammas_checked() -> Iterator[None]:
    """Inside, a per-sample ``gamma`` tensor is trusted to be finite and ``>= 0`` without
    reading it on the host: the γ-Net meta step, whose γ is ``|...| / tau`` by construction and
    whose finiteness it checks once an epoch."""
    token = _GAMMAS_CHECKED.set(True)
    try:
        yield
    finally:
        _GAMMAS_CHECKED.reset(token)


def gammas_are_checked() -> bool:
    """Whether the caller is inside :func:`gammas_checked`."""
    return _GAMMAS_CHECKED.get()


def check_reduction(reduction: str) -> None:
    """``reduction`` must be ``"mean"`` (the default), ``"sum"`` (the reference code's) or
    ``"none"``."""
    check_choice("reduction", reduction, REDUCTIONS)


def reduce(per_sample: torch.Tensor, reduction: str) -> torch.Tensor:
    """Sum, mean, or the per-sample vector itself."""
    if reduction == "sum":
        return per_sample.sum()
    if reduction == "mean":
        return per_sample.mean()
    return per_sample


def check_logits_labels(logits: object, labels: object) -> torch.Tensor:
    """Validate ``logits (N, C)`` and integer ``labels (N,)`` in ``[0, C)``; return int64 labels."""
    if not isinstance(logits, torch.Tensor) or not isinstance(labels, torch.Tensor):
        raise ValueError(
            "logits and labels must be torch tensors, got "
            f"{type(logits).__name__} and {type(labels).__name__}"
        )
    if logits.ndim != 2 or logits.shape[0] == 0 or logits.shape[1] < 2:
        raise ValueError(
            f"logits must have shape (N, C) with N >= 1, C >= 2, got {tuple(logits.shape)}"
        )
    if not logits.is_floating_point():
        raise ValueError(f"logits must be floating point, got dtype {logits.dtype}")
    if labels.ndim != 1 or labels.shape[0] != logits.shape[0]:
        raise ValueError(
            f"labels must have shape ({logits.shape[0]},) to match logits, "
            f"got {tuple(labels.shape)}"
        )
    if labels.dtype not in _INTEGER_DTYPES:
        raise ValueError(f"labels must hold integer class indices, got dtype {labels.dtype}")
    if not _LABELS_CHECKED.get():
        extremes = torch.aminmax(labels)
        low, high, n_classes = int(extremes.min), int(extremes.max), logits.shape[1]
        if low < 0 or high >= n_classes:
            raise ValueError(
                f"labels must lie in [0, {n_classes}), found label {low if low < 0 else high}"
            )
    return labels if labels.dtype == torch.int64 else labels.long()


def check_per_sample(values: torch.Tensor, n: int, name: str) -> None:
    """A per-sample tensor must be 0-D or have shape ``(n,)``."""
    if values.ndim > 1 or (values.ndim == 1 and values.shape[0] != n):
        raise ValueError(f"{name} must be a scalar or have shape ({n},), got {tuple(values.shape)}")
