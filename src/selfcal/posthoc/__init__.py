"""Post-hoc calibrators: fit on held-out scores and labels, then map new scores to calibrated
probabilities.

Every calibrator follows the estimator contract of :class:`Calibrator`::

    cal = TemperatureScaling().fit(logits=val_logits, labels=val_labels)
    p = cal.predict_proba(logits=test_logits)   # numpy in -> numpy out, torch in -> torch out
    cal.save("ts.json"); cal = TemperatureScaling.load("ts.json")

:data:`CALIBRATORS` maps the CLI names to zero-argument factories (``CALIBRATORS[name]()``).
scikit-learn is imported only when an isotonic calibrator is fitted.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from selfcal.posthoc._base import Calibrator
from selfcal.posthoc.histogram import HistogramBinning
from selfcal.posthoc.isotonic import IsotonicCalibration, OneVsRestIsotonic
from selfcal.posthoc.linear import MatrixScaling, PlattScaling, VectorScaling
from selfcal.posthoc.temperature import TemperatureScaling

CALIBRATORS: dict[str, Callable[[], Calibrator]] = {
    "ts": TemperatureScaling,
    "ts-grid": functools.partial(TemperatureScaling, method="grid"),
    "vector": VectorScaling,
    "matrix": MatrixScaling,
    "platt": PlattScaling,
    "isotonic": IsotonicCalibration,
    "isotonic-ovr": OneVsRestIsotonic,
    "histogram": HistogramBinning,
}
"""CLI name -> factory of an unfitted calibrator with default hyperparameters."""

__all__ = [
    "CALIBRATORS",
    "Calibrator",
    "HistogramBinning",
    "IsotonicCalibration",
    "MatrixScaling",
    "OneVsRestIsotonic",
    "PlattScaling",
    "TemperatureScaling",
    "VectorScaling",
]
