"""Optional dependencies (the ``full`` extra): imported where first needed, and when missing,
an ``ImportError`` that says what needs them and how to install them."""

from __future__ import annotations

import importlib
from types import ModuleType


def require(module: str, purpose: str, package: str) -> ModuleType:
    """``importlib.import_module(module)``, or ``ImportError: {purpose} needs {package}: pip
    install 'selfcal[full]' (or {package})``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{purpose} needs {package}: pip install 'selfcal[full]' (or {package})"
        ) from exc
