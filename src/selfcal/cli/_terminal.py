"""Markdown summaries drawn to fit the terminal (``selfcal reproduce``'s printed summary).

A study's summary (:meth:`selfcal.experiments.study.Study.summary`) is Markdown lines: prose,
bullet lists, ``**bold**`` and pipe tables up to ~400 characters wide (the report's own
tables). On a terminal they are drawn to fit its width:

* each pipe table becomes a rich table whose cells wrap at spaces; a table whose columns do not
  fit side by side even then is split into several tables of consecutive columns, each
  repeating the leading *label* columns -- the first column, and the columns after it with no
  digit in any cell (``regime``, ``rival``) -- so every row still says what it is;
* the rest is drawn as Markdown by rich (bullets wrapped with a hanging indent, bold shown).

Only the drawing changes: the cells' text is the summary's, and the report files on disk are
untouched (the full report is named on the command's last line).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - typing only
    from rich.console import Console, RenderableType
    from rich.table import Table
    from rich.text import JustifyMethod, Text

_ALIGNMENT_CELL = re.compile(r"^:?-+:?$")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_INLINE = re.compile(r"\*\*(.+?)\*\*|`([^`]+)`")
_DIGIT = re.compile(r"\d")
UNBOUNDED = 1 << 20
"""A width no table reaches: measuring at it gives a table's unwrapped extent."""


def is_table_line(line: str) -> bool:
    """A line of a Markdown pipe table (it starts with ``|``)."""
    return line.lstrip().startswith("|")


def blocks(lines: list[str]) -> Iterator[tuple[bool, list[str]]]:
    """``(is_table, lines)`` for each run of consecutive table lines and of other lines."""
    run: list[str] = []
    in_table = False
    for line in lines:
        if run and is_table_line(line) != in_table:
            yield in_table, run
            run = []
        in_table = is_table_line(line)
        run.append(line)
    if run:
        yield in_table, run


def split_row(line: str) -> list[str]:
    """The cells of one pipe-table line: split at unescaped ``|``, outer pipes dropped,
    ``\\|`` unescaped, whitespace stripped."""
    text = line.strip()
    text = text[1:] if text.startswith("|") else text
    text = text[:-1] if text.endswith("|") and not text.endswith("\\|") else text
    return [cell.strip().replace("\\|", "|") for cell in _CELL_SPLIT.split(text)]


def parse_table(lines: list[str]) -> tuple[list[str], list[JustifyMethod], list[list[str]]]:
    """``(header, justify, rows)`` of a pipe table; ``justify`` per column from the alignment
    row (``---:`` right, ``:---:`` center, else left). Short rows are padded with empty cells."""
    header = split_row(lines[0])
    body = [split_row(line) for line in lines[1:]]
    justify: list[JustifyMethod] = ["left"] * len(header)
    if body and all(_ALIGNMENT_CELL.match(cell) for cell in body[0]):
        for j, cell in enumerate(body[0][: len(header)]):
            if cell.endswith(":"):
                justify[j] = "center" if cell.startswith(":") else "right"
        body = body[1:]
    width = len(header)
    rows = [(row + [""] * width)[:width] for row in body]
    return header, justify, rows


def cell_text(cell: str) -> Text:
    """A cell's Markdown as rich text: ``**bold**`` bold, ```code``` in the code style, the
    rest verbatim (no other markup is read, so ``p_y`` or ``[a, b]`` stay as written)."""
    from rich.text import Text

    text = Text()
    end = 0
    for match in _INLINE.finditer(cell):
        text.append(cell[end : match.start()])
        bold, code = match.groups()
        if bold is not None:
            text.append(bold, style="bold")
        else:
            text.append(code, style="repr.str")
        end = match.end()
    text.append(cell[end:])
    return text


def label_columns(header: list[str], rows: list[list[str]]) -> int:
    """How many leading columns label the rows: the first, and each next one with no digit in
    any body cell (stopping at the first that has one); always fewer than all columns when
    there are at least two."""
    n = 1
    while n < len(header) - 1 and not any(_DIGIT.search(row[n]) for row in rows):
        n += 1
    return min(n, max(1, len(header) - 1))


def _table(
    header: list[str],
    justify: list[JustifyMethod],
    rows: list[list[str]],
    columns: list[int],
    widths: list[int] | None = None,
) -> Table:
    """The columns ``columns`` of the table as a rich table, with the content ``widths``
    given (cells wrap at spaces inside them) or left to rich (cells fold)."""
    from rich import box
    from rich.table import Table

    table = Table(
        box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1), pad_edge=False, collapse_padding=True
    )
    for k, j in enumerate(columns):
        width = None if widths is None else widths[k]
        table.add_column(cell_text(header[j]), justify=justify[j], overflow="fold", width=width)
    for row in rows:
        table.add_row(*(cell_text(row[j]) for j in columns))
    return table


def _extents(console: Console, cells: list[str]) -> tuple[int, int]:
    """``(longest word, longest line)`` of a column's cells (its header included)."""
    from rich.measure import Measurement

    options = console.options.update_width(UNBOUNDED)
    measured = [Measurement.get(console, options, cell_text(cell)) for cell in cells]
    return max(m.minimum for m in measured), max(m.maximum for m in measured)


def _overhead(console: Console, n_columns: int) -> int:
    """Width a table of ``n_columns`` adds to its columns' contents (edges, dividers,
    padding)."""
    from rich.measure import Measurement

    blank = _table([""] * n_columns, ["left"] * n_columns, [], list(range(n_columns)))
    for column in blank.columns:
        column.width = 1
    options = console.options.update_width(UNBOUNDED)
    return Measurement.get(console, options, blank).maximum - n_columns


def shrink(extents: list[tuple[int, int]], available: int) -> list[int] | None:
    """Content widths for columns of ``(minimum, maximum)`` extents within ``available``
    characters: the widest columns are narrowed first (all to one cap), none below its
    minimum; ``None`` if even the minima do not fit."""
    if sum(low for low, _ in extents) > available:
        return None
    cap = max(high for _, high in extents)
    while cap > 0 and sum(max(low, min(high, cap)) for low, high in extents) > available:
        cap -= 1
    return [max(low, min(high, cap)) for low, high in extents]


def balance(columns: list[int], n_groups: int) -> list[list[int]]:
    """``columns`` in ``n_groups`` consecutive groups whose sizes differ by at most one."""
    size, extra = divmod(len(columns), max(1, n_groups))
    groups, start = [], 0
    for g in range(n_groups):
        stop = start + size + (g < extra)
        groups.append(columns[start:stop])
        start = stop
    return [group for group in groups if group]


def fitted_tables(console: Console, lines: list[str]) -> list[Table]:
    """The pipe table in ``lines`` as one or more rich tables that fit ``console.width``.

    Value columns are added to a table while every column can keep its longest word whole
    (the widest columns narrowed first, see :func:`shrink`), then spread evenly over that many
    tables where they still fit; the label columns (:func:`label_columns`) start every
    table. Rows get a blank line between them where
    cells wrap, so that a wrapped row reads as one. Where not even the labels and one value
    column fit, that table's cells fold (rich's own layout)."""
    header, justify, rows = parse_table(lines)
    n_labels = label_columns(header, rows)
    extents = [
        _extents(console, [header[j], *(row[j] for row in rows)]) for j in range(len(header))
    ]

    def widths(columns: list[int]) -> list[int] | None:
        available = console.width - _overhead(console, len(columns))
        return shrink([extents[j] for j in columns], available)

    labels = list(range(n_labels))
    groups: list[list[int]] = []
    for j in range(n_labels, len(header)):
        if groups and widths([*labels, *groups[-1], j]) is not None:
            groups[-1].append(j)
        else:
            groups.append([j])
    balanced = balance(list(range(n_labels, len(header))), len(groups))
    if all(widths([*labels, *group]) is not None for group in balanced):
        groups = balanced  # as many tables, with wider (less wrapped) cells
    tables = []
    for group in groups or [[]]:
        columns = [*labels, *group]
        chosen = widths(columns)
        table = _table(header, justify, rows, columns, chosen)
        table.show_lines = chosen is None or any(
            width < extents[j][1] for width, j in zip(chosen, columns, strict=True)
        )
        tables.append(table)
    return tables


def renderables(console: Console, lines: list[str]) -> Iterator[RenderableType]:
    """What :func:`print_markdown` prints for ``lines``, block by block."""
    from rich.markdown import Markdown

    for is_table, block in blocks(lines):
        if is_table:
            yield from fitted_tables(console, block)
        elif any(line.strip() for line in block):
            yield Markdown("\n".join(block))


def print_markdown(console: Console, lines: list[str]) -> None:
    """Print Markdown ``lines`` (a study's summary) to fit the console's width."""
    for renderable in renderables(console, lines):
        console.print(renderable)
        console.print()
