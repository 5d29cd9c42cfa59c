"""Accumulate calibration statistics over batches, for data that does not fit in memory.

Equal-width binned metrics are sums of per-bin statistics, so the accumulator keeps only
``(M,)`` top-label and ``(C, M)`` classwise bin statistics plus running sums for accuracy, NLL
and Brier: memory is independent of the number of samples, and the results equal the one-shot
metrics (bin counts exactly; sums up to float64 summation order). Equal-mass binning (AdaECE)
and the risk-coverage curve depend on the ranks of all confidences; with
``keep_confidences=True`` the accumulator also keeps one float64 confidence and one correctness
byte per sample (9 bytes instead of ``8 C``) and computes those exactly too.
"""

from __future__ import annotations

from typing import Any

import torch

from selfcal.metrics.binning import (
    BinStats,
    calibration_error,
    classwise_bins,
    confidence_bins,
    top_label_bins,
)
from selfcal.metrics.scores import brier, nll
from selfcal.metrics.selective import aurc_from_groups, tie_groups
from selfcal.predictions import Predictions, as_predictions


class CalibrationAccumulator:
    """Streaming ECE / MCE / RMS-CE / classwise ECE / accuracy / NLL / Brier (and optionally
    AdaECE and AURC).

    Example: 1,000 predictions fed in four batches give the one-shot ECE (bin counts exactly,
    sums up to float64 summation order):

    >>> import numpy as np
    >>> from selfcal.metrics import CalibrationAccumulator, ece
    >>> rng = np.random.default_rng(0)
    >>> logits, labels = 3 * rng.normal(size=(1000, 4)), rng.integers(0, 4, 1000)
    >>> acc = CalibrationAccumulator(n_bins=15)
    >>> for z, y in zip(np.array_split(logits, 4), np.array_split(labels, 4)):
    ...     _ = acc.update(logits=z, labels=y)
    >>> acc.n_samples
    1000
    >>> streamed = acc.compute()
    >>> round(streamed["ece"], 4), streamed["accuracy"]
    (0.5204, 0.261)
    >>> abs(streamed["ece"] - ece(logits=logits, labels=labels)) < 1e-12
    True
    """

    def __init__(self, n_bins: int = 15, keep_confidences: bool = False) -> None:
        self.n_bins = n_bins
        self.keep_confidences = keep_confidences
        self.n_samples = 0
        self.n_classes: int | None = None
        self._top: BinStats | None = None
        self._classwise: BinStats | None = None
        self._sums = {"correct": 0.0, "nll": 0.0, "brier": 0.0}
        self._conf: list[torch.Tensor] = []
        self._correct: list[torch.Tensor] = []

    def update(
        self,
        predictions: Predictions | None = None,
        /,
        *,
        labels: Any = None,
        logits: Any = None,
        probs: Any = None,
    ) -> CalibrationAccumulator:
        """Add one batch (validated like every selfcal input)."""
        pred = as_predictions(predictions, labels=labels, logits=logits, probs=probs)
        if self.n_classes is None:
            self.n_classes = pred.n_classes
        elif pred.n_classes != self.n_classes:
            raise ValueError(
                f"batch has {pred.n_classes} classes but earlier batches had {self.n_classes}"
            )
        with torch.no_grad():
            top = top_label_bins(pred, self.n_bins)
            cw = classwise_bins(pred, self.n_bins)
            self._top = top if self._top is None else self._top + top
            self._classwise = cw if self._classwise is None else self._classwise + cw
            n = pred.n_samples
            self._sums["correct"] += float(pred.correct.sum())
            self._sums["nll"] += float(nll.core(pred)) * n
            self._sums["brier"] += float(brier.core(pred)) * n
            if self.keep_confidences:
                self._conf.append(pred.confidence.cpu())
                self._correct.append(pred.correct.to(torch.uint8).cpu())
        self.n_samples += n
        return self

    @property
    def bin_stats(self) -> BinStats:
        """Accumulated top-label bin statistics (for reliability diagrams)."""
        if self._top is None:
            raise ValueError("no batch has been added yet")
        return self._top

    def compute(self) -> dict[str, float]:
        """Every accumulated metric as a float."""
        stats = self.bin_stats
        assert self._classwise is not None
        n = self.n_samples
        out = {
            "accuracy": self._sums["correct"] / n,
            "nll": self._sums["nll"] / n,
            "brier": self._sums["brier"] / n,
            "ece": float(calibration_error(stats, "l1")),
            "rmsce": float(calibration_error(stats, "l2")),
            "mce": float(calibration_error(stats, "max")),
            "classwise_ece": float(calibration_error(self._classwise, "l1").mean()),
        }
        if self.keep_confidences:
            conf = torch.cat(self._conf)
            correct = torch.cat(self._correct).double()
            ada = confidence_bins(conf, correct, self.n_bins, "quantile")
            out["adaece"] = float(calibration_error(ada, "l1"))
            out["aurc"] = float(aurc_from_groups(*tie_groups(conf, correct)[1:]))
        return out
