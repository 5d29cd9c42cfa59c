"""selfcal: classifiers whose confidence can be trusted.

Measure calibration (:mod:`selfcal.metrics`), fix it after training (:mod:`selfcal.posthoc`),
and draw it (:mod:`selfcal.plots`). Heavy optional dependencies (scikit-learn, matplotlib) are
imported only when used.

``import selfcal`` itself imports neither torch nor numpy: the public names here
(:class:`~selfcal.predictions.Predictions`, :func:`~selfcal.predictions.as_predictions`,
:data:`~selfcal.predictions.PROB_ATOL`, and the split-conformal
:class:`~selfcal.conformal.SplitConformal`, :func:`~selfcal.conformal.conformity_scores`,
:func:`~selfcal.conformal.conformal_quantile`, :data:`~selfcal.conformal.SCORES`) are loaded
from their modules on first access (a module ``__getattr__``, PEP 562), so
``selfcal --version`` and ``selfcal --help`` start at once; ``from selfcal import
Predictions`` works as before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only; loaded on first access below
    from selfcal.conformal import SCORES, SplitConformal, conformal_quantile, conformity_scores
    from selfcal.predictions import PROB_ATOL, Predictions, as_predictions

__version__ = "0.1.0"
__all__ = [
    "PROB_ATOL",
    "SCORES",
    "Predictions",
    "SplitConformal",
    "__version__",
    "as_predictions",
    "conformal_quantile",
    "conformity_scores",
]

_LAZY = {
    "PROB_ATOL": "selfcal.predictions",
    "Predictions": "selfcal.predictions",
    "as_predictions": "selfcal.predictions",
    "SCORES": "selfcal.conformal",
    "SplitConformal": "selfcal.conformal",
    "conformal_quantile": "selfcal.conformal",
    "conformity_scores": "selfcal.conformal",
}
"""Public name -> the module it is loaded from on first access."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later accesses are plain attribute lookups
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
