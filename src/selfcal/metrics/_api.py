"""How a metric core becomes a public function.

A *core* takes a validated :class:`~selfcal.predictions.Predictions` and optional bootstrap
``weights`` (``(B, N)`` multiplicities) and returns a float64 tensor: a scalar without weights,
``(B,)`` with them. :func:`metric` wraps it into the public face ``f(predictions=None, *,
labels, logits | probs, **options)`` that validates the input once and returns the result in
the caller's form (float for numpy, tensor on the input device for torch). The core stays
reachable as ``f.core`` so that bootstrap intervals and the CLI reuse it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol

import torch

from selfcal.predictions import Predictions, as_predictions


class MetricCore(Protocol):
    def __call__(
        self, pred: Predictions, weights: torch.Tensor | None = None, **options: Any
    ) -> torch.Tensor: ...


class Metric(Protocol):
    core: MetricCore
    differentiable: bool

    def __call__(self, predictions: Predictions | None = None, /, **kwargs: Any) -> Any: ...


def metric(*, differentiable: bool = False) -> Callable[[MetricCore], Metric]:
    """Decorator: turn a metric core into its public function (see module docstring)."""

    def wrap(core: MetricCore) -> Metric:
        @functools.wraps(core)
        def public(
            predictions: Predictions | None = None,
            /,
            *,
            labels: Any = None,
            logits: Any = None,
            probs: Any = None,
            **options: Any,
        ) -> Any:
            pred = as_predictions(predictions, labels=labels, logits=logits, probs=probs)
            return pred.output(core(pred, **options))

        public.core = core  # type: ignore[attr-defined]
        public.differentiable = differentiable  # type: ignore[attr-defined]
        return public  # type: ignore[return-value]

    return wrap


def weighted_mean(per_sample: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """Mean of a per-sample float64 quantity; ``(B,)`` weighted means under resampling."""
    if weights is None:
        return per_sample.mean()
    return (weights @ per_sample) / weights.sum(-1)
