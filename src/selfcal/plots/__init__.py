"""Calibration figures as scikit-learn-style display objects.

* :class:`ReliabilityDiagramDisplay` -- per-bin accuracy vs confidence, over-/under-confidence
  gaps in orange/red, ECE/MCE in the title, optional bootstrap error bars;
* :class:`ConfidenceHistogramDisplay` -- density of top-label confidence with mean accuracy and
  mean confidence marked;
* :class:`BinSweepDisplay` -- ECE and MCE against the number of bins;
* :class:`RiskCoverageDisplay` -- selective risk vs coverage with the AURC;
* :func:`save_figures` -- all four as PNG files.

Each display has ``from_predictions(predictions=None, *, labels, logits | probs, ..., ax=None)``
that computes its data with :mod:`selfcal.metrics`, stores it as attributes, draws, and returns
the display (with ``ax_`` and ``figure_``); ``plot(ax=None)`` redraws. matplotlib is imported
only when something is drawn, so importing this module does not need it.
"""

from selfcal.plots.histogram import ConfidenceHistogramDisplay
from selfcal.plots.reliability import ReliabilityDiagramDisplay, bootstrap_bin_accuracy
from selfcal.plots.save import save_figures
from selfcal.plots.selective import RiskCoverageDisplay
from selfcal.plots.sweep import DEFAULT_BIN_COUNTS, BinSweepDisplay

__all__ = [
    "DEFAULT_BIN_COUNTS",
    "BinSweepDisplay",
    "ConfidenceHistogramDisplay",
    "ReliabilityDiagramDisplay",
    "RiskCoverageDisplay",
    "bootstrap_bin_accuracy",
    "save_figures",
]
