"""What the commands share: consoles, number formatting, the input options and reading them,
and ``selfcal example-path`` (the bundled inputs)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from selfcal._validation import check_choice
from selfcal.cli._errors import errors
from selfcal.io import KINDS

if TYPE_CHECKING:  # pragma: no cover - typing only
    from selfcal.predictions import Predictions

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


def stdout() -> Console:
    return Console(file=sys.stdout, highlight=False)


def stderr() -> Console:
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
        check_choice("--kind", kind, KINDS)


def read(
    file: str, kind: str | None, label_column: str, require_labels: bool = True
) -> Predictions:
    """The predictions in ``file`` (or ``example:NAME``), read by :mod:`selfcal.io`."""
    from selfcal.io import load_predictions

    return load_predictions(
        file, kind=kind, label_column=label_column, require_labels=require_labels
    )


def example_path(
    name: Annotated[str, typer.Argument(help="Example name.")] = "digits_test",
) -> None:
    """Print the path of a bundled example (also usable directly as example:NAME)."""
    with errors():
        from selfcal.examples import example_path as find

        typer.echo(str(find(name)))
