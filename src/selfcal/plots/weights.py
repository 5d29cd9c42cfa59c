"""BO4SC sample-weight figures ([BO4SC] Fig. 3): weight trajectories and the final weight map.

* :class:`WeightTrajectoryDisplay` (left panel): every training weight ``w_i`` against outer
  iterations, the x axis in training epochs (``epoch_unit`` epochs per outer iteration: the
  ``T`` full-batch inner steps). Samples the final model misclassifies are red and drawn on
  top; the rest are dark with low alpha. Each group is one ``LineCollection`` (one draw call
  for hundreds of lines).
* :class:`WeightMapDisplay` (right panel): training points at their raw 2-D coordinates
  coloured by final weight (dark = low, with a colour bar), misclassified points outlined in
  red.
* The BO4SC study puts the two side by side
  (:func:`selfcal.studies.bo4sc.figures.bo4sc_figure3`).

Weights are expected in ``[0, 1]`` (initialised at 1, clipped after each outer step); the
y range / colour range is ``[0, 1]``, widened to the data where weights leave it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from selfcal._validation import check_positive
from selfcal.plots._base import Display, pyplot, to_numpy
from selfcal.plots.regions import check_points

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.axes import Axes

CORRECT_COLOR = "#222222"
"""Dark grey of the trajectories of correctly classified samples."""
MISCLASSIFIED_COLOR = "#d62728"
"""Red of misclassified samples' trajectories and outlines."""
WEIGHT_CMAP = "viridis"
"""Colour map of the final weights (dark = low)."""


# --------------------------------------------------------------------------- validation
def check_mask(mask: Any, n: int, name: str = "misclassified") -> np.ndarray:
    """``mask`` as a boolean ``(n,)`` array; accepts booleans or 0/1 numbers."""
    arr = to_numpy(mask)
    if arr.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {arr.shape}")
    if not np.isin(arr, (0.0, 1.0)).all():
        raise ValueError(f"{name} must hold booleans (or 0/1)")
    return arr.astype(bool)


def check_finite(values: Any, ndim: int, name: str) -> np.ndarray:
    """``values`` as a finite, non-empty float64 array with ``ndim`` dimensions."""
    arr = to_numpy(values)
    if arr.ndim != ndim or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty {ndim}-D array, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return arr


def weight_range(values: np.ndarray) -> tuple[float, float]:
    """``[0, 1]``, widened to include every value."""
    return min(0.0, float(values.min())), max(1.0, float(values.max()))


# --------------------------------------------------------------------------- trajectories
@dataclass(kw_only=True, eq=False, repr=False)
class WeightTrajectoryDisplay(Display):
    """Per-sample weight trajectories over outer iterations ([BO4SC] Fig. 3 left).

    Attributes: ``history`` float64 ``(iterations + 1, n)`` (row 0 = initial weights),
    ``misclassified`` bool ``(n,)``, ``epoch_unit`` (training epochs per outer iteration),
    ``epochs`` (x coordinates). After :meth:`plot`: ``ax_``, ``figure_``, ``correct_lines_``
    and ``misclassified_lines_`` (``LineCollection``; segment ``k`` is the ``k``-th sample of
    its group in index order).
    """

    figsize = (5.6, 4.0)
    history: np.ndarray
    misclassified: np.ndarray
    epoch_unit: float = 10

    @classmethod
    def from_history(
        cls,
        history: Any,
        misclassified: Any,
        *,
        epoch_unit: float = 10,
        ax: Axes | None = None,
        title: str | None = None,
    ) -> WeightTrajectoryDisplay:
        """Validate ``history`` ``(iterations + 1, n)`` with at least 2 rows and the mask
        ``misclassified`` ``(n,)`` (by the final model), then draw."""
        hist = check_finite(history, 2, "history")
        if hist.shape[0] < 2:
            raise ValueError(
                f"history needs >= 2 rows (initial weights + one outer iteration), got {hist.shape}"
            )
        check_positive("epoch_unit", epoch_unit)
        disp = cls(
            history=hist,
            misclassified=check_mask(misclassified, hist.shape[1]),
            epoch_unit=epoch_unit,
        )
        return disp.plot(ax=ax, title=title)

    @property
    def epochs(self) -> np.ndarray:
        """Training epochs after each outer iteration: ``j * epoch_unit``, ``j = 0..iterations``."""
        return np.arange(self.history.shape[0]) * float(self.epoch_unit)

    def segments(self, mask: np.ndarray) -> Any:
        """``(k, iterations + 1, 2)`` polylines ``(epoch, w_i)`` of the samples in ``mask`` (an
        array; ``LineCollection`` takes it as a sequence of polylines)."""
        weights = self.history[:, mask].T
        epochs = np.broadcast_to(self.epochs, weights.shape)
        return np.stack([epochs, weights], axis=-1)

    def plot(
        self,
        ax: Axes | None = None,
        *,
        title: str | None = None,
        alpha: float = 0.15,
        linewidth: float = 0.7,
    ) -> Self:
        """Draw on ``ax`` (a new figure when None) and return ``self``: correctly classified
        samples dark with ``alpha``, misclassified ones red (alpha 0.8) above them."""
        pyplot()
        from matplotlib.collections import LineCollection

        ax, fig = self._axes(ax)
        n_wrong = int(self.misclassified.sum())
        self.correct_lines_ = LineCollection(
            self.segments(~self.misclassified),
            colors=CORRECT_COLOR,
            alpha=alpha,
            linewidths=linewidth,
            zorder=2,
            label=f"Correctly classified ({len(self.misclassified) - n_wrong})",
        )
        self.misclassified_lines_ = LineCollection(
            self.segments(self.misclassified),
            colors=MISCLASSIFIED_COLOR,
            alpha=0.8,
            linewidths=linewidth,
            zorder=3,
            label=f"Misclassified ({n_wrong})",
        )
        ax.add_collection(self.correct_lines_, autolim=False)
        ax.add_collection(self.misclassified_lines_, autolim=False)
        self._decorate(ax)
        return self._finish(ax, fig, title)

    def _decorate(self, ax: Axes) -> None:
        """Limits (x: all epochs; y: ``[0, 1]`` or the data range, 2% padding), labels,
        legend (opaque handles)."""
        low, high = weight_range(self.history)
        pad = 0.02 * (high - low)
        ax.set_xlim(0, self.epochs[-1])
        ax.set_ylim(low - pad, high + pad)
        unit = f"{self.epoch_unit:g}"
        ax.set_xlabel(f"Training epochs (1 outer iteration = {unit} epochs)")
        ax.set_ylabel("Sample weight $w_i$")
        from matplotlib.lines import Line2D

        handles = [
            Line2D([], [], color=color, label=lines.get_label())
            for color, lines in (
                (MISCLASSIFIED_COLOR, self.misclassified_lines_),
                (CORRECT_COLOR, self.correct_lines_),
            )
        ]
        ax.legend(handles=handles, loc="lower left", fontsize="small", framealpha=0.9)


# --------------------------------------------------------------------------- weight map
@dataclass(kw_only=True, eq=False, repr=False)
class WeightMapDisplay(Display):
    """Training points coloured by their final weight ([BO4SC] Fig. 3 right).

    Attributes: ``x`` float64 ``(n, 2)`` raw coordinates, ``weights`` float64 ``(n,)``,
    ``misclassified`` bool ``(n,)``. After :meth:`plot`: ``ax_``, ``figure_``, ``points_``
    (all points in index order, face colour = ``cmap(norm(weight))``), ``outlines_`` (red
    rings around the misclassified points), ``norm_`` (colour range ``[0, 1]`` or the data
    range), ``colorbar_`` (or None).
    """

    figsize = (5.0, 4.2)
    x: np.ndarray
    weights: np.ndarray
    misclassified: np.ndarray

    @classmethod
    def from_weights(
        cls,
        x: Any,
        weights: Any,
        misclassified: Any,
        *,
        ax: Axes | None = None,
        title: str | None = None,
        colorbar: bool = True,
    ) -> WeightMapDisplay:
        """Validate ``x`` ``(n, 2)``, ``weights`` ``(n,)`` (finite) and ``misclassified``
        ``(n,)``, then draw."""
        points = check_points(x)
        w = check_finite(weights, 1, "weights")
        if w.shape != (points.shape[0],):
            raise ValueError(f"weights must have shape ({points.shape[0]},), got {w.shape}")
        disp = cls(x=points, weights=w, misclassified=check_mask(misclassified, len(w)))
        return disp.plot(ax=ax, title=title, colorbar=colorbar)

    def plot(
        self,
        ax: Axes | None = None,
        *,
        title: str | None = None,
        colorbar: bool = True,
        cmap: str = WEIGHT_CMAP,
        point_size: float = 14.0,
    ) -> Self:
        """Draw on ``ax`` (a new figure when None) and return ``self``."""
        pyplot()
        from matplotlib.colors import Normalize

        ax, fig = self._axes(ax)
        self.norm_ = Normalize(*weight_range(self.weights))
        self.points_ = ax.scatter(
            self.x[:, 0],
            self.x[:, 1],
            c=self.weights,
            cmap=cmap,
            norm=self.norm_,
            s=point_size,
            edgecolors="none",
            zorder=2,
        )
        wrong = self.x[self.misclassified]
        self.outlines_ = ax.scatter(
            wrong[:, 0],
            wrong[:, 1],
            s=point_size * 2.2,
            facecolors="none",
            edgecolors=MISCLASSIFIED_COLOR,
            linewidths=1.1,
            zorder=3,
            label=f"Misclassified ({len(wrong)})",
        )
        self.colorbar_ = (
            fig.colorbar(self.points_, ax=ax, label="Final weight") if colorbar else None
        )
        ax.set_aspect("equal", adjustable="datalim")
        if len(wrong):
            ax.legend(loc="best", fontsize="small", framealpha=0.9)
        return self._finish(ax, fig, title)
