"""selfcal: classifiers whose confidence can be trusted.

Measure calibration (:mod:`selfcal.metrics`), fix it after training (:mod:`selfcal.posthoc`),
and draw it (:mod:`selfcal.plots`). Heavy optional dependencies (scikit-learn, matplotlib) are
imported only when used.
"""

from selfcal.predictions import PROB_ATOL, Predictions, as_predictions

__version__ = "0.1.0"
__all__ = ["PROB_ATOL", "Predictions", "__version__", "as_predictions"]
