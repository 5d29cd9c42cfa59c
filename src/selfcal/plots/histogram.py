"""Confidence histogram: density of top-label confidence with mean accuracy and confidence.

As in [BO4SC] Fig. 2 (top row): dashed vertical lines at the mean accuracy (dark) and the mean
confidence (light grey); a mean confidence to the right of the accuracy line reads as
over-confidence. Counts come from :func:`selfcal.metrics.calibration.top_label_bins`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from selfcal.metrics.calibration import top_label_bins
from selfcal.metrics.scores import accuracy
from selfcal.plots._base import (
    ACCURACY_COLOR,
    EDGE_COLOR,
    MEAN_ACCURACY_COLOR,
    MEAN_CONFIDENCE_COLOR,
    get_axes,
    resolve,
    to_numpy,
)
from selfcal.predictions import Predictions

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.axes import Axes


class ConfidenceHistogramDisplay:
    """Histogram (density) of top-label confidence (scikit-learn display style).

    Attributes: ``bin_edges`` ``(M+1,)``, ``bin_count`` and ``density`` ``(M,)`` (the density
    integrates to 1 over ``[0, 1]``), ``mean_accuracy`` and ``mean_confidence`` (floats). After
    :meth:`plot`: ``ax_``, ``figure_``, ``bars_``, ``accuracy_line_``, ``confidence_line_``.
    """

    def __init__(
        self,
        *,
        bin_edges: np.ndarray,
        bin_count: np.ndarray,
        mean_accuracy: float,
        mean_confidence: float,
    ) -> None:
        self.bin_edges = bin_edges
        self.bin_count = bin_count
        self.density = bin_count / (bin_count.sum() * np.diff(bin_edges))
        self.mean_accuracy = mean_accuracy
        self.mean_confidence = mean_confidence

    @classmethod
    def from_predictions(
        cls,
        predictions: Predictions | None = None,
        /,
        *,
        labels: Any = None,
        logits: Any = None,
        probs: Any = None,
        n_bins: int = 20,
        ax: Axes | None = None,
        title: str | None = None,
    ) -> ConfidenceHistogramDisplay:
        """Histogram of top-label confidence over ``n_bins`` equal-width bins of ``[0, 1]``."""
        pred = resolve(predictions, labels, logits, probs)
        stats = top_label_bins(pred, n_bins, "uniform")
        disp = cls(
            bin_edges=to_numpy(stats.edges),
            bin_count=to_numpy(stats.count),
            mean_accuracy=float(accuracy.core(pred)),
            mean_confidence=float(pred.confidence.mean()),
        )
        return disp.plot(ax=ax, title=title)

    def plot(
        self, ax: Axes | None = None, *, title: str | None = None
    ) -> ConfidenceHistogramDisplay:
        """Draw on ``ax`` (a new figure when None) and return ``self``."""
        ax, fig = get_axes(ax, figsize=(4.8, 3.6))
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
        self.accuracy_line_ = ax.axvline(
            self.mean_accuracy,
            linestyle="--",
            linewidth=2,
            color=MEAN_ACCURACY_COLOR,
            label=f"Accuracy = {self.mean_accuracy:.3f}",
            zorder=3,
        )
        self.confidence_line_ = ax.axvline(
            self.mean_confidence,
            linestyle="--",
            linewidth=2,
            color=MEAN_CONFIDENCE_COLOR,
            label=f"Avg. confidence = {self.mean_confidence:.3f}",
            zorder=3,
        )
        ax.set_xlim(0, 1)
        ax.set_xlabel("Confidence")
        ax.set_ylabel("Density")
        ax.legend(loc="upper left", fontsize="small", framealpha=0.9)
        if title is not None:
            ax.set_title(title)
        self.ax_, self.figure_ = ax, fig
        return self
