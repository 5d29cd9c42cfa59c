"""The proper scores of :mod:`selfcal.integrations.torchmetrics`, :class:`Brier` and
:class:`NLL`: the sum of the per-sample scores and the number of samples, summed across
processes."""

from __future__ import annotations

from typing import Any

import torch

from selfcal.integrations._metric import _F64, _CalibrationMetric
from selfcal.integrations._sketch import require_samples as _require_samples
from selfcal.metrics.scores import brier, nll
from selfcal.predictions import Predictions, ScoreKind


class _MeanScore(_CalibrationMetric):
    """A per-sample score's sum and the number of samples (float64 sum states)."""

    higher_is_better = False
    total: torch.Tensor
    count: torch.Tensor

    def __init__(self, *, kind: ScoreKind | None = None, **kwargs: Any) -> None:
        super().__init__(kind=kind, **kwargs)
        self.add_state("total", torch.zeros((), dtype=_F64), dist_reduce_fx="sum")
        self.add_state("count", torch.zeros((), dtype=_F64), dist_reduce_fx="sum")

    def _batch_mean(self, pred: Predictions) -> torch.Tensor:
        raise NotImplementedError

    def _accumulate(self, pred: Predictions) -> None:
        n = pred.n_samples
        self._add("total", self._batch_mean(pred) * n)
        self._add("count", torch.tensor(float(n), dtype=_F64))

    def compute(self) -> torch.Tensor:
        """``total / count = (1/N) sum_i s_i`` over the ``N`` samples of every batch and
        process, with ``s_i = sum_k (p_ik - 1[y_i = k])^2`` (:class:`Brier`) or ``s_i = -log
        p_{i, y_i}`` (:class:`NLL`). A ``ValueError`` if no sample has been added."""
        _require_samples(self.count)
        return self.total / self.count


class Brier(_MeanScore):
    """Multi-class Brier score ``(1/N) sum_i sum_k (p_ik - 1[y_i = k])^2``, accumulated over
    batches and processes (:func:`selfcal.metrics.brier`, methods §1.5: summed over classes,
    so twice scikit-learn's ``brier_score_loss`` on a binary problem). State: the sum of the
    per-sample scores and the number of samples (float64, summed across processes)."""

    def _batch_mean(self, pred: Predictions) -> torch.Tensor:
        return brier.core(pred)


class NLL(_MeanScore):
    """Negative log-likelihood ``-(1/N) sum_i log p_{i, y_i}`` (natural log), accumulated over
    batches and processes (:func:`selfcal.metrics.nll`, methods §1.5; a zero true-class
    probability given as ``probs=`` is clamped to the smallest float64). State: the sum of the
    per-sample losses and the number of samples (float64, summed across processes)."""

    def _batch_mean(self, pred: Predictions) -> torch.Tensor:
        return nll.core(pred)
