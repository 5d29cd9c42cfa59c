"""``selfcal reproduce``'s summary on a terminal (:mod:`selfcal.cli._terminal`): Markdown
tables drawn to fit the width, split into column groups that repeat the label columns, every
cell's text kept; piped output stays the Markdown it was."""

from __future__ import annotations

import io
import re
import sys

import pytest
from helpers.studies import quick_args
from rich.cells import cell_len
from rich.console import Console

from selfcal.cli import main
from selfcal.cli._terminal import (
    balance,
    blocks,
    label_columns,
    parse_table,
    print_markdown,
    shrink,
    split_row,
)

DATASETS = ["blobs-1.3", "blobs-1.7", "spiral-2.5", "spiral-3.5", "bac", "wine", "breast-cancer"]
RIVALS = ["Standard", "IsoReg", "Standard + TS"]


def _summary() -> list[str]:
    """A summary shaped like ``selfcal reproduce bo4sc``'s: a caption, an 8-column table of
    ``mean ± CI (published)`` cells, a 9-column verdict table ~400 characters wide with two
    label columns, and bullets with bold."""
    ece = [
        "nll regime: ECE (test; mean ± 95% CI over seeds; published in parentheses)",
        "| method | " + " | ".join(DATASETS) + " |",
        "|---" * (len(DATASETS) + 1) + "|",
    ]
    for i, method in enumerate(["Standard", "IsoReg", "Standard + TS", "BO4SC (p̂)"]):
        cells = [f"0.0{i}{k} ± 0.00{k} (0.0{k}{i})" for k in range(len(DATASETS))]
        ece.append(f"| {method} | " + " | ".join(cells) + " |")
    verdicts = [
        "Verdicts (BO4SC p̂ − rival, test ECE)",
        "| regime | BO4SC (p̂) vs | " + " | ".join(DATASETS) + " |",
        "|---" * (len(DATASETS) + 2) + "|",
    ]
    for regime in ("nll", "accuracy", "overfit"):
        for rival in RIVALS:
            cells = [f"**tied** +0.0{k}1 [-0.00{k}, +0.0{k}5]" for k in range(len(DATASETS))]
            verdicts.append(f"| {regime} | {rival} | " + " | ".join(cells) + " |")
    bullets = [
        f"- **{regime}**: BO4SC's ECE is significantly lower than Standard's on none, than "
        "IsoReg's on wine; the paper's claim (lower ECE than Standard and IsoReg on Blobs and "
        "Spirals) does not hold in this regime."
        for regime in ("nll", "accuracy")
    ]
    return [*ece, "", *verdicts, "", *bullets]


def _draw(lines: list[str], width: int) -> str:
    console = Console(file=io.StringIO(), width=width, force_terminal=False, highlight=False)
    print_markdown(console, lines)
    return console.file.getvalue()  # type: ignore[attr-defined]


def _words(lines: list[str]) -> list[str]:
    """Every word of every table cell (bold markers dropped)."""
    words = []
    for is_table, block in blocks(lines):
        if is_table:
            header, _, rows = parse_table(block)
            for cell in [*header, *(c for row in rows for c in row)]:
                words += cell.replace("**", "").split()
    return words


# ----------------------------------------------------------------------------- parsing
def test_rows_split_at_unescaped_pipes():
    assert split_row("| metric | ours, \\|c\\| | published |") == [
        "metric",
        "ours, |c|",
        "published",
    ]
    assert split_row("|a||b|") == ["a", "", "b"]


def test_alignment_row_gives_the_justification():
    header, justify, rows = parse_table(["| a | b | c |", "|---|---:|:-:|", "| 1 | 2 |"])
    assert header == ["a", "b", "c"] and justify == ["left", "right", "center"]
    assert rows == [["1", "2", ""]]


def test_blocks_separate_tables_from_prose():
    lines = ["caption", "| a |", "|---|", "| 1 |", "", "- bullet"]
    assert [(t, len(b)) for t, b in blocks(lines)] == [(False, 1), (True, 3), (False, 2)]


def test_label_columns_are_the_first_and_the_digit_free_ones_after_it():
    header, _, rows = parse_table(_summary()[1:7])
    assert label_columns(header, rows) == 1  # "BO4SC (p̂)" has a digit but is the first column
    verdicts = [line for line in _summary() if line.startswith("| regime") or "**tied**" in line]
    header, _, rows = parse_table([verdicts[0], "|---|", *verdicts[1:]])
    assert label_columns(header, rows) == 2
    assert label_columns(["a", "b"], [["x", "y"]]) == 1  # never every column


def test_shrink_narrows_the_widest_first_and_never_below_a_word():
    assert shrink([(3, 10), (4, 30), (5, 5)], 100) == [10, 30, 5]
    assert shrink([(3, 10), (4, 30), (5, 5)], 30) == [10, 15, 5]
    assert shrink([(3, 10), (4, 30), (5, 5)], 12) == [3, 4, 5]
    assert shrink([(3, 10), (4, 30), (5, 5)], 11) is None


def test_balance_splits_evenly_in_order():
    assert balance([2, 3, 4, 5, 6, 7, 8], 2) == [[2, 3, 4, 5], [6, 7, 8]]
    assert balance([2, 3], 1) == [[2, 3]]


# ----------------------------------------------------------------------------- drawing
@pytest.mark.parametrize("width", [60, 80, 100, 120, 200])
def test_the_summary_fits_the_width_and_keeps_every_word(width):
    lines = _summary()
    assert max(len(line) for line in lines) > 250  # far wider than any terminal
    text = _draw(lines, width)
    drawn = text.splitlines()
    assert max(cell_len(line) for line in drawn) <= width
    tokens = set(text.split())
    missing = [w for w in _words(lines) if w not in tokens]
    assert not missing, missing[:10]  # no word folded or cut
    assert "**" not in text and "|---" not in text  # Markdown drawn, not shown


@pytest.mark.parametrize("width", [60, 80])
def test_split_tables_repeat_the_label_columns(width):
    verdicts = _draw(_summary(), width).split("Verdicts", 1)[1].splitlines()
    n_tables = sum(line.startswith("─") for line in verdicts)  # one rule under each header
    assert n_tables >= 2  # at this width the 9-column verdict table does not fit in one
    labelled = re.compile(r"^(nll|accuracy|overfit) +(Standard|IsoReg)")
    rows = [line for line in verdicts if labelled.match(line)]
    assert len(rows) == 9 * n_tables  # every table has every row, with both labels


def test_a_table_that_fits_is_drawn_whole():
    text = _draw(["| a | b |", "|---|---|", "| 1 | 2 |"], 80)
    assert text.split() == ["a", "b", "─" * len(text.split()[2]), "1", "2"]


# ----------------------------------------------------------------------------- the command
def _reproduce_tiny(tiny_study, tmp_path, monkeypatch, capsys, *, tty: bool) -> str:
    monkeypatch.setattr(type(tiny_study), "summary", lambda self, results: _summary())
    monkeypatch.setenv("COLUMNS", "80")
    if tty:
        monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert main(quick_args("tiny", tmp_path, json=False)) == 0
    return capsys.readouterr().out


def test_reproduce_fits_the_terminal(tiny_study, tmp_path, monkeypatch, capsys):
    out = _reproduce_tiny(tiny_study, tmp_path, monkeypatch, capsys, tty=True)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out).splitlines()
    assert plain[0].startswith("12 runs done, 0 already stored, 0 failed")  # whole, unwrapped
    assert plain[-1] == f"report: {tmp_path / 'report' / 'README.md'}"
    assert max(cell_len(line) for line in plain[1:-1]) <= 80


def test_reproduce_piped_draws_the_summary_to_the_columns_given(
    tiny_study, tmp_path, monkeypatch, capsys
):
    """A pipe or a file gets the drawn summary too (no ANSI codes), at ``$COLUMNS`` (80 here)
    or 100 columns; the Markdown is the report's, named on the last line."""
    out = _reproduce_tiny(tiny_study, tmp_path, monkeypatch, capsys, tty=False)
    lines = out.splitlines()
    assert "\x1b" not in out and "|---" not in out and "**" not in out
    assert all(line == line.rstrip() for line in lines)  # no padding to the width
    assert lines[0].startswith("12 runs done, 0 already stored, 0 failed")
    assert max(cell_len(line) for line in lines[1:-1]) <= 80
    assert lines[-1] == f"report: {tmp_path / 'report' / 'README.md'}"
    monkeypatch.delenv("COLUMNS")
    assert main(quick_args("tiny", tmp_path, json=False)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(cell_len(line) for line in lines[1:-1]) <= 100 < max(map(len, _summary()))
