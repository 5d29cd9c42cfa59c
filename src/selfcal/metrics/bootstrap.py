"""Bootstrap confidence intervals for any metric, with vectorised resampling.

A resample is represented by its multiplicities: a row of ``(B, N)`` counts drawn as ``N``
uniform draws with replacement (the ordinary nonparametric bootstrap). Every metric core
accepts such a weight matrix and evaluates all ``B`` resamples in one tensor computation, so
there is no Python loop per resample -- only over chunks of resamples sized to bound memory.

Three intervals, from the quantiles ``q_{(1-a)/2}``, ``q_{1/2}``, ``q_{(1+a)/2}`` of the
resampled metric values (linear interpolation between order statistics); the point estimate
``t`` is the metric on the full sample:

* ``"centred"`` (default): ``[t - (q_{1/2} - q_{(1-a)/2}), t + (q_{(1+a)/2} - q_{1/2})]``, the
  percentile interval moved so that its median sits on ``t``. It **always contains the point
  estimate** (``q_{(1-a)/2} <= q_{1/2} <= q_{(1+a)/2}``) and shows the estimate's sampling
  spread, asymmetry included. It leaves out the resampling bias ``q_{1/2} - t``, which the
  other two intervals add or subtract: binned calibration errors are biased upward (noise in a
  bin's accuracy only adds to ``|acc - conf|``), resampling with duplicates adds that bias a
  second time, and on a few hundred rows the percentile interval can then lie entirely above
  ``t`` (``adaece 0.0257 [0.0299, 0.0577]`` was seen). The bias itself is what the debiased
  estimators measure (:func:`~selfcal.metrics.debiased_ece`).
* ``"percentile"``: ``[q_{(1-a)/2}, q_{(1+a)/2}]``; it excludes ``t`` when more than ``(1+a)/2``
  of the resamples lie on one side of it.
* ``"basic"`` (reverse percentile): ``[2t - q_{(1+a)/2}, 2t - q_{(1-a)/2}]``, the percentile
  interval reflected about ``t``: it moves the bias back rather than forward, estimating where
  the true value lies; it excludes ``t`` exactly when the percentile interval does. It is not
  clipped to the metric's range, so for an ECE near 0 its lower end can be negative: read that
  as "consistent with 0" (so can the centred interval's).

Resampled values that are infinite (a metric that overflows, e.g. the NLL of an absurd logit)
stay infinite in the quantiles instead of becoming NaN.

Seeded: the same ``seed`` gives the same interval on the same device.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from selfcal._validation import check_choice, check_int, check_real
from selfcal.metrics._api import Metric
from selfcal.predictions import Predictions, as_predictions

MAX_CHUNK_ELEMENTS = 1 << 24
"""Resamples per chunk are chosen so that ``chunk * N * cost`` stays near this many elements."""


@dataclass(frozen=True)
class Interval:
    """A point estimate with a bootstrap interval (``method``: centred, percentile or basic)."""

    value: float
    low: float
    high: float
    confidence: float
    n_resamples: int
    method: str = "centred"

    def __repr__(self) -> str:
        pct = round(100 * self.confidence)
        kind = "" if self.method == "centred" else f" {self.method}"
        return f"{self.value:.6g} [{pct}%{kind} CI {self.low:.6g}, {self.high:.6g}]"

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "ci": [self.low, self.high]}


def _generator(seed: int, device: torch.device) -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


def resample_counts(n: int, n_resamples: int, generator: torch.Generator) -> torch.Tensor:
    """``(B, N)`` float64 multiplicities of ``B`` bootstrap resamples of ``N`` items."""
    device = generator.device
    draws = torch.randint(n, (n_resamples, n), generator=generator, device=device)
    draws += torch.arange(n_resamples, device=device).unsqueeze(1) * n
    counts = torch.bincount(draws.reshape(-1), minlength=n_resamples * n)
    return counts.reshape(n_resamples, n).double()


MAX_KEPT_ELEMENTS = 1 << 25
"""Resamples totalling at most this many multiplicities are drawn once and kept for reuse."""


@dataclass(eq=False)
class Resamples:
    """The multiplicities of ``n_resamples`` seeded bootstrap resamples of ``n`` rows, as
    ``(b, n)`` chunks of about :data:`MAX_CHUNK_ELEMENTS`. Drawn on first use; kept for every
    later use when they total at most :data:`MAX_KEPT_ELEMENTS`, else redrawn from the seed --
    the same resamples either way, so several metrics can share one set (as
    :func:`selfcal.evaluation.evaluate` does)."""

    n: int
    n_resamples: int
    seed: int = 0
    device: torch.device | str = "cpu"

    def __post_init__(self) -> None:
        check_int("n_resamples", self.n_resamples)
        self._kept: list[torch.Tensor] | None = None

    def chunks(self) -> Iterator[torch.Tensor]:
        if self._kept is not None:
            yield from self._kept
            return
        gen = _generator(self.seed, torch.device(self.device))
        size = max(1, min(self.n_resamples, MAX_CHUNK_ELEMENTS // max(1, self.n)))
        keep = self.n * self.n_resamples <= MAX_KEPT_ELEMENTS
        drawn = []
        for start in range(0, self.n_resamples, size):
            chunk = resample_counts(self.n, min(size, self.n_resamples - start), gen)
            if keep:
                drawn.append(chunk)
            yield chunk
        if keep:
            self._kept = drawn


def resampled_values(
    fn: Callable[[torch.Tensor], torch.Tensor],
    n: int,
    n_resamples: int,
    seed: int,
    device: torch.device,
    resamples: Resamples | None = None,
) -> torch.Tensor:
    """Evaluate ``fn(weights) -> (b, ...)`` on ``n_resamples`` resamples (``resamples``, or
    fresh ones drawn from ``seed``), chunked; returns the concatenated ``(B, ...)`` values."""
    if resamples is None:
        resamples = Resamples(n, n_resamples, seed, device)
    elif (resamples.n, resamples.n_resamples) != (n, n_resamples):
        raise ValueError(
            f"resamples are of {resamples.n} rows x {resamples.n_resamples}, "
            f"not {n} rows x {n_resamples}"
        )
    return torch.cat([fn(w) for w in resamples.chunks()])


_LARGEST = torch.finfo(torch.float64).max


def quantiles(values: torch.Tensor, q: list[float]) -> torch.Tensor:
    """``(len(q), ...)`` quantiles along dim 0, ignoring NaN resamples (e.g. an empty bin);
    infinite values stay infinite (interpolating between two infinities would give NaN)."""
    finite = values.double().nan_to_num(nan=math.nan, posinf=_LARGEST, neginf=-_LARGEST)
    levels = torch.tensor(q, dtype=torch.float64, device=values.device)
    out = torch.nanquantile(finite, levels, dim=0)
    return out.masked_fill(out >= _LARGEST, math.inf).masked_fill(out <= -_LARGEST, -math.inf)


def percentile_interval(
    values: torch.Tensor, confidence: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Percentile interval along dim 0 (:func:`quantiles`)."""
    alpha = (1 - confidence) / 2
    lo_hi = quantiles(values, [alpha, 1 - alpha])
    return lo_hi[0], lo_hi[1]


INTERVAL_METHODS = ("centred", "percentile", "basic")


def interval_bounds(
    values: torch.Tensor, point: torch.Tensor, confidence: float, method: str = "centred"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Bounds of the ``method`` interval (see the module docstring) along dim 0."""
    check_choice("method", method, INTERVAL_METHODS)
    alpha = (1 - confidence) / 2
    lo, mid, hi = quantiles(values, [alpha, 0.5, 1 - alpha])
    if method == "centred":  # q + (t - q_mid): no cancellation when t and q_mid are close
        shift = torch.as_tensor(point, dtype=torch.float64, device=lo.device) - mid
        shift = shift.nan_to_num(nan=0.0) if bool(torch.isinf(mid).any()) else shift
        return lo + shift, hi + shift
    if method == "percentile":
        return lo, hi
    return 2 * point - hi, 2 * point - lo


def bootstrap_ci(
    metric: Metric,
    predictions: Predictions | None = None,
    /,
    *,
    labels: Any = None,
    logits: Any = None,
    probs: Any = None,
    groups: Any = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    method: str = "centred",
    resamples: Resamples | None = None,
    **options: Any,
) -> Interval:
    """Point estimate and bootstrap interval of ``metric`` (any selfcal metric, e.g.
    ``bootstrap_ci(ece, labels=y, logits=z, n_bins=15)``); ``method`` is ``"centred"`` (the
    default, which always contains the point estimate), ``"percentile"`` or ``"basic"``
    (module docstring); ``groups=`` for a metric that reads them. ``resamples`` (a
    :class:`Resamples` of the same size)
    replaces the draw from ``seed``, so several metrics can share one set."""
    check_real("confidence", confidence, 0.0, 1.0, low_open=True, high_open=True)
    check_choice("method", method, INTERVAL_METHODS)
    own = ("n_resamples", "confidence", "seed", "method", "resamples")
    given = options if groups is None else {**options, "groups": groups}
    metric.check_options(given, caller=f"bootstrap_ci({metric.__qualname__}, ...)", also=own)
    pred = as_predictions(predictions, labels=labels, logits=logits, probs=probs, groups=groups)
    core = metric.core
    with torch.no_grad():
        value = core(pred, **options)
        vals = resampled_values(
            lambda w: core(pred, weights=w, **options),
            pred.n_samples,
            n_resamples,
            seed,
            pred.device,
            resamples,
        )
        lo, hi = interval_bounds(vals, value, confidence, method)
    return Interval(float(value), float(lo), float(hi), confidence, n_resamples, method)
