"""``selfcal compare``: calibrators side by side on the user's own prediction sets -- each
fitted on a set's validation split and judged on its test split
(:func:`selfcal.posthoc.compare.comparison`) -- with the calibrator to use and why, whether
the two splits look exchangeable, and every warning the fits raised: on the terminal (a
summary across sets first, then a table per set), as a Markdown report with a reliability
diagram per set, or as JSON; on a set with groups, each calibrator per group too
(:mod:`selfcal.cli._compare_groups`). A set that cannot be read is one error line; the
others are still judged, and the command exits 2 at the end."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from selfcal.cli._common import BinsOpt, KindOpt, check_kind, print_drawn
from selfcal.cli._compare_groups import COMPARE_GROUPS_SHOWN
from selfcal.cli._compare_report import Judged, draw, payload, warned_text, write_report
from selfcal.cli._errors import USAGE_EXIT, errors

if TYPE_CHECKING:  # pragma: no cover - typing only
    from selfcal.posthoc.compare import Comparison

OUT = Path("selfcal-compare")
"""The report folder unless ``--out`` says otherwise."""
CRITERIA = ("nll", "brier", "ece")
""":data:`selfcal.posthoc.compare.CRITERIA`, as a constant (the CLI imports no numeric
module to parse)."""


def compare(
    sets: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Prediction sets: a set's folder (val.npz and test.npz) or one .npz with *_val "
            "and *_test arrays, or a folder of sets. Default: $SELFCAL_PREDICTIONS.",
            show_default=False,
        ),
    ] = None,
    methods: Annotated[
        str | None,
        typer.Option(
            "--calibrators",
            "--methods",
            help="Calibrators to compare, comma-separated (selfcal calibrate --help lists them). "
            "Default: auto's candidates for the set's size, then auto.",
        ),
    ] = None,
    criterion: Annotated[
        str,
        typer.Option(
            "--criterion",
            help="What decides the recommendation and auto's choice: 'nll' (log loss, a proper "
            "score), 'brier' or 'ece' (15-bin top-label calibration error).",
        ),
    ] = "nll",
    kind: KindOpt = None,
    out: Annotated[
        Path, typer.Option("--out", help="Report folder: README.md and a figure per set.")
    ] = OUT,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the results as one JSON object instead.")
    ] = False,
    bins: BinsOpt = 15,
    groups_shown: Annotated[
        int,
        typer.Option(
            "--groups-shown",
            min=0,
            help="On a set with groups: how many of the worst groups by excess ECE the terminal "
            "lists under no calibration, TS and the recommended calibrator each (the report "
            "and --json hold every group).",
        ),
    ] = COMPARE_GROUPS_SHOWN,
) -> None:
    """Compare calibrators on your models' validation and test predictions, and say which to use.

    Each calibrator is fitted on a set's validation split and scored on its test split: NLL,
    ECE, Brier score, each one's difference from temperature scaling with a paired 95%
    bootstrap interval over the test rows, and its fit time. Per set, one line says which
    calibrator to use, by which criterion and interval, and what it costs on the other scores;
    a warning says where the test split does not look like the validation split (label
    frequencies, top confidence), on which every verdict rests. Prints a summary across sets,
    then a table per set, and writes the report, with a reliability diagram per set, to
    --out.

    On a set with groups (a 'groups' array beside the labels, e.g. the subject of each
    question), also each calibrator's worst group by ECE with an interval and its difference
    from TS's, the multicalibration error, and the groups whose ECE most exceeds what a
    perfectly calibrated model shows at their size; every group is in the report and --json.
    A calibrator that uses groups is fitted with the validation split's."""
    with errors():
        from selfcal._validation import check_choice

        check_choice("--criterion", criterion, CRITERIA)
        check_kind(kind)
        names = _methods(methods)
        if not as_json:  # refused before any fit, not after
            from selfcal._folders import check_replaceable, is_report_file

            check_replaceable(out, is_report_file, "report")
        paths = _set_paths(sets)
        judged, failed = judge_all(paths, names, criterion, kind, bins, figures=not as_json)
        if as_json:
            sys.stdout.write(json.dumps(payload(judged, failed, criterion)) + "\n")
        else:
            print_drawn(lambda console: draw(console, judged, failed, criterion, groups_shown))
            command = _command(sets, methods, criterion, kind, out, bins)
            path = write_report(judged, failed, out, bins, command)
            typer.echo(f"report: {path}")
    if failed:
        raise typer.Exit(USAGE_EXIT)


def _set_paths(sets: list[Path] | None) -> list[Path]:
    """Every set under the folders or files given (default ``$SELFCAL_PREDICTIONS``)."""
    from selfcal.io import default_sets_root, find_prediction_sets

    roots = sets or [default_sets_root()]
    return find_prediction_sets(*roots, unique=False)  # a duplicate name: that set's error


def _methods(methods: str | None) -> list[str] | None:
    """``--calibrators`` as names (an unknown one is an error naming the known ones)."""
    if methods is None:
        return None
    from selfcal.posthoc import build_calibrator

    names = [m.strip() for m in methods.split(",") if m.strip()]
    if not names:
        raise ValueError(f"--calibrators names no calibrator: {methods!r}")
    for name in names:
        build_calibrator(name)
    return names


def _command(
    sets: list[Path] | None,
    methods: str | None,
    criterion: str,
    kind: str | None,
    out: Path,
    bins: int,
) -> str:
    words = ["selfcal compare", *map(str, sets or [])]
    optional = {
        "--calibrators": methods,
        "--criterion": None if criterion == "nll" else criterion,
        "--kind": kind,
        "--out": None if out == OUT else out,
        "--bins": None if bins == 15 else bins,
    }
    words += [f"{flag} {value}" for flag, value in optional.items() if value is not None]
    return " ".join(words)


def judge_all(
    paths: list[Path],
    names: list[str] | None,
    criterion: str,
    kind: str | None,
    bins: int,
    figures: bool,
) -> tuple[list[Judged], dict[str, str]]:
    """Each set at ``paths`` read and judged (:func:`judge_one`), with a progress bar on a
    terminal; a set that cannot be read (or judged: a ``ValueError``), or whose name another
    set has already, is one ``error:`` line on stderr, recorded in the failures by its path,
    and the others go on."""
    from selfcal.cli._common import rich_bar
    from selfcal.exceptions import one_line
    from selfcal.io._sets import duplicate_name

    judged: list[Judged] = []
    failed: dict[str, str] = {}
    bar = rich_bar() if sys.stderr.isatty() and len(paths) > 1 else None
    task = bar.add_task("comparing", total=len(paths)) if bar is not None else None
    if bar is not None:
        bar.start()
    try:
        for i, path in enumerate(paths):
            try:
                if duplicate_name(path, paths[:i]):
                    raise ValueError(duplicate_name(path, paths[:i]))
                judged.append(judge_one(path, names, criterion, kind, bins, figures))
            except (ValueError, OSError) as exc:
                failed[str(path)] = one_line(exc, path)
                sys.stderr.write(f"error: {failed[str(path)]}\n")
            if bar is not None:
                bar.advance(task)
    finally:
        if bar is not None:
            bar.stop()
    return judged, failed


def judge_one(
    path: Path, names: list[str] | None, criterion: str, kind: str | None, bins: int, figures: bool
) -> Judged:
    """The set at ``path`` read by the one kind rule (``kind``: ``--kind``), compared, its
    split check and warnings said on stderr, its figure drawn (``figures``), and where its
    files really are when links led elsewhere; a set with groups is judged per group too."""
    from selfcal.cli._compare_report import figure
    from selfcal.io import load_prediction_set
    from selfcal.posthoc.compare import comparison

    data = load_prediction_set(path, kind=kind)
    found = comparison(data, names, criterion=criterion, n_bins=bins, keep_probs=figures)
    say_warnings(found)
    png = figure(data, found.rows, bins, criterion) if figures else None
    for row in found.rows:
        row.probs = None
    return Judged(found, png, data.read_from())


def say_warnings(found: Comparison) -> None:
    """One ``warning:`` line on stderr for a split check that failed and for each distinct
    warning of the fits, naming the set and the calibrators, with a count where repeated."""
    lines = []
    if not found.split_check.exchangeable:
        lines.append(f"{found.name}: {found.split_check.message}")
    lines += [f"{found.name}: {warned_text(w)}" for w in found.warnings]
    for line in lines:
        sys.stderr.write(f"warning: {line}\n")
    sys.stderr.flush()
