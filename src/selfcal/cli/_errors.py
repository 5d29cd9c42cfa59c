"""Command boundary: exceptions become one line ``error: ...`` on stderr and an exit code.

Bad input or usage exits with :data:`USAGE_EXIT` (2); an unexpected failure exits with
:data:`ERROR_EXIT` (1), one line, and a hint to rerun with ``SELFCAL_DEBUG=1`` (which lets the
traceback through); an interrupt exits with 130.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import typer

USAGE_EXIT = 2
ERROR_EXIT = 1
INTERRUPT_EXIT = 130
_INPUT_ERRORS = (ValueError, OSError, KeyError, ImportError, TypeError)
"""Exceptions that mean bad input (exit 2, no hint)."""


def _debug() -> bool:
    return os.environ.get("SELFCAL_DEBUG", "") not in ("", "0")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def fail(message: str, code: int = USAGE_EXIT) -> typer.Exit:
    """Print ``error: message`` (one line) to stderr and return the exit to raise."""
    sys.stderr.write(f"error: {_one_line(message)}\n")
    sys.stderr.flush()
    return typer.Exit(code)


def _message(exc: BaseException) -> str:
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    if isinstance(exc, OSError) and exc.strerror and exc.filename:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc) or type(exc).__name__


@contextmanager
def errors() -> Iterator[None]:
    """Command boundary: turn exceptions into one-line errors (unless ``SELFCAL_DEBUG``)."""
    try:
        yield
    except (typer.Exit, typer.Abort):
        raise
    except KeyboardInterrupt:
        raise fail("interrupted", INTERRUPT_EXIT) from None
    except _INPUT_ERRORS as exc:
        if _debug():
            raise
        raise fail(_message(exc), USAGE_EXIT) from None
    except Exception as exc:
        if _debug():
            raise
        raise fail(
            f"{type(exc).__name__}: {_message(exc)} (rerun with SELFCAL_DEBUG=1 for the traceback)",
            ERROR_EXIT,
        ) from None
