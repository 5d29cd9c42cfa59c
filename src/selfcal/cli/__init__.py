"""The ``selfcal`` command line: ``evaluate``, ``calibrate``, ``compare``, ``train``,
``predict``, ``reproduce``, ``dataset`` and ``example-path``.

Input files are read by :mod:`selfcal.io` (``.npz``, ``NAME.logits.npy``/``NAME.probs.npy`` +
``NAME.labels.npy``, ``.csv``, ``.parquet``); ``example:NAME`` names a bundled example, e.g.
``selfcal evaluate example:digits_test``.

Errors never print a traceback: bad input or usage exits with code 2 and one line
``error: ...`` on stderr; an unexpected failure exits with code 1, one line, and a hint to
rerun with ``SELFCAL_DEBUG=1`` (which lets the traceback through).

One module per concern: :mod:`~selfcal.cli._errors` (the one-line errors and exit codes),
:mod:`~selfcal.cli._common` (shared options, consoles, reading inputs, ``example-path``),
:mod:`~selfcal.cli._evaluate`, :mod:`~selfcal.cli._calibrate`, :mod:`~selfcal.cli._compare`,
:mod:`~selfcal.cli._train`,
:mod:`~selfcal.cli._predict`, :mod:`~selfcal.cli._reproduce` and :mod:`~selfcal.cli._dataset`
(one command each), :mod:`~selfcal.cli._terminal` (Markdown summaries drawn to fit the
terminal); this
module assembles :data:`app` and runs it (:func:`main`, the console script;
``python -m selfcal.cli`` too).

Start-up is light: no command module imports torch, numpy or the numeric selfcal modules at
import time (each command imports them when it runs), so ``selfcal --version`` and
``selfcal --help`` answer at once (``tests/cli/test_startup.py``).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Annotated

import typer

import selfcal
from selfcal.cli._calibrate import CALIBRATE_KEYS, CalibrateCommand, calibrate
from selfcal.cli._common import example_path
from selfcal.cli._compare import compare
from selfcal.cli._dataset import dataset
from selfcal.cli._errors import ERROR_EXIT, USAGE_EXIT, fail
from selfcal.cli._evaluate import PROGRESS_MIN_ROWS, evaluate
from selfcal.cli._predict import predict
from selfcal.cli._reproduce import REPORT_ROOT, reproduce_app
from selfcal.cli._train import TrainCommand, train

app = typer.Typer(
    name="selfcal",
    help="Measure and fix the calibration of classifier predictions.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"selfcal {selfcal.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """Measure and fix the calibration of classifier predictions."""


def _help(command: Callable[..., None]) -> str:
    """``command``'s docstring with each paragraph on one line: typer joins the lines of a
    help's first paragraph but prints the others with their line breaks, and a command listing
    shows the first paragraph with its line breaks."""
    paragraphs = inspect.cleandoc(command.__doc__ or "").split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


app.command(help=_help(evaluate))(evaluate)
app.command(cls=CalibrateCommand, help=_help(calibrate))(calibrate)
app.command(cls=TrainCommand, help=_help(train))(train)
app.command(help=_help(predict))(predict)
app.command(help=_help(compare))(compare)
app.command(help=_help(dataset))(dataset)
app.command("example-path", help=_help(example_path))(example_path)
app.add_typer(reproduce_app, name="reproduce")


def main(argv: list[str] | None = None) -> int:
    """Console entry point; returns (and, as a script, exits with) the exit code."""
    command = typer.main.get_command(app)
    try:
        code = command.main(args=argv, prog_name="selfcal", standalone_mode=False)
    except typer.TyperException as exc:  # usage errors: bad option, missing argument, ...
        fmt = getattr(exc, "format_message", None)
        fail(fmt() if fmt else str(exc), getattr(exc, "exit_code", USAGE_EXIT))
        code = getattr(exc, "exit_code", USAGE_EXIT)
    except typer.Abort:
        fail("aborted", 1)
        code = 1
    code = code if isinstance(code, int) else 0
    if argv is None:
        sys.exit(code)
    return code


__all__ = [
    "CALIBRATE_KEYS",
    "ERROR_EXIT",
    "PROGRESS_MIN_ROWS",
    "REPORT_ROOT",
    "USAGE_EXIT",
    "app",
    "calibrate",
    "compare",
    "dataset",
    "evaluate",
    "example_path",
    "main",
    "predict",
    "reproduce_app",
    "train",
]
