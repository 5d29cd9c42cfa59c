"""Command boundary: exceptions become one line ``error: ...`` on stderr and an exit code,
and warnings one line ``warning: [SOURCE: ]...``.

Bad input or usage exits with :data:`USAGE_EXIT` (2); an unexpected failure exits with
:data:`ERROR_EXIT` (1), one line, and a hint to rerun with ``SELFCAL_DEBUG=1`` (which lets the
traceback through); an interrupt exits with 130. A warning is printed once, without Python's
source path and line; the same text again is counted, and the count printed at the end.
:func:`source` names the file (or run) that the warnings and errors inside it are about.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import typer

from selfcal.exceptions import one_line

_SOURCE: ContextVar[str | None] = ContextVar("source", default=None)

USAGE_EXIT = 2
ERROR_EXIT = 1
INTERRUPT_EXIT = 130
_INPUT_ERRORS = (ValueError, OSError, KeyError, ImportError, TypeError)
"""Exceptions that mean bad input (exit 2, no hint)."""


def _debug() -> bool:
    return os.environ.get("SELFCAL_DEBUG", "") not in ("", "0")


def fail(message: str, code: int = USAGE_EXIT) -> typer.Exit:
    """Print ``error: message`` (one line) to stderr and return the exit to raise."""
    sys.stderr.write(f"error: {one_line(message)}\n")
    sys.stderr.flush()
    return typer.Exit(code)


def _message(exc: BaseException) -> str:
    """The error's one message, led by the file it is about when :func:`source` knows it
    (:func:`selfcal.exceptions.one_line`)."""
    return one_line(exc, getattr(exc, "selfcal_source", None))


@contextmanager
def source(name: object) -> Iterator[None]:
    """Inside, warnings and errors that do not name their file start with ``name: ``."""
    token = _SOURCE.set(str(name))
    try:
        yield
    except Exception as exc:
        if getattr(exc, "selfcal_source", None) is None:
            exc.selfcal_source = str(name)  # type: ignore[attr-defined]
        raise
    finally:
        _SOURCE.reset(token)


@contextmanager
def one_line_warnings() -> Iterator[None]:
    """Each warning as ``warning: [SOURCE: ]message`` on stderr, once; repeats are counted and
    the count printed on leaving."""
    seen: Counter[str] = Counter()

    def show(message: Any, *_: Any, **__: Any) -> None:
        text = one_line(str(message), _SOURCE.get())
        seen[text] += 1
        if seen[text] == 1:
            sys.stderr.write(f"warning: {text}\n")
            sys.stderr.flush()

    with warnings.catch_warnings():
        warnings.simplefilter("always")  # every warning reaches show, which counts repeats
        warnings.showwarning = show
        try:
            yield
        finally:
            repeats = sum(seen.values()) - len(seen)
            if repeats:
                sys.stderr.write(f"warning: the warnings above came {repeats} more time(s)\n")


@contextmanager
def errors() -> Iterator[None]:
    """Command boundary: turn exceptions into one-line errors (unless ``SELFCAL_DEBUG``) and
    warnings into one-line warnings."""
    with one_line_warnings(), _errors():
        yield


@contextmanager
def _errors() -> Iterator[None]:
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
