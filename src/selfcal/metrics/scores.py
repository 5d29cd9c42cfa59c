"""Accuracy, error, negative log-likelihood and the multi-class Brier score."""

from __future__ import annotations

import torch

from selfcal.metrics._api import metric, weighted_mean
from selfcal.metrics.binning import Weights
from selfcal.predictions import Predictions


@metric(higher_is_better=True)
def accuracy(pred: Predictions, weights: Weights = None) -> torch.Tensor:
    """Top-1 accuracy ``(1/N) sum_i 1[argmax_k p_ik = y_i]`` (first index on ties)."""
    return weighted_mean(pred.correct, weights)


@metric()
def error(pred: Predictions, weights: Weights = None) -> torch.Tensor:
    """Top-1 error ``1 - accuracy``."""
    return 1 - weighted_mean(pred.correct, weights)


def nll_terms(pred: Predictions) -> torch.Tensor:
    """``(N,)`` float64 ``-log p_{i, y_i}``, each row's term of :func:`nll` (in chunks of rows:
    :meth:`~selfcal.Predictions.map_rows`)."""

    def true_class_log_prob(scores: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if pred.kind == "logits":
            return torch.log_softmax(scores.double(), 1).gather(1, y).squeeze(1)
        tiny = torch.finfo(torch.float64).tiny
        return scores.double().gather(1, y).squeeze(1).clamp_min(tiny).log()

    return -pred.map_rows(true_class_log_prob)


def brier_terms(pred: Predictions) -> torch.Tensor:
    """``(N,)`` float64 ``sum_k (p_ik - 1[y_i = k])^2``, each row's term of :func:`brier`."""

    def squared_error(scores: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        p = pred.probs_of(scores)
        return p.square().sum(1) - 2 * p.gather(1, y).squeeze(1) + 1

    return pred.map_rows(squared_error)


@metric(differentiable=True)
def nll(pred: Predictions, weights: Weights = None) -> torch.Tensor:
    """Negative log-likelihood ``-(1/N) sum_i log p_{i, y_i}`` (natural log). For probability
    input a zero true-class probability is clamped to the smallest float64 (loss ~708)."""
    return weighted_mean(nll_terms(pred), weights)


@metric(differentiable=True)
def brier(pred: Predictions, weights: Weights = None) -> torch.Tensor:
    """Multi-class Brier score ``(1/N) sum_i sum_k (p_ik - 1[y_i = k])^2`` (summed over
    classes; for a binary problem this is twice scikit-learn's ``brier_score_loss``)."""
    return weighted_mean(brier_terms(pred), weights)
