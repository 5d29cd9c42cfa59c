"""Write the standard set of calibration figures to a folder (used by ``selfcal --plot``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from selfcal.plots._base import INSTALL_HINT
from selfcal.plots.histogram import ConfidenceHistogramDisplay
from selfcal.plots.reliability import ReliabilityDiagramDisplay
from selfcal.plots.selective import RiskCoverageDisplay
from selfcal.plots.sweep import BinSweepDisplay
from selfcal.predictions import Predictions, as_predictions

DPI = 150


def _figure_jobs(pred: Predictions, n_bins: int) -> dict[str, tuple[tuple[float, float], Callable]]:
    """File stem -> (figure size in inches, function drawing on an axes)."""
    return {
        "reliability": (
            (4.8, 6.0),
            lambda ax: ReliabilityDiagramDisplay.from_predictions(pred, n_bins=n_bins, ax=ax),
        ),
        "confidence_hist": (
            (4.8, 3.6),
            lambda ax: ConfidenceHistogramDisplay.from_predictions(pred, n_bins=n_bins, ax=ax),
        ),
        "ece_vs_bins": ((6.4, 3.8), lambda ax: BinSweepDisplay.from_predictions(pred, ax=ax)),
        "risk_coverage": ((5.2, 3.8), lambda ax: RiskCoverageDisplay.from_predictions(pred, ax=ax)),
    }


def new_figure(figsize: tuple[float, float]) -> Any:
    """A figure outside pyplot's registry (no GUI backend, freed with its last reference)."""
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(INSTALL_HINT) from exc
    return Figure(figsize=figsize, layout="constrained")


def method_colours(n: int) -> list[Any]:
    """``n`` distinct colours (tab20 beyond the default cycle's ten), one per method, so a
    method keeps its colour across the panels of a figure."""
    from matplotlib import colormaps

    return [colormaps["tab10" if n <= 10 else "tab20"](i) for i in range(n)]


def save_figures(
    predictions: Predictions, out_dir: str | Path, *, n_bins: int = 15, prefix: str = ""
) -> list[Path]:
    """Write ``reliability.png`` and ``confidence_hist.png`` (``n_bins`` equal-width bins),
    ``ece_vs_bins.png`` (bin counts :data:`~selfcal.plots.DEFAULT_BIN_COUNTS`) and
    ``risk_coverage.png`` -- each name preceded by ``prefix`` -- to ``out_dir``, creating it
    if needed; returns the paths in that order.

    ``predictions`` must carry labels. Figures are built with :class:`matplotlib.figure.Figure`
    rather than ``pyplot``, so nothing is left open and no display is needed.
    """
    pred = as_predictions(predictions)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for stem, (figsize, draw) in _figure_jobs(pred, n_bins).items():
        fig = new_figure(figsize)
        draw(fig.add_subplot())
        path = out / f"{prefix}{stem}.png"
        fig.savefig(path, dpi=DPI)
        fig.clear()
        paths.append(path)
    return paths
