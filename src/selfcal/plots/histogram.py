"""Confidence histogram: density of top-label confidence with mean accuracy and confidence.

As in [BO4SC] Fig. 2 (top row): dashed vertical lines at the mean accuracy (dark) and the mean
confidence (light grey); a mean confidence to the right of the accuracy line reads as
over-confidence. Counts come from :func:`selfcal.metrics.binning.top_label_bins`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Self

import numpy as np

from selfcal.metrics.binning import top_label_bins
from selfcal.metrics.scores import accuracy
from selfcal.plots._base import (
    ACCURACY_COLOR,
    EDGE_COLOR,
    MEAN_ACCURACY_COLOR,
    MEAN_CONFIDENCE_COLOR,
    PredictionsDisplay,
    to_numpy,
)
from selfcal.predictions import Predictions

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.axes import Axes


@dataclass(kw_only=True, eq=False, repr=False)
class ConfidenceHistogramDisplay(PredictionsDisplay):
    """Histogram (density) of top-label confidence (scikit-learn display style).

    ``from_predictions(predictions | labels= with logits= or probs=, *, n_bins=20, ax=None,
    title=None)``: the histogram over ``n_bins`` equal-width bins of ``[0, 1]``.

    Attributes: ``bin_edges`` ``(M+1,)``, ``bin_count`` and ``density`` ``(M,)`` (the density
    integrates to 1 over ``[0, 1]``), ``mean_accuracy`` and ``mean_confidence`` (floats). After
    :meth:`plot`: ``ax_``, ``figure_``, ``bars_``, ``accuracy_line_``, ``confidence_line_``.
    """

    figsize = (4.8, 3.6)
    bin_edges: np.ndarray
    bin_count: np.ndarray
    mean_accuracy: float
    mean_confidence: float
    density: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.density = self.bin_count / (self.bin_count.sum() * np.diff(self.bin_edges))

    @classmethod
    def _compute(cls, pred: Predictions, *, n_bins: int = 20) -> Self:
        """Histogram of top-label confidence over ``n_bins`` equal-width bins of ``[0, 1]``."""
        stats = top_label_bins(pred, n_bins, "uniform")
        return cls(
            bin_edges=to_numpy(stats.edges),
            bin_count=to_numpy(stats.count),
            mean_accuracy=float(accuracy.core(pred)),
            mean_confidence=float(pred.confidence.mean()),
        )

    def _draw(self, ax: Axes) -> None:
        """The density bars, then the dashed mean-accuracy and mean-confidence lines."""
        self.bars_ = ax.bar(
            self.bin_edges[:-1],
            self.density,
            width=np.diff(self.bin_edges),
            align="edge",
            color=ACCURACY_COLOR,
            edgecolor=EDGE_COLOR,
            linewidth=0.6,
            zorder=2,
        )
        self.accuracy_line_, self.confidence_line_ = (
            ax.axvline(
                value,
                linestyle="--",
                linewidth=2,
                color=color,
                label=f"{name} = {value:.3f}",
                zorder=3,
            )
            for value, color, name in (
                (self.mean_accuracy, MEAN_ACCURACY_COLOR, "Accuracy"),
                (self.mean_confidence, MEAN_CONFIDENCE_COLOR, "Avg. confidence"),
            )
        )
        ax.set_xlim(0, 1)
        ax.set_xlabel("Confidence")
        ax.set_ylabel("Density")
        ax.legend(loc="upper left", fontsize="small", framealpha=0.9)
