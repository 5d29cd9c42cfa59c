"""Post-hoc calibrators: fit on held-out scores and labels, then map new scores to calibrated
probabilities.

Every calibrator follows the estimator contract of :class:`Calibrator`::

    cal = TemperatureScaling().fit(logits=val_logits, labels=val_labels)
    p = cal.predict_proba(logits=test_logits)   # numpy in -> numpy out, torch in -> torch out
    cal.save("ts.json"); cal = TemperatureScaling.load("ts.json")
    cal = TemperatureScaling(kind="logits").fit(val_logits, val_labels)  # scikit-learn style:
                                                # positional scores need a stated kind
    module = cal.to_module()                    # torch.nn.Module: logits -> calibrated logits

They clone with ``sklearn.base.clone`` (``get_params`` / ``set_params``); a solver that stops
at its iteration cap warns with :class:`~selfcal.exceptions.CalibrationNotConverged`, and a fit
the validation data do not identify returns a stated, bounded result and warns with
:class:`~selfcal.exceptions.DegenerateCalibration` (the rule: :class:`Calibrator`'s ``fit``;
:func:`recorded_degenerate_fits` collects those warnings in a sweep).

Calibrators are built by name from one registry (:mod:`selfcal.posthoc.registry`):
``build_calibrator("ts")`` -- or by the class's name in kebab case,
``build_calibrator("temperature-scaling")`` (:func:`calibrator_aliases`) --
``calibrator_names()``, and :data:`CALIBRATORS`, a read-only view
name -> zero-argument factory (``CALIBRATORS[name]()``); the CLI's ``selfcal calibrate
--calibrator`` offers exactly these names, described by the first line of each class docstring.

Adding a calibrator means: one file in ``selfcal/posthoc/`` with a :class:`Calibrator` subclass
registered by ``@register_calibrator("name")`` (a summary line first in its docstring), plus
its import line below -- nothing else.

scikit-learn is imported only when an isotonic calibrator is fitted. scipy (which
:mod:`selfcal.metrics` imports anyway) solves the large matrix / Dirichlet fits (L-BFGS) and
ensemble temperature scaling's MSE temperature.
"""

from __future__ import annotations

from selfcal.posthoc._base import Calibrator
from selfcal.posthoc._degenerate import recorded_degenerate_fits
from selfcal.posthoc.auto import AutoCalibration, Uncalibrated
from selfcal.posthoc.bbq import BBQ
from selfcal.posthoc.beta import BetaCalibration
from selfcal.posthoc.dirichlet import DirichletCalibration
from selfcal.posthoc.ensemble import EnsembleTemperatureScaling
from selfcal.posthoc.groups import GroupwiseCalibration
from selfcal.posthoc.histogram import HistogramBinning
from selfcal.posthoc.isotonic import IsotonicCalibration, OneVsRestIsotonic
from selfcal.posthoc.linear import MatrixScaling, PlattScaling, QuadraticScaling, VectorScaling
from selfcal.posthoc.multicalibration import MulticlassMulticalibration
from selfcal.posthoc.registry import (
    CALIBRATORS,
    build_calibrator,
    calibrator_aliases,
    calibrator_name,
    calibrator_names,
    calibrator_summary,
    register_calibrator,
)
from selfcal.posthoc.structured import StructuredMatrixScaling, StructuredVectorScaling
from selfcal.posthoc.temperature import TemperatureScaling
from selfcal.posthoc.venn_abers import TopLabelVennAbers, VennAbers

__all__ = [
    "BBQ",
    "CALIBRATORS",
    "AutoCalibration",
    "BetaCalibration",
    "Calibrator",
    "DirichletCalibration",
    "EnsembleTemperatureScaling",
    "GroupwiseCalibration",
    "HistogramBinning",
    "IsotonicCalibration",
    "MatrixScaling",
    "MulticlassMulticalibration",
    "OneVsRestIsotonic",
    "PlattScaling",
    "QuadraticScaling",
    "StructuredMatrixScaling",
    "StructuredVectorScaling",
    "TemperatureScaling",
    "TopLabelVennAbers",
    "Uncalibrated",
    "VectorScaling",
    "VennAbers",
    "build_calibrator",
    "calibrator_aliases",
    "calibrator_name",
    "calibrator_names",
    "calibrator_summary",
    "recorded_degenerate_fits",
    "register_calibrator",
]
