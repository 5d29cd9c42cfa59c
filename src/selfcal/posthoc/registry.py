"""Calibrators by name: ``build_calibrator("ts")``, the names the CLI's ``--calibrator`` offers
(and each class's own name in kebab case, ``"temperature-scaling"``).

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
from typing import Any, TypeVar

from selfcal._registry import Registry
from selfcal.posthoc._base import Calibrator

F = TypeVar("F", bound=Callable[..., object])
CalibratorFactory = Callable[..., Calibrator]
"""A calibrator class, or a ``functools.partial`` of one fixing some hyperparameters."""

_CALIBRATORS: Registry[CalibratorFactory] = Registry("calibrator")


def register_calibrator(name: str) -> Callable[[F], F]:
    """Decorator: make a calibrator class (or factory) buildable as ``build_calibrator(name)``;
    a class is also buildable by its own name in kebab case (``TemperatureScaling`` ->
    ``"temperature-scaling"``), so the registry, the classes and the command line speak one
    vocabulary: the short name the papers use, or the class's."""
    register = _CALIBRATORS.register(name)

    def decorate(factory: F) -> F:
        register(factory)
        spelled = kebab_case(factory.__name__) if inspect.isclass(factory) else name
        if spelled != name:
            _CALIBRATORS.alias(spelled, name)
        return factory

    return decorate


def kebab_case(class_name: str) -> str:
    """``"OneVsRestIsotonic"`` -> ``"one-vs-rest-isotonic"``: a hyphen before each capital
    that starts a word (after a lower-case letter, or before one); a run of capitals such as
    ``BBQ`` is one word."""
    out = []
    for i, ch in enumerate(class_name):
        after_lower = i > 0 and not class_name[i - 1].isupper()
        before_lower = i + 1 < len(class_name) and class_name[i + 1].islower()
        starts = ch.isupper() and i > 0 and (after_lower or before_lower)
        out.append(("-" if starts else "") + ch.lower())
    return "".join(out)


def calibrator_name(name: str) -> str:
    """The registered name ``name`` stands for: itself, or the short name of the class it
    spells (``"temperature-scaling"`` -> ``"ts"``); unknown names raise ``ValueError``."""
    return _CALIBRATORS.resolve(name)


calibrator_aliases = _CALIBRATORS.aliases
"""Alias -> registered name (each class's kebab-case name), a read-only mapping."""
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
