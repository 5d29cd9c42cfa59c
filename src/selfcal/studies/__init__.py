"""The studies: one folder each, on the study engine (:mod:`selfcal.experiments.study`).

A study is a package here whose ``__init__`` registers a :class:`~selfcal.experiments.study.Study`
with :func:`~selfcal.experiments.study.register_study`; :func:`import_all` imports every package
on this package's path (names starting with ``_`` are shared helpers, not studies), which is all
``selfcal reproduce`` needs to offer it. Adding a study is adding a folder.
"""

from __future__ import annotations

import importlib
import pkgutil


def import_all() -> list[str]:
    """Import every study package on ``__path__``; returns their module names."""
    names = [
        info.name
        for info in pkgutil.iter_modules(__path__)
        if info.ispkg and not info.name.startswith("_")
    ]
    for name in names:
        importlib.import_module(f"{__name__}.{name}")
    return names
