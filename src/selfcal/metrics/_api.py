"""How a metric core becomes a public function: the :class:`Metric` object.

A *core* takes a validated :class:`~selfcal.predictions.Predictions` and optional bootstrap
``weights`` (``(B, N)`` multiplicities) and returns a float64 tensor: a scalar without weights,
``(B,)`` with them. A :class:`Metric` wraps it into the public face ``f(predictions=None, /, *,
labels, logits | probs, **options)`` that validates the input once and returns the result in
the caller's form (float for numpy, tensor on the input device for torch). The core stays
reachable as ``f.core`` so that bootstrap intervals and the CLI reuse it, and the metric says
what its callers need to know about it, declared where it is defined (never read off a
signature): whether it is ``differentiable`` (gradients reach ``pred.scores``), whether its
core ``takes_bins`` (an ``n_bins`` option), whether it ``takes_groups`` (reads
``pred.groups``: its public face then takes ``groups=`` beside ``labels=``; any other metric
refuses ``groups=`` rather than ignore them) and whether ``higher_is_better``.
"""

from __future__ import annotations

import difflib
import functools
import inspect
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
    ``__wrapped__``), so ``help`` and error messages read as the core's; its
    ``__signature__`` is the public face's, the core's options (its keyword arguments but
    ``weights``) after the score arguments, so :func:`inspect.signature` and ``help`` show how
    it is called. An option the core does not take is a ``TypeError`` naming it and those it
    takes (:meth:`check_options`), before the input is read.
    """

    core: MetricCore
    options: dict[str, inspect.Parameter] | None
    """The core's options by name (:func:`_options`); ``None`` when it takes ``**options``."""
    __signature__: inspect.Signature
    differentiable: bool
    takes_bins: bool
    takes_groups: bool
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
        takes_groups: bool = False,
        higher_is_better: bool = False,
    ) -> None:
        self.core = core
        self.differentiable = differentiable
        self.takes_bins = takes_bins
        self.takes_groups = takes_groups
        self.higher_is_better = higher_is_better
        functools.update_wrapper(self, core)
        self.options = _options(core)
        self.__signature__ = _public_signature(core, self.options, takes_groups)

    def __call__(
        self,
        predictions: Predictions | None = None,
        /,
        *positional: Any,
        labels: ArrayLike | None = None,
        logits: ArrayLike | None = None,
        probs: ArrayLike | None = None,
        groups: ArrayLike | None = None,
        **options: Any,
    ) -> Any:
        if positional:
            name = self.__qualname__
            raise ValueError(
                f"{name}() takes the scores and labels by name: {name}(logits=z, labels=y) or "
                f"{name}(probs=p, labels=y) (selfcal never guesses which an array holds), or "
                "one selfcal Predictions object"
            )
        self.check_options(options if groups is None else {**options, "groups": groups})
        pred = as_predictions(predictions, labels=labels, logits=logits, probs=probs, groups=groups)
        return pred.output(self.core(pred, **options))

    def check_options(
        self, options: dict[str, Any], caller: str | None = None, also: tuple[str, ...] = ()
    ) -> None:
        """``TypeError`` for a keyword argument that is neither a score argument nor an option
        of the core, naming it, a close accepted name (``y_true`` -> ``labels``) and every
        accepted one; ``caller`` (default: ``name()``) takes the arguments ``also`` too."""
        if self.options is None:  # a core taking **options checks them itself
            return
        known = {*self.options, *(("groups",) if self.takes_groups else ())}
        unknown = sorted(set(options) - known)
        if not unknown:
            return
        accepted = [*SCORE_ARGUMENTS, *(("groups",) if self.takes_groups else ()), *self.options]
        accepted += also
        name = unknown[0]
        close = LABEL_ALIASES.get(name) or next(
            iter(difflib.get_close_matches(name, accepted, n=1)), None
        )
        hint = f" (did you mean {close}=?)" if close else ""
        caller = caller or f"{self.__qualname__}()"
        raise TypeError(
            f"{caller} got an unexpected keyword argument {name!r}{hint}; it takes a "
            f"Predictions object or {', '.join(f'{a}=' for a in accepted)}"
        )

    def __get__(self, instance: object, owner: type | None = None) -> Metric:
        """Never bound (as a ``staticmethod``); being a descriptor also makes ``help`` and
        :func:`inspect.isroutine` treat the metric as the function it stands for."""
        return self

    def __repr__(self) -> str:
        return f"<metric {self.__module__}.{self.__qualname__}>"


SCORE_ARGUMENTS = ("logits", "probs", "labels")
"""The keyword arguments of every metric's public face, before the core's options."""
LABEL_ALIASES = {
    name: "labels" for name in ("y", "y_true", "target", "targets", "true_labels", "label")
}
"""Other libraries' names for the labels, answered with ``did you mean labels=?``."""


def _options(core: MetricCore) -> dict[str, inspect.Parameter] | None:
    """The core's options: its parameters after ``pred`` but ``weights`` (``None`` when it
    takes ``**options``, which it then checks itself)."""
    parameters = list(inspect.signature(core).parameters.values())[1:]
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return None
    return {p.name: p for p in parameters if p.name != "weights"}


def _public_signature(
    core: MetricCore, options: dict[str, inspect.Parameter] | None, takes_groups: bool = False
) -> inspect.Signature:
    """``(predictions=None, /, *, labels=None, logits=None, probs=None, [groups=None,]
    <options>) -> float | torch.Tensor``: how the metric is called (the core's signature is
    ``f.core``'s)."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    given = ("labels", "logits", "probs", *(("groups",) if takes_groups else ()))
    parameters = [
        inspect.Parameter("predictions", inspect.Parameter.POSITIONAL_ONLY, default=None),
        *(inspect.Parameter(n, keyword, default=None) for n in given),
    ]
    if options is None:
        parameters.append(inspect.Parameter("options", inspect.Parameter.VAR_KEYWORD))
    else:
        parameters += [p.replace(kind=keyword) for p in options.values()]
    return inspect.Signature(parameters, return_annotation="float | torch.Tensor")


def metric(
    *,
    differentiable: bool = False,
    takes_bins: bool = False,
    takes_groups: bool = False,
    higher_is_better: bool = False,
) -> Callable[[MetricCore], Metric]:
    """Decorator: ``@metric(...)`` over a core defines the :class:`Metric` of that name."""

    def wrap(core: MetricCore) -> Metric:
        return Metric(
            core,
            differentiable=differentiable,
            takes_bins=takes_bins,
            takes_groups=takes_groups,
            higher_is_better=higher_is_better,
        )

    return wrap


def weighted_mean(per_sample: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """Mean of a per-sample float64 quantity; ``(B,)`` weighted means under resampling."""
    if weights is None:
        return per_sample.mean()
    return (weights @ per_sample) / weights.sum(-1)
