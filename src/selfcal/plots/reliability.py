"""Reliability diagram: per-bin accuracy against confidence, with the calibration gap.

Bars span each bin and rise to the bin's accuracy; the gap between accuracy and the bin's mean
confidence is drawn on top in orange where the model is over-confident (accuracy < confidence)
and in red where it is under-confident ([BO4SC] Fig. 2). Every number comes from
:func:`selfcal.metrics.binning.top_label_bins`; optional error bars are bootstrap
percentile intervals of each bin's accuracy, all resamples binned in one batched call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from selfcal._validation import check_real
from selfcal.metrics.binning import BinStats, calibration_error, top_label_bins
from selfcal.metrics.bootstrap import percentile_interval, resampled_values
from selfcal.plots._base import (
    ACCURACY_COLOR,
    EDGE_COLOR,
    IDENTITY_COLOR,
    OVERCONFIDENCE_COLOR,
    UNDERCONFIDENCE_COLOR,
    PredictionsDisplay,
    percent,
    to_numpy,
)
from selfcal.predictions import Predictions

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.axes import Axes


def bootstrap_bin_accuracy(
    pred: Predictions,
    n_bins: int,
    strategy: str,
    n_resamples: int,
    confidence: float,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval ``(low, high)`` of each bin's accuracy over bootstrap resamples.

    Each chunk of resamples is binned at once (``top_label_bins`` with ``(B, N)``
    multiplicities). Bins a resample leaves empty are ignored; a bin empty in every resample
    gets NaN. Under ``strategy="quantile"`` the edges move with each resample, so bin ``m`` is
    "the m-th equal-mass bin" rather than a fixed interval.
    """
    check_real("confidence", confidence, 0.0, 1.0, low_open=True, high_open=True)
    values = resampled_values(
        lambda w: top_label_bins(pred, n_bins, strategy, w).accuracy,
        pred.n_samples,
        n_resamples,
        seed,
        pred.device,
    )
    low, high = percentile_interval(values, confidence)
    return to_numpy(low), to_numpy(high)


@dataclass(kw_only=True, eq=False, repr=False)
class ReliabilityDiagramDisplay(PredictionsDisplay):
    """Reliability diagram (scikit-learn display style).

    Build with :meth:`from_predictions` or :meth:`from_bins`; both draw immediately and return
    the display. ``from_predictions(predictions | labels= with logits= or probs=, *,
    n_bins=15, strategy="uniform", error_bars=False, n_resamples=200, confidence=0.95, seed=0,
    ax=None, title=None)`` bins top-label confidence (``strategy`` "uniform" or "quantile");
    ``error_bars=True`` adds seeded bootstrap percentile intervals of each bin's accuracy.
    Arrays are float64 numpy of length ``n_bins`` (NaN for empty bins); ``ece`` and ``mce``
    are fractions computed from the same bins (ECE/MCE for equal-width bins, their equal-mass
    versions for ``strategy="quantile"``).

    Attributes set by :meth:`plot`: ``ax_``, ``figure_``, ``bars_`` (accuracy bars, empty bins
    omitted), ``gaps_`` (``{"over": ..., "under": ...}`` bar containers, a key only when such a
    gap exists), ``errorbar_`` (or None), ``identity_line_``. The title is the summary errors,
    under ``title`` when one is given.
    """

    figsize = (4.8, 6.0)
    bin_edges: np.ndarray
    bin_confidence: np.ndarray
    bin_accuracy: np.ndarray
    bin_count: np.ndarray
    ece: float
    mce: float
    low: np.ndarray | None = None
    high: np.ndarray | None = None
    confidence: float | None = None
    strategy: str = "uniform"

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_bins(
        cls,
        stats: BinStats,
        *,
        low: np.ndarray | None = None,
        high: np.ndarray | None = None,
        confidence: float | None = None,
        strategy: str = "uniform",
        ax: Axes | None = None,
        title: str | None = None,
    ) -> Self:
        """Draw the diagram of precomputed (unbatched) bin statistics.

        ``low``/``high`` optionally give an interval per bin (e.g. from
        :func:`bootstrap_bin_accuracy`); ``strategy`` only names the error in the title.
        """
        return cls._of_bins(stats, low, high, confidence, strategy).plot(ax=ax, title=title)

    @classmethod
    def _of_bins(
        cls,
        stats: BinStats,
        low: np.ndarray | None,
        high: np.ndarray | None,
        confidence: float | None,
        strategy: str,
    ) -> Self:
        """The undrawn diagram of unbatched bin statistics (see :meth:`from_bins`)."""
        if stats.count.ndim != 1:
            raise ValueError(
                f"from_bins needs one set of bins, got batched shape {tuple(stats.count.shape)}"
            )
        return cls(
            bin_edges=to_numpy(stats.edges),
            bin_confidence=to_numpy(stats.mean_confidence),
            bin_accuracy=to_numpy(stats.accuracy),
            bin_count=to_numpy(stats.count),
            ece=float(calibration_error(stats, "l1")),
            mce=float(calibration_error(stats, "max")),
            low=None if low is None else to_numpy(low),
            high=None if high is None else to_numpy(high),
            confidence=confidence,
            strategy=strategy,
        )

    @classmethod
    def _compute(
        cls,
        pred: Predictions,
        *,
        n_bins: int = 15,
        strategy: str = "uniform",
        error_bars: bool = False,
        n_resamples: int = 200,
        confidence: float = 0.95,
        seed: int = 0,
    ) -> Self:
        """Bin top-label confidence (``strategy`` "uniform" or "quantile");
        ``error_bars=True`` adds seeded bootstrap percentile intervals of each bin's accuracy."""
        stats = top_label_bins(pred, n_bins, strategy)
        if not error_bars:
            return cls._of_bins(stats, None, None, None, strategy)
        low, high = bootstrap_bin_accuracy(pred, n_bins, strategy, n_resamples, confidence, seed)
        return cls._of_bins(stats, low, high, confidence, strategy)

    # ------------------------------------------------------------------ drawing
    @property
    def error_names(self) -> tuple[str, str]:
        """Names of the two summary errors for the title."""
        return ("ECE", "MCE") if self.strategy == "uniform" else ("AdaECE", "AdaMCE")

    def summary(self) -> str:
        """``'ECE = 3.21%   MCE = 9.87%'`` (or the equal-mass names)."""
        e_name, m_name = self.error_names
        return f"{e_name} = {percent(self.ece)}   {m_name} = {percent(self.mce)}"

    def _heading(self, title: str | None) -> str:
        """The summary errors, under ``title`` when one is given."""
        return self.summary() if title is None else f"{title}\n{self.summary()}"

    def _draw(self, ax: Axes) -> None:
        """Accuracy bars of the non-empty bins, the gaps, the error bars, the diagonal."""
        shown = self.bin_count > 0
        left = self.bin_edges[:-1][shown]
        width = np.diff(self.bin_edges)[shown]
        acc, conf = self.bin_accuracy[shown], self.bin_confidence[shown]
        self.bars_ = ax.bar(
            left,
            acc,
            width=width,
            align="edge",
            color=ACCURACY_COLOR,
            edgecolor=EDGE_COLOR,
            linewidth=0.6,
            label="Accuracy",
            zorder=2,
        )
        self.gaps_ = self._draw_gaps(ax, left, width, acc, conf)
        self.errorbar_ = self._draw_error_bars(ax, left + width / 2, shown)
        (self.identity_line_,) = ax.plot(
            [0, 1],
            [0, 1],
            linestyle="--",
            color=IDENTITY_COLOR,
            linewidth=1.2,
            label="Perfect calibration",
            zorder=4,
        )
        self._decorate(ax)

    @staticmethod
    def _draw_gaps(
        ax: Axes, left: np.ndarray, width: np.ndarray, acc: np.ndarray, conf: np.ndarray
    ) -> dict[str, Any]:
        """Gap bars between accuracy and confidence, coloured by its sign."""
        over = acc < conf
        gaps = {}
        for key, mask, color, label in (
            ("over", over, OVERCONFIDENCE_COLOR, "Gap: over-confident"),
            ("under", ~over & (acc > conf), UNDERCONFIDENCE_COLOR, "Gap: under-confident"),
        ):
            if mask.any():
                gaps[key] = ax.bar(
                    left[mask],
                    np.abs(conf - acc)[mask],
                    bottom=np.minimum(acc, conf)[mask],
                    width=width[mask],
                    align="edge",
                    color=color,
                    edgecolor=EDGE_COLOR,
                    linewidth=0.6,
                    label=label,
                    zorder=3,
                )
        return gaps

    def _draw_error_bars(self, ax: Axes, centers: np.ndarray, shown: np.ndarray) -> Any:
        """Interval whiskers per non-empty bin, or None without intervals."""
        if self.low is None or self.high is None:
            return None
        acc, low, high = self.bin_accuracy[shown], self.low[shown], self.high[shown]
        ok = np.isfinite(low) & np.isfinite(high)
        if not ok.any():
            return None
        yerr = np.clip(np.stack([acc - low, high - acc])[:, ok], 0, None)
        label = "Bootstrap interval"
        if self.confidence is not None:
            label = f"{round(100 * self.confidence)}% bootstrap interval"
        return ax.errorbar(
            centers[ok],
            acc[ok],
            yerr=yerr,
            fmt="none",
            ecolor="black",
            elinewidth=1,
            capsize=2.5,
            label=label,
            zorder=5,
        )

    def _decorate(self, ax: Axes) -> None:
        """Limits, labels and legend (the title, carrying the summary errors, is
        :meth:`_heading`)."""
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_box_aspect(1)
        ax.set_xlabel("Confidence")
        ax.set_ylabel("Accuracy")
        handles = [self.bars_, *self.gaps_.values(), self.identity_line_]
        if self.errorbar_ is not None:
            handles.append(self.errorbar_)
        ax.legend(
            handles=handles,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.13),
            ncol=2,
            fontsize="small",
            frameon=False,
        )
