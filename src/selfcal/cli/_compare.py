"""``selfcal compare``: calibrators side by side on the user's own prediction sets -- each
fitted on a set's validation split and judged on its test split
(:func:`selfcal.posthoc.compare.compare`) -- as a table per set on the terminal, a Markdown
report with a reliability diagram per set, or JSON."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from selfcal.cli._common import BinsOpt, stdout
from selfcal.cli._errors import errors

if TYPE_CHECKING:  # pragma: no cover - typing only
    from rich.table import Table

    from selfcal.io import PredictionSet
    from selfcal.posthoc.compare import Row

OUT = Path("selfcal-compare")
"""The report folder unless ``--out`` says otherwise."""
PANELS = ("none", "ts", "auto")
"""The reliability diagrams of a set's figure: no calibration, temperature scaling, ``auto``
(where ``auto`` keeps temperature scaling, the calibrator with the lowest test NLL instead)."""


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
    out: Annotated[
        Path, typer.Option("--out", help="Report folder: README.md and a figure per set.")
    ] = OUT,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the results as one JSON object instead.")
    ] = False,
    bins: BinsOpt = 15,
) -> None:
    """Compare calibrators on your models' validation and test predictions.

    Each calibrator is fitted on a set's validation split and scored on its test split: NLL,
    ECE, Brier score, each one's NLL difference from temperature scaling with a paired 95%
    bootstrap interval over the test rows, and its fit time. Prints a table per set and writes
    the report, with a reliability diagram per set (no calibration, temperature scaling, auto),
    to --out."""
    with errors():
        from selfcal.io import default_sets_root, find_prediction_sets, load_prediction_set
        from selfcal.posthoc.compare import compare as compare_set

        roots = sets or [default_sets_root()]
        paths = [path for root in roots for path in find_prediction_sets(root)]
        names = _methods(methods)
        results = {}
        for path in paths:
            data = load_prediction_set(path)
            rows = compare_set(data, names, n_bins=bins, keep_probs=not as_json)
            results[data.name] = (data, rows)
            if not as_json:
                stdout().print(table(data, rows))
        if as_json:
            sys.stdout.write(json.dumps(payload(results)) + "\n")
            return
        path = write_report(results, out, bins, _command(sets, methods, out, bins))
        typer.echo(f"report: {path}")


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


def _command(sets: list[Path] | None, methods: str | None, out: Path, bins: int) -> str:
    words = ["selfcal compare", *map(str, sets or [])]
    if methods is not None:
        words.append(f"--calibrators {methods}")
    if out != OUT:
        words.append(f"--out {out}")
    if bins != 15:
        words.append(f"--bins {bins}")
    return " ".join(words)


def ordered(rows: list[Row]) -> list[Row]:
    """By test NLL, lowest first; calibrators that could not be fitted last."""
    return sorted(rows, key=lambda r: (bool(r.error), r.scores.get("nll", math.inf)))


def verdict(row: Row, score: str = "nll") -> str:
    """``better`` / ``worse`` than TS where the interval of ``score``'s difference excludes 0."""
    if score not in row.difference:
        return ""
    return "better" if row.high[score] < 0 else "worse" if row.low[score] > 0 else ""


def notes(row: Row, lowest: str, with_verdict: bool = True) -> str:
    """A row's note: (``with_verdict``) the NLL verdict against TS, ``auto``'s choice, the
    lowest NLL."""
    parts = [verdict(row)] if with_verdict and verdict(row) else []
    if row.name == "ts":
        parts.append("reference")
    if row.chosen is not None:
        parts.append(f"chose {row.chosen}")
    if row.name == lowest:
        parts.append("lowest NLL")
    if row.warnings:
        parts.append(f"{row.warnings} warnings")
    return "; ".join(parts) or row.error


def difference(
    row: Row, score: str = "nll", scale: float = 1.0, digits: int = 4, marked: bool = True
) -> str:
    """``row``'s ``score`` minus TS's with its interval, and (``marked``) ``better`` /
    ``worse`` where the interval excludes 0."""
    if score not in row.difference:
        return "—"
    point, low, high = (scale * d[score] for d in (row.difference, row.low, row.high))
    mark = f" {verdict(row, score)}" if marked and verdict(row, score) else ""
    return f"{point:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]{mark}"


def table(data: PredictionSet, rows: list[Row]) -> Table:
    from rich.table import Table

    found = ordered(rows)
    lowest = found[0].name if found and not found[0].error else ""
    out = Table(
        title=f"{data.name}: {len(data.val_labels):,} validation / {len(data.test_labels):,} "
        f"test rows, {data.n_classes} classes"
    )
    for column in ("calibrator", "NLL", "NLL − TS's [95% CI]", "ECE %", "Brier", "fit ms", "note"):
        out.add_column(column, justify="left" if column in ("calibrator", "note") else "right")
    for row in found:
        if row.error:
            out.add_row(row.name, "—", "—", "—", "—", "—", row.error)
            continue
        out.add_row(
            row.name,
            f"{row.scores['nll']:.4f}",
            difference(row, marked=False),
            f"{100 * row.scores['ece']:.2f}",
            f"{row.scores['brier']:.4f}",
            f"{1e3 * row.seconds:.0f}",
            notes(row, lowest),
        )
    return out


def markdown(data: PredictionSet, rows: list[Row], figure: str | None) -> list[str]:
    found = ordered(rows)
    lowest = found[0].name if found and not found[0].error else ""
    lines = [
        f"## {data.name}",
        "",
        f"{len(data.val_labels):,} validation and {len(data.test_labels):,} test rows, "
        f"{data.n_classes} classes ({data.kind}).",
        "",
        "| calibrator | test NLL | NLL − TS's | ECE (%) | ECE − TS's (points) | Brier | "
        "Brier − TS's (×100) | fit (ms) | note |",
        "|---|---:|---|---:|---|---:|---|---:|---|",
    ]
    for row in found:
        if row.error:
            lines.append(f"| {row.name} | — | — | — | — | — | — | — | {row.error} |")
            continue
        lines.append(
            f"| {row.name} | {row.scores['nll']:.4f} | {difference(row)} | "
            f"{100 * row.scores['ece']:.2f} | {difference(row, 'ece', 100.0, 2)} | "
            f"{row.scores['brier']:.4f} | {difference(row, 'brier', 100.0, 2)} | "
            f"{1e3 * row.seconds:.0f} | {notes(row, lowest, with_verdict=False)} |"
        )
    if figure:
        lines += ["", f"![reliability diagrams of {data.name}]({figure})"]
    return lines + [""]


REPORT_HEAD = """Each calibrator is fitted on the set's validation split and scored on its test
split. "NLL − TS's" is its test NLL minus temperature scaling's with a paired 95% bootstrap interval
over the test rows (1,000 resamples, centred); **better** / **worse** where it excludes 0.
ECE: {bins} equal-width bins of top-label confidence. Fit times: one process, as the machine
ran. The figure shows the reliability diagrams of the test split with no calibration, after
temperature scaling and after `auto` (where it keeps temperature scaling, after the calibrator
with the lowest test NLL)."""


def write_report(
    results: dict[str, tuple[PredictionSet, list[Row]]], out: Path, bins: int, command: str
) -> Path:
    """``out/README.md`` and a reliability figure per set (where matplotlib is installed)."""
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# Calibrators compared on prediction sets", "", f"Command: `{command}`", ""]
    lines += [" ".join(REPORT_HEAD.format(bins=bins).split()), ""]
    for data, rows in results.values():
        lines += markdown(data, rows, figure(data, rows, out, bins))
    path = out / "README.md"
    path.write_text("\n".join(lines))
    return path


def figure(data: PredictionSet, rows: list[Row], out: Path, bins: int) -> str | None:
    """``reliability_<set>.png``: the :data:`PANELS` diagrams of the test split; ``None``
    without matplotlib (the report says so) or without those rows."""
    try:
        from selfcal.plots import ReliabilityDiagramDisplay
        from selfcal.plots.save import DPI, new_figure
    except ImportError:
        return None
    from selfcal.predictions import Predictions

    by_name = {r.name: r for r in rows if r.probs is not None}
    shown = [n for n in PANELS if n in by_name]
    if "auto" in shown and by_name["auto"].chosen in ("ts", None):
        lowest = ordered(rows)[0].name
        shown.remove("auto")
        if lowest not in shown and lowest in by_name:
            shown.append(lowest)
    if not shown:
        return None
    try:
        fig = new_figure((4.2 * len(shown), 5.4))
    except ImportError:
        return None
    for ax, name in zip(fig.subplots(1, len(shown), squeeze=False)[0], shown):
        pred = Predictions.from_probs(by_name[name].probs, data.test_labels)
        chosen = f" → {by_name[name].chosen}" if by_name[name].chosen else ""
        label = name + chosen if name in PANELS else f"{name} (lowest test NLL)"
        ReliabilityDiagramDisplay.from_predictions(pred, n_bins=bins, ax=ax, title=label)
    file = f"reliability_{data.name}.png"
    fig.savefig(out / file, dpi=DPI)
    fig.clear()
    return file


def payload(results: dict[str, tuple[PredictionSet, list[Row]]]) -> dict[str, Any]:
    """``--json``: per set its sizes and, per calibrator, its scores, their differences from
    TS's with intervals, the fit seconds, ``auto``'s choice, or why it could not be fitted."""
    out: dict[str, Any] = {}
    for name, (data, rows) in results.items():
        calibrators: dict[str, Any] = {}
        for row in rows:
            if row.error:
                calibrators[row.name] = {"error": row.error}
                continue
            entry: dict[str, Any] = dict(row.scores)
            for score, value in row.difference.items():
                entry[f"{score}_minus_ts"] = {
                    "value": value,
                    "ci": [row.low[score], row.high[score]],
                }
            entry["fit_seconds"] = row.seconds
            if row.chosen is not None:
                entry["chosen"] = row.chosen
            calibrators[row.name] = entry
        out[name] = {
            "n_val": len(data.val_labels),
            "n_test": len(data.test_labels),
            "n_classes": data.n_classes,
            "calibrators": calibrators,
        }
    return out
