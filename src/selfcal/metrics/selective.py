"""Selective prediction: abstain when confidence is low.

Samples are accepted in order of decreasing top-label confidence. Tied confidences cannot be
ordered, so within a group of ties the cumulative number of errors is interpolated linearly;
every quantity below is therefore the *expectation over random tie-breaking*, and invariant to
the order of the input rows.

* risk at ``k`` accepted samples: ``r(k) = E(k) / k`` with ``E(k)`` the errors among them;
* AURC (Geifman & El-Yaniv): ``(1/N) sum_{k=1}^{N} r(k)``;
* coverage ``k / N``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from selfcal._validation import check_fraction
from selfcal.metrics._api import metric
from selfcal.metrics.binning import Weights
from selfcal.predictions import ArrayLike, Predictions, as_predictions

EULER_GAMMA = 0.5772156649015329


def _groups(pred: Predictions, weights: Weights) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Tie groups in decreasing confidence: thresholds ``(G,)``, sizes and error counts
    ``(G,)`` or ``(B, G)`` (weighted)."""
    return tie_groups(pred.confidence, pred.correct, weights)


def tie_groups(
    confidence: torch.Tensor, correct: torch.Tensor, weights: Weights = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`_groups` on raw float64 ``(N,)`` confidences and correctness indicators."""
    conf, order = torch.sort(confidence, descending=True, stable=True)
    thresholds, group = torch.unique_consecutive(conf, return_inverse=True)
    wrong = 1 - correct[order]
    g = thresholds.shape[0]
    if weights is None:
        size = torch.bincount(group, minlength=g).double()
        errs = torch.bincount(group, weights=wrong, minlength=g)
    else:
        w = weights[:, order]
        zeros = torch.zeros(w.shape[0], g, dtype=torch.float64, device=w.device)
        size = zeros.index_add(1, group, w)
        errs = zeros.index_add(1, group, w * wrong)
    return thresholds, size, errs


def _harmonic(x: torch.Tensor) -> torch.Tensor:
    """Harmonic number ``H_x = digamma(x + 1) + gamma`` (real ``x >= 0``)."""
    return torch.special.digamma(x + 1) + EULER_GAMMA


def _errors_at(k: torch.Tensor, size: torch.Tensor, errs: torch.Tensor) -> torch.Tensor:
    """Expected errors among the ``k`` most confident samples (``k`` ``(...,)`` or ``(B, K)``)."""
    cum_n = size.cumsum(-1)
    cum_e = errs.cumsum(-1)
    batched = size.ndim == 2
    kk = k if (not batched or k.ndim == 2) else k.unsqueeze(-1).expand(size.shape[0], -1)
    g = torch.searchsorted(cum_n.contiguous(), kk.contiguous(), right=False)
    g = g.clamp_max(size.shape[-1] - 1)
    n_before = torch.gather(cum_n - size, -1, g) if batched else (cum_n - size)[g]
    e_before = torch.gather(cum_e - errs, -1, g) if batched else (cum_e - errs)[g]
    n_g = torch.gather(size, -1, g) if batched else size[g]
    e_g = torch.gather(errs, -1, g) if batched else errs[g]
    rate = torch.where(n_g > 0, e_g / n_g.clamp_min(1e-300), torch.zeros_like(e_g))
    return e_before + (kk - n_before) * rate


@dataclass(frozen=True)
class RiskCoverage:
    """Risk-coverage curve at each distinct confidence threshold (accept ``conf >= t``)."""

    threshold: torch.Tensor
    coverage: torch.Tensor
    risk: torch.Tensor
    aurc: float


def risk_coverage_curve(
    predictions: Predictions | None = None,
    /,
    *,
    labels: ArrayLike | None = None,
    logits: ArrayLike | None = None,
    probs: ArrayLike | None = None,
) -> RiskCoverage:
    """Selective risk and coverage at every distinct confidence threshold, and the AURC."""
    pred = as_predictions(predictions, labels=labels, logits=logits, probs=probs)
    thresholds, size, errs = _groups(pred, None)
    cum_n = size.cumsum(0)
    return RiskCoverage(
        thresholds.cpu(),
        (cum_n / pred.n_samples).cpu(),
        (errs.cumsum(0) / cum_n).cpu(),
        float(aurc.core(pred)),
    )


@metric()
def aurc(pred: Predictions, weights: Weights = None) -> torch.Tensor:
    """Area under the risk-coverage curve, ``(1/N) sum_{k=1}^N E(k)/k`` (lower is better).

    Within a tie group occupying positions ``K+1 .. K+n`` with ``e`` errors, ``E(k) = E_K +
    (k - K) e / n``, whose sum of ``E(k)/k`` has the closed form ``E_K dH + (e/n)(n - K dH)``
    with ``dH = H_{K+n} - H_K``.
    """
    return aurc_from_groups(*_groups(pred, weights)[1:])


def aurc_from_groups(size: torch.Tensor, errs: torch.Tensor) -> torch.Tensor:
    """AURC from tie-group sizes and error counts (see :func:`aurc`)."""
    n_before = size.cumsum(-1) - size
    e_before = errs.cumsum(-1) - errs
    dh = _harmonic(n_before + size) - _harmonic(n_before)
    rate = torch.where(size > 0, errs / size.clamp_min(1e-300), torch.zeros_like(errs))
    total = (e_before * dh + rate * (size - n_before * dh)).sum(-1)
    return total / size.sum(-1)


@metric(higher_is_better=True)
def accuracy_at_coverage(
    pred: Predictions, weights: Weights = None, *, coverage: float = 0.9
) -> torch.Tensor:
    """Accuracy on the ``ceil(coverage * N)`` most confident samples."""
    check_fraction("coverage", coverage)
    _, size, errs = _groups(pred, weights)
    n = size.sum(-1)
    k = torch.ceil(coverage * n - 1e-9).clamp_min(1)
    if weights is not None:
        k = k.unsqueeze(-1)
    out = 1 - _errors_at(k, size, errs) / k
    return out.squeeze(-1) if weights is not None else out


@metric(higher_is_better=True)
def coverage_at_accuracy(
    pred: Predictions, weights: Weights = None, *, target: float = 0.95
) -> torch.Tensor:
    """Largest coverage ``k / N`` whose selective accuracy on the ``k`` most confident samples
    is at least ``target`` (0 if even the single most confident sample misses it)."""
    check_fraction("target", target)
    _, size, errs = _groups(pred, weights)
    n_max = math.ceil(float(size.sum(-1).max()))
    k = torch.arange(1, n_max + 1, dtype=torch.float64, device=size.device)
    if weights is not None:
        k = k.expand(size.shape[0], -1)
    ok = 1 - _errors_at(k, size, errs) / k >= target - 1e-12
    n = size.sum(-1, keepdim=weights is not None)
    ok &= k <= n + 1e-9
    best = torch.where(ok, k, torch.zeros_like(k)).amax(-1)
    return best / n.squeeze(-1) if weights is not None else best / n
