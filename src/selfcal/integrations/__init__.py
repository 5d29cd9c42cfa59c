"""Faces of selfcal for other frameworks, each behind an optional extra.

* :mod:`selfcal.integrations.torchmetrics` -- ``torchmetrics.Metric`` classes (``ECE``,
  ``MCE``, ``AdaECE``, ``ClasswiseECE``, ``Brier``, ``NLL``) whose states are the additive
  statistics of selfcal's binning core, so they reduce exactly across processes;
* :mod:`selfcal.integrations.lightning` -- ``CalibrationCallback``, which logs those metrics
  every validation epoch of a Lightning run and can fit temperature scaling at its end.

Both need the ``lightning`` extra (``pip install "selfcal[lightning]"``: torchmetrics and
Lightning). This package imports neither: ``import selfcal.integrations`` is free, and importing
a submodule without its dependency raises an ``ImportError`` that names the extra.
"""

from __future__ import annotations

_EXTRA = 'pip install "selfcal[lightning]"'
"""The install command the submodules' ``ImportError`` names."""


def _missing_dependency(module: str, dependency: str) -> str:
    """The message of the ``ImportError`` raised when ``module`` cannot import ``dependency``."""
    return (
        f"{module} needs {dependency}, which the 'lightning' extra installs: {_EXTRA} "
        f"(or install {dependency} yourself)"
    )


__all__: list[str] = []
