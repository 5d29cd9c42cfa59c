"""ECE and MCE against the number of equal-width bins ([MetaReg] Fig. 5).

Binned errors depend on the bin count: with few samples per bin the estimate is biased upward,
so a method whose ECE stays low across bin counts is better calibrated in a robust sense. Each
point is :func:`selfcal.metrics.ece` / :func:`selfcal.metrics.mce` at that bin count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Self

import numpy as np

from selfcal.metrics.calibration import ece, mce
from selfcal.plots._base import OverlayDisplay, autoscale_from_zero
from selfcal.predictions import Predictions

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.axes import Axes

DEFAULT_BIN_COUNTS = (10, 20, 50, 100, 200, 500, 1000)


@dataclass(kw_only=True, eq=False, repr=False)
class BinSweepDisplay(OverlayDisplay):
    """ECE and MCE (in %) against the number of bins, log x-axis, one prediction set.

    ``from_predictions(predictions | labels= with logits= or probs=, *,
    n_bins=DEFAULT_BIN_COUNTS, name=None, ax=None, title=None)`` evaluates ECE and MCE at each
    bin count in ``n_bins`` (sorted, duplicates dropped) and draws both curves. Overlay several
    sets by passing the same ``ax=`` or with :meth:`from_predictions_dict` (e.g. ``{"CE": p1,
    "FL": p2}``, the same ``n_bins`` for all).
    Attributes: ``n_bins`` (int array), ``ece`` and ``mce`` (float64 fractions, one per bin
    count), ``name``. After :meth:`plot`: ``ax_``, ``figure_``, ``ece_line_``, ``mce_line_``.
    """

    figsize = (6.4, 3.8)
    n_bins: np.ndarray
    ece: np.ndarray
    mce: np.ndarray
    name: str | None = None

    @classmethod
    def _compute(
        cls,
        pred: Predictions,
        *,
        n_bins: Sequence[int] | int = DEFAULT_BIN_COUNTS,
        name: str | None = None,
    ) -> Self:
        """ECE and MCE of ``pred`` at each bin count in ``n_bins`` (sorted, duplicates
        dropped)."""
        counts = sorted({n_bins} if isinstance(n_bins, int) else set(n_bins))
        if not counts:
            raise ValueError("n_bins must list at least one bin count")
        return cls(
            n_bins=np.asarray(counts, dtype=np.int64),
            ece=np.array([float(ece.core(pred, n_bins=k)) for k in counts]),
            mce=np.array([float(mce.core(pred, n_bins=k)) for k in counts]),
            name=name,
        )

    def _draw(self, ax: Axes) -> None:
        """ECE (solid, circles) and MCE (dashed, squares) in one colour."""
        prefix = "" if self.name is None else f"{self.name}: "
        (self.ece_line_,) = ax.plot(
            self.n_bins, 100 * self.ece, marker="o", linestyle="-", label=f"{prefix}ECE"
        )
        (self.mce_line_,) = ax.plot(
            self.n_bins,
            100 * self.mce,
            marker="s",
            linestyle="--",
            color=self.ece_line_.get_color(),
            label=f"{prefix}MCE",
        )
        self._decorate(ax)

    def _decorate(self, ax: Axes) -> None:
        """Log x-axis ticked at the bin counts, percent y-axis, grid and legend."""
        from matplotlib.ticker import NullFormatter

        ax.set_xscale("log")
        ax.set_xticks(self.n_bins, [str(k) for k in self.n_bins])
        ax.xaxis.set_minor_formatter(NullFormatter())
        autoscale_from_zero(ax)
        ax.set_xlabel("Number of bins")
        ax.set_ylabel("Calibration error (%)")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize="small", frameon=False)
