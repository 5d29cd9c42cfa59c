"""Input checks and reductions shared by every training loss.

Losses run inside the training loop, once per minibatch, so the per-call checks are cheap:
shapes and dtypes (Python only) and, for raw label tensors, the one label rule
(:func:`selfcal._inputs.as_labels`: one ``aminmax`` over the labels). Labels given as
:class:`~selfcal._inputs.Labels` -- the training loop hands its steps' losses the rows of the
labels it checked once a run -- are trusted and no value of theirs is read (reading the
``aminmax`` would make each step wait for the device). Logits are *not* scanned
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

from selfcal._inputs import Labels, as_labels
from selfcal._validation import check_choice

Reduction = Literal["sum", "mean", "none"]
REDUCTIONS: tuple[str, ...] = ("sum", "mean", "none")


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
    """Validate ``logits (N, C)`` and ``labels (N,)`` in ``[0, C)`` -- a raw tensor by the one
    label rule (:func:`selfcal._inputs.as_labels`), a :class:`~selfcal._inputs.Labels` by its
    shape and class count only; return int64 labels."""
    if not isinstance(logits, torch.Tensor) or not isinstance(labels, (torch.Tensor, Labels)):
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
    return as_labels(labels, logits.shape[0], logits.shape[1]).values


def check_per_sample(values: torch.Tensor, n: int, name: str) -> None:
    """A per-sample tensor must be 0-D or have shape ``(n,)``."""
    if values.ndim > 1 or (values.ndim == 1 and values.shape[0] != n):
        raise ValueError(f"{name} must be a scalar or have shape ({n},), got {tuple(values.shape)}")
