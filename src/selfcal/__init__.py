"""selfcal: classifiers whose confidence can be trusted.

The everyday API is here, one import away::

    import selfcal
    selfcal.ece(logits=z, labels=y)                       # and mce, adaece, classwise_ece, ...
    cal = selfcal.AutoCalibration().fit(logits=z_val, labels=y_val)
    p = cal.predict_proba(logits=z_test)
    sets = selfcal.SplitConformal(alpha=0.1).fit(probs=p_val, labels=y_val).predict(probs=p)

The metrics (:mod:`selfcal.metrics`: :func:`~selfcal.metrics.ece`, :func:`~selfcal.metrics.mce`,
:func:`~selfcal.metrics.adaece`, :func:`~selfcal.metrics.classwise_ece`,
:func:`~selfcal.metrics.smooth_ece`, :func:`~selfcal.metrics.nll`,
:func:`~selfcal.metrics.brier`, :func:`~selfcal.metrics.accuracy`,
:func:`~selfcal.metrics.bootstrap_ci`), every post-hoc calibrator class with
:func:`~selfcal.posthoc.build_calibrator` and :func:`~selfcal.posthoc.calibrator_names`,
:func:`~selfcal.evaluation.evaluate` (every headline metric with its interval), the input
contract (:class:`~selfcal.predictions.Predictions`, :func:`~selfcal.predictions.as_predictions`,
:data:`~selfcal.predictions.PROB_ATOL`) and split-conformal prediction
(:class:`~selfcal.conformal.SplitConformal`, :func:`~selfcal.conformal.conformity_scores`,
:func:`~selfcal.conformal.conformal_quantile`, :data:`~selfcal.conformal.SCORES`).

``import selfcal`` itself imports neither torch nor numpy: each public name is loaded from its
module on first access (a module ``__getattr__``, PEP 562), so ``selfcal --version`` and
``selfcal --help`` start at once; ``from selfcal import ece`` works as any import does.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only; loaded on first access below
    from selfcal.conformal import SCORES, SplitConformal, conformal_quantile, conformity_scores
    from selfcal.evaluation import evaluate
    from selfcal.metrics import (
        accuracy,
        adaece,
        bootstrap_ci,
        brier,
        classwise_ece,
        ece,
        mce,
        nll,
        smooth_ece,
    )
    from selfcal.posthoc import (
        BBQ,
        AutoCalibration,
        BetaCalibration,
        DirichletCalibration,
        EnsembleTemperatureScaling,
        GroupwiseCalibration,
        HistogramBinning,
        IsotonicCalibration,
        MatrixScaling,
        MulticlassMulticalibration,
        OneVsRestIsotonic,
        PlattScaling,
        QuadraticScaling,
        StructuredMatrixScaling,
        StructuredVectorScaling,
        TemperatureScaling,
        TopLabelVennAbers,
        Uncalibrated,
        VectorScaling,
        VennAbers,
        build_calibrator,
        calibrator_names,
    )
    from selfcal.predictions import PROB_ATOL, Predictions, as_predictions

__version__ = "0.2.0"

_METRICS = ("accuracy", "adaece", "bootstrap_ci", "brier", "classwise_ece", "ece", "mce", "nll")
_CALIBRATORS = (
    "AutoCalibration",
    "BBQ",
    "BetaCalibration",
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
    "calibrator_names",
)
_LAZY = {
    **dict.fromkeys((*_METRICS, "smooth_ece"), "selfcal.metrics"),
    **dict.fromkeys(_CALIBRATORS, "selfcal.posthoc"),
    "evaluate": "selfcal.evaluation",
    "PROB_ATOL": "selfcal.predictions",
    "Predictions": "selfcal.predictions",
    "as_predictions": "selfcal.predictions",
    "SCORES": "selfcal.conformal",
    "SplitConformal": "selfcal.conformal",
    "conformal_quantile": "selfcal.conformal",
    "conformity_scores": "selfcal.conformal",
}
"""Public name -> the module it is loaded from on first access."""
__all__ = [
    "BBQ",
    "PROB_ATOL",
    "SCORES",
    "AutoCalibration",
    "BetaCalibration",
    "DirichletCalibration",
    "EnsembleTemperatureScaling",
    "GroupwiseCalibration",
    "HistogramBinning",
    "IsotonicCalibration",
    "MatrixScaling",
    "MulticlassMulticalibration",
    "OneVsRestIsotonic",
    "PlattScaling",
    "Predictions",
    "QuadraticScaling",
    "SplitConformal",
    "StructuredMatrixScaling",
    "StructuredVectorScaling",
    "TemperatureScaling",
    "TopLabelVennAbers",
    "Uncalibrated",
    "VectorScaling",
    "VennAbers",
    "__version__",
    "accuracy",
    "adaece",
    "as_predictions",
    "bootstrap_ci",
    "brier",
    "build_calibrator",
    "calibrator_names",
    "classwise_ece",
    "conformal_quantile",
    "conformity_scores",
    "ece",
    "evaluate",
    "mce",
    "nll",
    "smooth_ece",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later accesses are plain attribute lookups
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
