"""What the commands share: consoles, number formatting, the input options and reading them,
option help computed on first display (:func:`deferred_help`), and ``selfcal example-path``
(the bundled inputs).

The command modules import nothing heavy at module level (torch, numpy, the numeric selfcal
modules, matplotlib, scikit-learn): each command imports what it needs when it runs, so
``selfcal --version`` and ``selfcal --help`` start at once. Option defaults are plain
constants here (``tests/cli/test_startup.py`` checks them against the modules they mirror).
"""

from __future__ import annotations

import inspect
import io
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

import typer
from typer.core import TyperCommand, TyperOption

from selfcal.cli._errors import errors

if TYPE_CHECKING:  # pragma: no cover - typing only
    from rich.console import Console

    from selfcal.predictions import Predictions

KINDS = ("logits", "probs")
"""The kinds of scores ``--kind`` takes: :data:`selfcal.io.KINDS`, as a constant."""

KindOpt = Annotated[
    str | None,
    typer.Option(
        "--kind",
        help="Scores are 'logits' or 'probs': needed when the array or column names don't "
        "say (or name both); --kind logits also accepts logits whose rows look like "
        "probabilities.",
    ),
]
LabelOpt = Annotated[str, typer.Option("--label-column", help="Label column in CSV/parquet.")]
BinsOpt = Annotated[int, typer.Option("--bins", min=1, help="Bins for the binned metrics.")]
GroupsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--groups",
        help="CSV/parquet column naming each row's group (repeat for overlapping groups, "
        "one per value of each column). A .npz's 'groups' array is read without it.",
    ),
]


def stdout() -> Console:
    from rich.console import Console

    return Console(file=sys.stdout, highlight=False)


PIPE_WIDTH = 120
"""Columns a command's tables are drawn to when stdout is a pipe or a file and ``$COLUMNS``
is unset (rich would take 80, wrapping every interval over several lines)."""


def print_drawn(draw: Callable[[Console], object], pipe_width: int = PIPE_WIDTH) -> None:
    """Call ``draw(console)`` to print on stdout: to the terminal's width on a terminal; to
    ``$COLUMNS`` (else ``pipe_width``) when stdout is a pipe or a file, as plain text without
    the trailing blanks that pad each line to the width."""
    from rich.console import Console

    if sys.stdout.isatty():
        draw(Console(file=sys.stdout, highlight=False))
        return
    width = int(os.environ.get("COLUMNS") or pipe_width)
    console = Console(file=io.StringIO(), highlight=False, width=width)
    with console.capture() as drawn:
        draw(console)
    lines = [line.rstrip() for line in drawn.get().splitlines()]
    sys.stdout.write("".join(line + "\n" for line in lines))
    sys.stdout.flush()


def stderr() -> Console:
    from rich.console import Console

    return Console(file=sys.stderr, highlight=False)


def rich_bar() -> Any:
    """The commands' progress bar on stderr (a ``rich.progress.Progress``): description, bar,
    ``done/total`` and elapsed time; it disappears when done."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=stderr(),
        transient=True,
    )


def fmt(x: float | None) -> str:
    """A number for a table: 4 decimals, scientific notation for huge or tiny magnitudes
    (``5e+304``), ``inf`` / ``nan`` as such, ``None`` as ``n/a``
    (:func:`selfcal.evaluation.format_number`)."""
    from selfcal.evaluation import format_number

    return format_number(x)


def check_kind(kind: str | None) -> None:
    """``--kind``, when given, is one of :data:`selfcal.io.KINDS`."""
    if kind is not None:
        from selfcal._validation import check_choice

        check_choice("--kind", kind, KINDS)


DEFERRED_HELP = "(computed when shown)"
"""The help text written in the signature of an option whose help :func:`deferred_help`
computes; it is never shown."""


class _DeferredHelpCommand(TyperCommand):
    """A command whose options named in :attr:`deferred` get their help text from a function
    called when the help is first shown (``--help``), not when the module is imported."""

    deferred: ClassVar[dict[str, Callable[[], str]]] = {}

    def format_help(self, ctx: Any, formatter: Any) -> None:
        for param in self.get_params(ctx):
            make = self.deferred.get(param.name or "")
            if make is not None and isinstance(param, TyperOption) and param.help == DEFERRED_HELP:
                param.help = inspect.cleandoc(make())  # as click cleans a help given at once
        super().format_help(ctx, formatter)


def deferred_help(**helps: Callable[[], str]) -> type[TyperCommand]:
    """The command class (``app.command(cls=...)``) for a command whose options ``NAME``
    (the parameter names) get their help from ``helps[NAME]()`` when ``--help`` is shown:
    for help texts that list a registry (the calibrators, the training methods), which
    would import torch. Write ``help=DEFERRED_HELP`` in the option itself."""
    return type("DeferredHelpCommand", (_DeferredHelpCommand,), {"deferred": dict(helps)})


def read(
    file: str,
    kind: str | None,
    label_column: str,
    require_labels: bool = True,
    group_columns: tuple[str, ...] = (),
) -> Predictions:
    """The predictions in ``file`` (or ``example:NAME``), with the groups it holds, read by
    :mod:`selfcal.io` (``group_columns``: a table's ``--groups`` columns)."""
    from selfcal.io import load_predictions

    return load_predictions(
        file,
        kind=kind,
        label_column=label_column,
        require_labels=require_labels,
        group_columns=group_columns,
    )


def say_groups_unused(where: object, command: str) -> None:
    """One ``note:`` line on stderr: the predictions at ``where`` hold groups, which
    ``selfcal COMMAND`` does not use yet -- said, never silently ignored."""
    sys.stderr.write(
        f"note: {where} holds groups; selfcal {command} does not use them yet (selfcal "
        "evaluate and selfcal compare report calibration per group)\n"
    )


def example_path(
    name: Annotated[str, typer.Argument(help="Example name.")] = "digits_test",
) -> None:
    """Print the path of a bundled example (also usable directly as example:NAME)."""
    with errors():
        from selfcal.examples import example_path as find

        typer.echo(str(find(name)))
