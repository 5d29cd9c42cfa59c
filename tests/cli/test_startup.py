"""The command line starts at once: ``selfcal --version`` and ``selfcal --help`` import no
torch (nor numpy, scipy, matplotlib, scikit-learn); every command imports what it needs when
it runs. Checked in fresh interpreters, since this test session has long imported torch.

The option defaults and choices that the command modules now write as constants are checked
against the modules they mirror, and the help texts computed on display
(:func:`selfcal.cli._common.deferred_help`) against their registries.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import selfcal
from selfcal.cli import main

HEAVY = ("torch", "numpy", "scipy", "matplotlib", "sklearn", "selfcal.predictions")
"""Modules that ``--version`` and ``--help`` must not import."""

_INVOKE = """
import json, sys
from typer.testing import CliRunner
from selfcal.cli import app
result = CliRunner().invoke(app, {args!r})
heavy = [m for m in {heavy!r} if m in sys.modules]
print(json.dumps({{"code": result.exit_code, "output": result.output, "heavy": heavy}}))
"""


def _invoke_fresh(args: list[str], watch: tuple[str, ...] = HEAVY) -> dict:
    """``selfcal ARGS`` through typer's CliRunner in a fresh interpreter: its exit code,
    output and which of the modules ``watch`` it imported (as ``heavy``)."""
    script = _INVOKE.format(args=args, heavy=watch)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("args", [["--version"], ["--help"], []], ids=["version", "help", "bare"])
def test_version_and_help_import_no_torch(args):
    result = _invoke_fresh(args)
    assert result["heavy"] == [], result["heavy"]
    assert result["code"] in (0, 2)  # a bare `selfcal` shows the help and exits 2 (click)
    assert (f"selfcal {selfcal.__version__}" if args == ["--version"] else "Commands") in result[
        "output"
    ]


def test_console_entry_imports_no_torch():
    """``python -m selfcal.cli --version`` -- the console script's code path, ``main()``
    included -- as seen by ``-X importtime`` (every module imported, one per line)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "selfcal.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.startswith("selfcal "), done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert not [n for n in imported for m in HEAVY if n == m or n.startswith(f"{m}.")]


def test_importing_the_cli_imports_no_torch():
    code = "import sys, selfcal.cli; print([m for m in {heavy!r} if m in sys.modules])"
    done = subprocess.run(
        [sys.executable, "-c", code.format(heavy=HEAVY)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_command_still_imports_what_it_needs():
    """The lazy imports happen: ``evaluate`` runs in a fresh process and loads torch -- but
    not what it does not need: the studies' engine, matplotlib, sympy (a second of imports
    that ``torch.broadcast_shapes`` would pull in) or pydantic (which typer 0.29 imports to
    parse a command's options: about 0.1 s, ``benchmarks/results/cli.md``; ``pyproject.toml``
    keeps typer below it)."""
    args = ["evaluate", "example:digits_test", "--json", "--resamples", "10"]
    unneeded = ("selfcal.experiments", "matplotlib", "sympy", "pydantic")
    result = _invoke_fresh(args, ("torch", *unneeded))
    assert result["code"] == 0, result["output"]
    assert result["heavy"] == ["torch"]
    assert "ece" in json.loads(result["output"].splitlines()[-1])


# ----------------------------------------------------------------------------- constants
def test_cli_constants_equal_the_heavy_modules():
    from selfcal.cli import _common, _evaluate, _reproduce
    from selfcal.experiments import runner, store
    from selfcal.io import KINDS
    from selfcal.metrics.bootstrap import INTERVAL_METHODS

    assert _common.KINDS == KINDS
    assert _evaluate.INTERVALS == INTERVAL_METHODS
    assert _reproduce.DEFAULT_STORE == Path(store.DEFAULT_PATH)
    assert _reproduce.EXECUTORS == runner.EXECUTORS


def test_conformal_constants_equal_the_core():
    import inspect

    from selfcal.cli import _conformal, _predict
    from selfcal.conformal import SCORES, SplitConformal
    from selfcal.pipeline import conformal

    default = inspect.signature(SplitConformal).parameters["nonconformity"].default
    assert _conformal.CONFORMAL_SCORES == conformal.SCORES == SCORES
    assert _conformal.CONFORMAL_SCORE == _predict.CONFORMAL_SCORE == conformal.DEFAULT_SCORE
    assert conformal.DEFAULT_SCORE == default


# ----------------------------------------------------------------------------- help
@pytest.mark.parametrize("command", ["calibrate", "train"])
def test_deferred_help_is_never_shown_as_the_placeholder(command, capsys, monkeypatch):
    from selfcal.cli._common import DEFERRED_HELP

    monkeypatch.setenv("COLUMNS", "400")
    assert main([command, "--help"]) == 0
    text = capsys.readouterr().out
    assert DEFERRED_HELP not in text
    assert "Calibrator:" in text if command == "calibrate" else "Training method" in text


def test_train_calibrate_help_lists_the_registry(capsys, monkeypatch):
    """Every registered calibrator but those that need groups, which train cannot give."""
    from selfcal.posthoc import build_calibrator, calibrator_names

    monkeypatch.setenv("COLUMNS", "400")
    assert main(["train", "--help"]) == 0
    text = capsys.readouterr().out
    usable = [n for n in calibrator_names() if not build_calibrator(n).uses_groups]
    assert {"groupwise", "multicalibration"} <= set(calibrator_names()) - set(usable)
    assert "Post-hoc calibrator fitted on VAL, or 'none': " + ", ".join(usable) in text


def test_calibrate_help_is_computed_when_shown(capsys, monkeypatch):
    """A calibrator registered after the CLI was imported is listed: the help is read from
    the registry when shown, not frozen at import."""
    from selfcal.posthoc.registry import _CALIBRATORS

    monkeypatch.setitem(_CALIBRATORS._entries, "zz-late", _CALIBRATORS.get("ts"))
    monkeypatch.setenv("COLUMNS", "400")
    assert main(["calibrate", "--help"]) == 0
    assert " zz-late: Temperature scaling" in capsys.readouterr().out


@pytest.mark.parametrize("args", [["--help"], ["reproduce", "--help"]], ids=["root", "reproduce"])
def test_command_listings_show_one_line_summaries(args, capsys, monkeypatch):
    """Each command of a listing shows a one-line summary, not its whole help: typer prints a
    docstring's first paragraph there with its line breaks, so every command's docstring opens
    with a one-line summary (a study's listing line is its title)."""
    monkeypatch.setenv("COLUMNS", "200")
    assert main(args) == 0
    text = capsys.readouterr().out
    panel = text[text.index("Commands") :].splitlines()
    listing = [line.strip("│ ") for line in panel if line.startswith("│")]
    assert len(listing) >= 7, listing
    assert all(line.split()[0].islower() for line in listing), listing  # no continuation line


@pytest.mark.parametrize("name", ["evaluate", "calibrate", "train", "predict", "dataset"])
def test_a_command_help_shows_each_paragraph_unbroken(name, capsys, monkeypatch):
    """``selfcal NAME --help`` on a wide terminal shows each paragraph of the command's
    docstring on one line (typer keeps the source's line breaks after the first paragraph)."""
    import inspect

    import selfcal.cli as cli

    monkeypatch.setenv("COLUMNS", "400")
    assert main([name, "--help"]) == 0
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    paragraphs = inspect.cleandoc(getattr(cli, name).__doc__).split("\n\n")
    assert len(paragraphs) >= 2
    for paragraph in paragraphs:
        assert " ".join(paragraph.split()) in lines
