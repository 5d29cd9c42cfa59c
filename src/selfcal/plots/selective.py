"""Risk-coverage curve: selective risk when only the most confident samples are accepted.

Points and AURC come from :func:`selfcal.metrics.risk_coverage_curve` (ties in confidence are
handled there as the expectation over random tie-breaking).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from selfcal.metrics.selective import risk_coverage_curve
from selfcal.plots._base import autoscale_from_zero, get_axes, plot_many, resolve, to_numpy
from selfcal.predictions import Predictions

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.axes import Axes


class RiskCoverageDisplay:
    """Selective risk against coverage, with the AURC in the legend (one prediction set).

    Overlay several models by passing the same ``ax=`` or with :meth:`from_predictions_dict`.
    Attributes: ``threshold``, ``coverage``, ``risk`` (float64 arrays, one point per distinct
    confidence, decreasing threshold), ``aurc`` (float), ``name``. After :meth:`plot`:
    ``ax_``, ``figure_``, ``line_``.
    """

    def __init__(
        self,
        *,
        threshold: np.ndarray,
        coverage: np.ndarray,
        risk: np.ndarray,
        aurc: float,
        name: str | None = None,
    ) -> None:
        self.threshold = threshold
        self.coverage = coverage
        self.risk = risk
        self.aurc = aurc
        self.name = name

    @classmethod
    def from_predictions(
        cls,
        predictions: Predictions | None = None,
        /,
        *,
        labels: Any = None,
        logits: Any = None,
        probs: Any = None,
        name: str | None = None,
        ax: Axes | None = None,
        title: str | None = None,
    ) -> RiskCoverageDisplay:
        """Compute the risk-coverage curve and draw it."""
        pred = resolve(predictions, labels, logits, probs)
        curve = risk_coverage_curve(pred)
        disp = cls(
            threshold=to_numpy(curve.threshold),
            coverage=to_numpy(curve.coverage),
            risk=to_numpy(curve.risk),
            aurc=float(curve.aurc),
            name=name,
        )
        return disp.plot(ax=ax, title=title)

    @classmethod
    def from_predictions_dict(
        cls,
        predictions: Mapping[str, Predictions],
        *,
        ax: Axes | None = None,
        title: str | None = None,
    ) -> dict[str, RiskCoverageDisplay]:
        """One curve per named prediction set, all on one axes; returns displays by name."""
        return plot_many(cls.from_predictions, predictions, ax, title=title)

    @property
    def label(self) -> str:
        """Legend entry, e.g. ``'CE (AURC = 0.0412)'``."""
        aurc = f"AURC = {self.aurc:.4f}"
        return aurc if self.name is None else f"{self.name} ({aurc})"

    def plot(self, ax: Axes | None = None, *, title: str | None = None) -> RiskCoverageDisplay:
        """Draw the curve on ``ax`` (a new figure when None) and return ``self``."""
        ax, fig = get_axes(ax, figsize=(5.2, 3.8))
        (self.line_,) = ax.plot(self.coverage, self.risk, linewidth=1.8, label=self.label)
        ax.set_xlim(0, 1)
        autoscale_from_zero(ax)
        ax.set_xlabel("Coverage")
        ax.set_ylabel("Selective risk (error rate)")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize="small", framealpha=0.9)
        if title is not None:
            ax.set_title(title)
        self.ax_, self.figure_ = ax, fig
        return self
