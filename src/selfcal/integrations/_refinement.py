"""The refinement and calibration losses of :mod:`selfcal.integrations.torchmetrics`,
:class:`RefinementLoss` and :class:`CalibrationLoss`: a recalibrator is fitted on all the
data, so every sample's scores and label are kept."""

from __future__ import annotations

from typing import Any

import torch

from selfcal._validation import check_choice, check_int
from selfcal.integrations._metric import _F64, _CalibrationMetric, _cat
from selfcal.integrations._sketch import require_samples as _require_samples
from selfcal.predictions import Predictions, ScoreKind


class RefinementLoss(_CalibrationMetric):
    """Refinement loss ``L(g(p), y)`` of every batch and process together
    (:func:`selfcal.recalibration.refinement_loss`: the ``loss`` after ``recalibrator`` ``g``,
    fitted on the same rows or cross-fitted over ``folds``; Berta et al., 2025). The
    recalibrator is fitted on all the data, so every sample's scores (float64, the kind it was
    given in) and label are kept (list states gathered with ``dist_reduce_fx="cat"``); one kind
    for all batches. ``compute()`` equals the selfcal function on all the data."""

    scores: list[torch.Tensor]
    labels: list[torch.Tensor]
    _part = "refinement"

    def __init__(
        self,
        loss: str = "nll",
        recalibrator: str = "ts",
        folds: int | None = None,
        seed: int = 0,
        *,
        kind: ScoreKind | None = None,
        **kwargs: Any,
    ) -> None:
        from selfcal.posthoc import build_calibrator
        from selfcal.recalibration import LOSSES

        super().__init__(kind=kind, **kwargs)
        self.loss = check_choice("loss", loss, tuple(LOSSES))
        build_calibrator(recalibrator)  # an unknown name is a ValueError naming the known ones
        self.recalibrator = recalibrator
        self.folds = None if folds is None else check_int("folds", folds, minimum=2)
        self.seed = check_int("seed", seed, minimum=0)
        self.scores_kind: str | None = None
        self.add_state("scores", [], dist_reduce_fx="cat")
        self.add_state("labels", [], dist_reduce_fx="cat")

    def _accumulate(self, pred: Predictions) -> None:
        if self.scores_kind not in (None, pred.kind):
            raise ValueError(
                f"{type(self).__name__} got {pred.kind} after {self.scores_kind}: one kind of "
                "scores for all batches"
            )
        self.scores_kind = pred.kind
        self.scores.append(pred.scores.detach().to(_F64))
        self.labels.append(pred.require_labels().to(_F64))

    def reset(self) -> None:
        super().reset()
        self.scores_kind = None

    def compute(self) -> torch.Tensor:
        from selfcal.recalibration import calibration_loss, refinement_loss

        scores, labels = _cat(self.scores), _cat(self.labels)
        _require_samples(torch.tensor(labels.shape[0]))
        scores = scores.reshape(labels.shape[0], -1)
        if self.scores_kind == "probs":
            pred = Predictions.from_probs(scores, labels.long())
        else:
            pred = Predictions.from_logits(scores, labels.long())
        fn = refinement_loss if self._part == "refinement" else calibration_loss
        options = {"recalibrator": self.recalibrator, "folds": self.folds, "seed": self.seed}
        return fn.core(pred, loss=self.loss, **options)


class CalibrationLoss(RefinementLoss):
    """Calibration loss ``L(p, y) - L(g(p), y)`` of every batch and process together
    (:func:`selfcal.recalibration.calibration_loss`): what the recalibrator takes off the loss.
    Options and states as :class:`RefinementLoss`."""

    _part = "calibration"
