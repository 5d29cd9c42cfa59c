"""Calibration figures as scikit-learn-style display objects.

* :class:`ReliabilityDiagramDisplay` -- per-bin accuracy vs confidence, over-/under-confidence
  gaps in orange/red, ECE/MCE in the title, optional bootstrap error bars;
* :class:`ConfidenceHistogramDisplay` -- density of top-label confidence with mean accuracy and
  mean confidence marked;
* :class:`BinSweepDisplay` -- ECE and MCE against the number of bins;
* :class:`RiskCoverageDisplay` -- selective risk vs coverage with the AURC;
* :func:`save_figures` -- all four as PNG files.
* :class:`ConfidenceRegionDisplay` -- a 2-D classifier's confidence on a dense grid, data on
  top ([BO4SC] Fig. 1); :class:`WeightTrajectoryDisplay` and :class:`WeightMapDisplay` --
  BO4SC sample weights over outer iterations and at the end ([BO4SC] Fig. 3). The papers'
  composed figures are the studies' own (e.g. :mod:`selfcal.studies.bo4sc.figures`).

Each display has ``from_predictions(predictions=None, *, labels, logits | probs, ..., ax=None)``
that computes its data with :mod:`selfcal.metrics`, stores it as attributes, draws, and returns
the display (with ``ax_`` and ``figure_``); ``plot(ax=None)`` redraws. The shared protocol is
:mod:`selfcal.plots._base` (:class:`~selfcal.plots._base.Display`). matplotlib is imported
only when something is drawn, so importing this module does not need it.
"""

from selfcal.plots.histogram import ConfidenceHistogramDisplay
from selfcal.plots.regions import ConfidenceRegionDisplay, confidence_grid
from selfcal.plots.reliability import ReliabilityDiagramDisplay, bootstrap_bin_accuracy
from selfcal.plots.save import method_colours, new_figure, save_figures
from selfcal.plots.selective import RiskCoverageDisplay
from selfcal.plots.sweep import DEFAULT_BIN_COUNTS, BinSweepDisplay
from selfcal.plots.weights import WeightMapDisplay, WeightTrajectoryDisplay

__all__ = [
    "DEFAULT_BIN_COUNTS",
    "BinSweepDisplay",
    "ConfidenceHistogramDisplay",
    "ConfidenceRegionDisplay",
    "ReliabilityDiagramDisplay",
    "RiskCoverageDisplay",
    "WeightMapDisplay",
    "WeightTrajectoryDisplay",
    "bootstrap_bin_accuracy",
    "confidence_grid",
    "method_colours",
    "new_figure",
    "save_figures",
]
