"""Calibrators by name: ``build_calibrator("ts")``, the names the CLI's ``--method`` offers.

A calibrator joins the registry where it is defined: ``@register_calibrator("ts")`` on its
class, or ``register_calibrator("ts-grid")(functools.partial(TemperatureScaling,
method="grid"))`` where a name is a configuration of a class. Every factory builds an unfitted
calibrator with no arguments (``build_calibrator(name)``); keyword arguments override its
hyperparameters.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from selfcal._registry import Registry
from selfcal.posthoc._base import Calibrator

CalibratorFactory = Callable[..., Calibrator]
"""A calibrator class, or a ``functools.partial`` of one fixing some hyperparameters."""

_CALIBRATORS: Registry[CalibratorFactory] = Registry("calibrator")
register_calibrator = _CALIBRATORS.register
"""Decorator: make a calibrator class (or factory) buildable as ``build_calibrator(name)``."""
calibrator_names = _CALIBRATORS.names
"""Sorted names accepted by :func:`build_calibrator` (a tuple)."""
CALIBRATORS: Mapping[str, CalibratorFactory] = _CALIBRATORS.view()
"""Read-only, live view of the registry: name -> factory of an unfitted calibrator with
default hyperparameters (``CALIBRATORS[name]()``), in registration order."""


def build_calibrator(name: str, **hyperparameters: Any) -> Calibrator:
    """A fresh, unfitted calibrator registered as ``name`` (``hyperparameters`` override its
    defaults). Unknown names and hyperparameters it does not take raise ``ValueError``."""
    calibrator: Calibrator = _CALIBRATORS.build(name, **hyperparameters)
    return calibrator


def calibrator_summary(name: str) -> str:
    """One line describing the calibrator ``name``: the first line of its class docstring
    (reST double backquotes dropped), with the hyperparameters a configuration name fixes
    before its full stop, e.g. ``... one T > 0 (method='grid').``"""
    factory = _CALIBRATORS.get(name)
    fixed = ""
    if isinstance(factory, functools.partial):
        fixed = " (" + ", ".join(f"{k}={v!r}" for k, v in factory.keywords.items()) + ")"
        factory = factory.func
    summary = (inspect.getdoc(factory) or name).splitlines()[0].replace("``", "")
    return f"{summary.rstrip('.')}{fixed}." if fixed else summary
