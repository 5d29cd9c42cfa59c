"""How a metric core becomes a public function: the :class:`Metric` object.

A *core* takes a validated :class:`~selfcal.predictions.Predictions` and optional bootstrap
``weights`` (``(B, N)`` multiplicities) and returns a float64 tensor: a scalar without weights,
``(B,)`` with them. A :class:`Metric` wraps it into the public face ``f(predictions=None, /, *,
labels, logits | probs, **options)`` that validates the input once and returns the result in
the caller's form (float for numpy, tensor on the input device for torch). The core stays
reachable as ``f.core`` so that bootstrap intervals and the CLI reuse it, and the metric says
what its callers need to know about it, declared where it is defined (never read off a
signature): whether it is ``differentiable`` (gradients reach ``pred.scores``), whether its
core ``takes_bins`` (an ``n_bins`` option) and whether ``higher_is_better``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from selfcal.predictions import ArrayLike, Predictions, as_predictions

MetricCore = Callable[..., torch.Tensor]
"""``core(pred, weights=None, **options) -> tensor`` (see the module docstring)."""


class Metric:
    """A calibration metric: its core and what callers need to know about it.

    Calling it is the public face: ``f(predictions=None, /, *, labels=None, logits=None,
    probs=None, **options)`` validates the input (:func:`~selfcal.predictions.as_predictions`),
    runs ``core(pred, **options)`` and returns the result in the caller's form. The instance
    carries the core's ``__name__``, ``__qualname__``, ``__module__`` and ``__doc__`` (and
    ``__wrapped__``), so ``help``, :func:`inspect.signature` and error messages read as the
    core's.
    """

    core: MetricCore
    differentiable: bool
    takes_bins: bool
    higher_is_better: bool
    __qualname__: str  # the core's, set by functools.update_wrapper (as are the others)
    __name__: str
    __wrapped__: MetricCore

    def __init__(
        self,
        core: MetricCore,
        *,
        differentiable: bool = False,
        takes_bins: bool = False,
        higher_is_better: bool = False,
    ) -> None:
        self.core = core
        self.differentiable = differentiable
        self.takes_bins = takes_bins
        self.higher_is_better = higher_is_better
        functools.update_wrapper(self, core)

    def __call__(
        self,
        predictions: Predictions | None = None,
        /,
        *positional: Any,
        labels: ArrayLike | None = None,
        logits: ArrayLike | None = None,
        probs: ArrayLike | None = None,
        **options: Any,
    ) -> Any:
        if positional:
            name = self.__qualname__
            raise ValueError(
                f"{name}() takes the scores and labels by name: {name}(logits=z, labels=y) or "
                f"{name}(probs=p, labels=y) (selfcal never guesses which an array holds), or "
                "one selfcal Predictions object"
            )
        pred = as_predictions(predictions, labels=labels, logits=logits, probs=probs)
        return pred.output(self.core(pred, **options))

    def __get__(self, instance: object, owner: type | None = None) -> Metric:
        """Never bound (as a ``staticmethod``); being a descriptor also makes ``help`` and
        :func:`inspect.isroutine` treat the metric as the function it stands for."""
        return self

    def __repr__(self) -> str:
        return f"<metric {self.__module__}.{self.__qualname__}>"


def metric(
    *, differentiable: bool = False, takes_bins: bool = False, higher_is_better: bool = False
) -> Callable[[MetricCore], Metric]:
    """Decorator: ``@metric(...)`` over a core defines the :class:`Metric` of that name."""

    def wrap(core: MetricCore) -> Metric:
        return Metric(
            core,
            differentiable=differentiable,
            takes_bins=takes_bins,
            higher_is_better=higher_is_better,
        )

    return wrap


def weighted_mean(per_sample: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """Mean of a per-sample float64 quantity; ``(B,)`` weighted means under resampling."""
    if weights is None:
        return per_sample.mean()
    return (weights @ per_sample) / weights.sum(-1)
