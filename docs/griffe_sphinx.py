"""Griffe extension: render this code base's reStructuredText-flavoured docstrings as Markdown.

The docstrings are prose written for reading in an editor: Sphinx roles
(``:func:`~selfcal.metrics.ece```), double-backtick literals, ``::`` literal blocks, a few
simple reStructuredText tables and doctest lines. Before mkdocstrings parses them, this
extension rewrites, in every docstring of the loaded packages:

* a Sphinx role into inline code -- ``:func:`~selfcal.metrics.ece``` becomes `` `ece` `` (a
  leading ``~`` keeps the last dotted name only, as in Sphinx); no cross-reference is made, so
  a name that moves never breaks the build;
* a paragraph's closing ``::`` into ``:`` (the indented block after it is a Markdown code block
  already);
* a simple reStructuredText table (``===  ===`` border lines) into a fenced text block;
* a doctest block (a ``>>>`` line to the next blank line) into a fenced ``pycon`` block --
  except in a numpydoc ``Examples`` section, which the docstring parser renders itself;
* in a numpydoc ``Parameters`` / ``Attributes`` section (:mod:`selfcal.posthoc`), an item
  written ``name : description`` into ``name`` with the description below it (the text after
  the colon is prose, not a type), and a closing paragraph that is no item moved in front of
  the section, where it belongs;
* (not a docstring) the value of a public attribute built from a private object is left out;
* a bibliography key (``[GRA]``, ``[BO4SC]``, ...) into a link to its entry on the
  references page, and a citation of the methods reference (``methods §6.1``) into a link to
  that numbered section -- both through mkdocs-autorefs, so a key or a section number the
  site does not define fails the strict build.

Double-backtick literals need nothing: Markdown reads ````x```` as inline code.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj|const|ref):`(~?)([^`]+)`")
"""A Sphinx role with its target; group 1 is the ``~`` shortening marker."""
TABLE_BORDER = re.compile(r"^\s*=+(\s+=+)+\s*$")
"""A border line of a simple reStructuredText table."""
DOCTEST = re.compile(r"^\s*(>>>|\.\.\.)( |$)")
LITERAL_MARKER = re.compile(r"::\s*$")
BIB_KEYS = ("BO4SC", "MetaReg", "MC", "GRA", "FLC")
"""The bibliography keys of ``docs/references.md`` (anchors ``ref-<key in lower case>``)."""
BIB_KEY = re.compile(r"(?<![`\[])\[(" + "|".join(BIB_KEYS) + r")\](?![(\[])")
METHODS_CITATION = re.compile(r"\b[Mm]ethods\s+§(\d+(?:\.\d+)?)")
"""``methods §N.M``: the spelling docstrings use."""
SECTION = re.compile(r"^(Parameters|Other Parameters|Attributes|Returns|Raises)$")
ANY_SECTION = re.compile(
    r"^(Parameters|Other Parameters|Attributes|Returns|Yields|Receives|Raises|Warns|Warnings"
    r"|Examples|Notes|See Also|References|Methods)$"
)
"""Every numpydoc section header; a block section's items end at the next one."""
EXAMPLES = re.compile(r"^Examples$")
DASHES = re.compile(r"^-{3,}$")
ITEM = re.compile(r"^([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*(?::\s*(.*))?$")
"""``name``, ``a, b`` or ``name : rest`` at the section's indentation."""
PLAIN_TYPE = re.compile(r"^[\w.\[\](), |]+$")
"""A type annotation as numpydoc means it (no literals, no prose punctuation)."""


def role_as_code(match: re.Match[str]) -> str:
    """The role's target as inline code (its last dotted name when marked with ``~``)."""
    shorten, target = match.group(1), match.group(2).strip()
    if shorten:
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def replace_roles(text: str) -> str:
    """Every Sphinx role in ``text`` as inline code."""
    return ROLE.sub(role_as_code, text)


def link_citations(text: str) -> str:
    """Bibliography keys and methods-section citations as autorefs links (module doc)."""
    text = BIB_KEY.sub(lambda m: f"[\\[{m.group(1)}\\]][ref-{m.group(1).lower()}]", text)
    return METHODS_CITATION.sub(
        lambda m: f"[methods §{m.group(1)}][s{m.group(1).replace('.', '-')}]", text
    )


def fence_tables(lines: list[str]) -> list[str]:
    """Wrap each simple table (from its first border line to its third) in a text fence."""
    out: list[str] = []
    borders = 0
    for line in lines:
        if TABLE_BORDER.match(line):
            if borders == 0:
                out += ["", "```text"]
            borders += 1
            out.append(line)
            if borders == 3:
                out += ["```", ""]
                borders = 0
            continue
        out.append(line)
    if borders:  # not a complete table: leave the text as it was
        return lines
    return out


def fence_doctests(lines: list[str]) -> list[str]:
    """Wrap each doctest block (from a ``>>>`` line to the next blank line, outputs included)
    in a ``pycon`` fence, except in a numpydoc ``Examples`` section, which the docstring parser
    renders as code itself."""
    out: list[str] = []
    inside = False
    for index, line in enumerate(lines):
        if is_section_start(lines, index, EXAMPLES):
            out += (["```", ""] if inside else []) + lines[index:]
            return out
        if not inside and DOCTEST.match(line) and line.lstrip().startswith(">>>"):
            out += ["", "```pycon"]
            inside = True
        elif inside and not line.strip():
            out += ["```", ""]
            inside = False
        out.append(line.strip() if inside else line)
    if inside:
        out.append("```")
    return out


def close_literal_markers(lines: list[str]) -> list[str]:
    """``text::`` before an indented block becomes ``text:``."""
    return [LITERAL_MARKER.sub(":", line) if line.strip() != "::" else "" for line in lines]


def is_section_start(lines: list[str], index: int, kind: re.Pattern[str] | None = None) -> bool:
    """Whether ``lines[index]`` is a numpydoc section header (underlined by dashes) of
    ``kind`` (default: the block sections of :data:`SECTION`)."""
    return (
        index + 1 < len(lines)
        and bool((kind or SECTION).match(lines[index]))
        and bool(DASHES.match(lines[index + 1]))
    )


def split_item(line: str) -> list[str]:
    """An item line with a prose "type" as the name and an indented description."""
    match = ITEM.match(line)
    assert match is not None
    name, rest = match.group(1), (match.group(2) or "").strip()
    if not rest or (PLAIN_TYPE.match(rest) and len(rest.split()) <= 4):
        return [line]
    return [name, "    " + rest]


def tidy_section(body: list[str]) -> tuple[list[str], list[str]]:
    """A block section's lines rewritten (:func:`split_item`), and the paragraphs in it that
    are no item (moved out by :func:`tidy_numpy_sections`)."""
    kept: list[str] = []
    moved: list[str] = []
    target = kept
    for line in body:
        if line and not line.startswith(" "):
            target = kept if ITEM.match(line) else moved
            target.extend(split_item(line) if target is kept else [line])
        elif target is moved:
            moved.append(line.strip())
        else:
            kept.append(line)
    return kept, moved


def tidy_numpy_sections(lines: list[str]) -> list[str]:
    """Apply :func:`tidy_section` to every block section; moved paragraphs go in front."""
    out: list[str] = []
    index = 0
    while index < len(lines):
        if not is_section_start(lines, index):
            out.append(lines[index])
            index += 1
            continue
        end = index + 2
        while end < len(lines) and not is_section_start(lines, end, ANY_SECTION):
            end += 1
        kept, moved = tidy_section(lines[index + 2 : end])
        if any(m.strip() for m in moved):
            out += [*moved, ""]
        out += [lines[index], lines[index + 1], *kept]
        index = end
    return out


def as_markdown(text: str) -> str:
    """A docstring of this code base rewritten for a Markdown renderer (module doc)."""
    lines = link_citations(replace_roles(text)).splitlines()
    lines = close_literal_markers(fence_doctests(fence_tables(tidy_numpy_sections(lines))))
    return "\n".join(lines)


PRIVATE_NAME = re.compile(r"(?<![\w.])_[A-Za-z]\w*")
"""A private name (``_CALIBRATORS``) in an attribute's value expression."""


class SphinxRolesToMarkdown(griffe.Extension):
    """Rewrite every docstring once the object tree is built (see the module doc), and leave
    out the value of a public attribute whose expression names a private object
    (``CALIBRATORS = _CALIBRATORS.view()``): the page shows the attribute, its type and its
    docstring, never the internals it is built from."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = as_markdown(obj.docstring.value)
        if isinstance(obj, griffe.Attribute) and PRIVATE_NAME.search(str(obj.value or "")):
            obj.value = None
