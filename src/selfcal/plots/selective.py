"""Risk-coverage curve: selective risk when only the most confident samples are accepted.

Points and AURC come from :func:`selfcal.metrics.risk_coverage_curve` (ties in confidence are
handled there as the expectation over random tie-breaking).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Self

import numpy as np

from selfcal.metrics.selective import risk_coverage_curve
from selfcal.plots._base import OverlayDisplay, autoscale_from_zero, to_numpy
from selfcal.predictions import Predictions

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.axes import Axes


@dataclass(kw_only=True, eq=False, repr=False)
class RiskCoverageDisplay(OverlayDisplay):
    """Selective risk against coverage, with the AURC in the legend (one prediction set).

    ``from_predictions(predictions | labels= with logits= or probs=, *, name=None, ax=None,
    title=None)`` computes the curve and draws it. Overlay several models by passing the same
    ``ax=`` or with :meth:`from_predictions_dict`.
    Attributes: ``threshold``, ``coverage``, ``risk`` (float64 arrays, one point per distinct
    confidence, decreasing threshold), ``aurc`` (float), ``name``. After :meth:`plot`:
    ``ax_``, ``figure_``, ``line_``.
    """

    figsize = (5.2, 3.8)
    threshold: np.ndarray
    coverage: np.ndarray
    risk: np.ndarray
    aurc: float
    name: str | None = None

    @classmethod
    def _compute(cls, pred: Predictions, *, name: str | None = None) -> Self:
        """The risk-coverage curve of ``pred``, labelled ``name`` in the legend."""
        curve = risk_coverage_curve(pred)
        return cls(
            threshold=to_numpy(curve.threshold),
            coverage=to_numpy(curve.coverage),
            risk=to_numpy(curve.risk),
            aurc=float(curve.aurc),
            name=name,
        )

    @property
    def label(self) -> str:
        """Legend entry, e.g. ``'CE (AURC = 0.0412)'``."""
        aurc = f"AURC = {self.aurc:.4f}"
        return aurc if self.name is None else f"{self.name} ({aurc})"

    def _draw(self, ax: Axes) -> None:
        """The curve, coverage in ``[0, 1]``, risk from 0, grid and legend."""
        (self.line_,) = ax.plot(self.coverage, self.risk, linewidth=1.8, label=self.label)
        ax.set_xlim(0, 1)
        autoscale_from_zero(ax)
        ax.set_xlabel("Coverage")
        ax.set_ylabel("Selective risk (error rate)")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize="small", framealpha=0.9)
