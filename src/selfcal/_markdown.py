"""Text from outside selfcal -- a prediction set's name (its folder's or file's name, which may
hold any character but ``/``), a path, an error message naming them -- written into a
Markdown report: it must read as itself and never become structure (a heading, a new table
row or cell, a link, HTML)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import quote

_SPECIAL = re.compile(r"([\\`*\[\]<>|])")
"""Characters that open code, emphasis, a link or HTML, or end a table cell."""


def markdown_text(text: object) -> str:
    """``text`` as Markdown that reads as itself, on one line: every run of whitespace and
    unprintable characters (newlines, tabs, NUL) one space, so that it cannot end a table row or
    start a heading; ``\\ ` * [ ] < > |`` backslash-escaped, so that it cannot open code,
    emphasis, a link or HTML, or split a table cell (the terminal's table reader unescapes
    ``\\|``); a leading ``#`` escaped. Ordinary names (letters, digits, ``_ - .``) are
    unchanged."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in str(text)).split())
    escaped = _SPECIAL.sub(r"\\\1", flat)
    return "\\" + escaped if escaped.startswith("#") else escaped


def markdown_names(names: Iterable[object]) -> str:
    """``['a', 'b']``, as Python prints a list of names, each :func:`markdown_text`."""
    return "[" + ", ".join(f"'{markdown_text(name)}'" for name in names) + "]"


def markdown_link(file: str) -> str:
    """A file name as a Markdown link target (percent-encoded: spaces, parentheses and any other
    character a set's name brings stay inside the link)."""
    return quote(file)
