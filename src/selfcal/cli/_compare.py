"""``selfcal compare``: calibrators side by side on the user's own prediction sets -- each
fitted on a set's validation split and judged on its test split
(:func:`selfcal.posthoc.compare.comparison`) -- with the calibrator to use and why, whether
the two splits look exchangeable, and every warning the fits raised: on the terminal (a
summary across sets first, then a table per set), as a Markdown report with a reliability
diagram per set, or as JSON. A set that cannot be read is one error line; the others are
still judged, and the command exits 2 at the end."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from selfcal.cli._common import BinsOpt, KindOpt, check_kind, print_drawn
from selfcal.cli._errors import USAGE_EXIT, errors

if TYPE_CHECKING:  # pragma: no cover - typing only
    from rich.console import Console

    from selfcal.io import PredictionSet
    from selfcal.posthoc.compare import Comparison, Row

OUT = Path("selfcal-compare")
"""The report folder unless ``--out`` says otherwise."""
PANELS = ("none", "ts", "auto")
"""The reliability diagrams of a set's figure: no calibration, temperature scaling, ``auto``
(where ``auto`` keeps temperature scaling, the calibrator with the lowest test score by the
criterion instead)."""
CRITERIA = ("nll", "brier", "ece")
""":data:`selfcal.posthoc.compare.CRITERIA`, as a constant (the CLI imports no numeric
module to parse)."""
LABELS = {"nll": "NLL", "brier": "Brier", "ece": "ECE"}


@dataclass
class Judged:
    """A set judged: its :class:`~selfcal.posthoc.compare.Comparison` and its figure (PNG
    bytes, drawn as soon as the set is done so that no set's probabilities are kept)."""

    comparison: Comparison
    figure: bytes | None = field(default=None, repr=False)


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
) -> None:
    """Compare calibrators on your models' validation and test predictions, and say which to use.

    Each calibrator is fitted on a set's validation split and scored on its test split: NLL,
    ECE, Brier score, each one's difference from temperature scaling with a paired 95%
    bootstrap interval over the test rows, and its fit time. Per set, one line says which
    calibrator to use, by which criterion and interval, and what it costs on the other scores;
    a warning says where the test split does not look like the validation split (label
    frequencies, top confidence), on which every verdict rests. Prints a summary across sets,
    then a table per set, and writes the report, with a reliability diagram per set, to
    --out."""
    with errors():
        from selfcal._validation import check_choice

        check_choice("--criterion", criterion, CRITERIA)
        check_kind(kind)
        names = _methods(methods)
        if not as_json and out.exists() and not out.is_dir():
            raise ValueError(f"--out {out}: is a file; the report is a folder")
        paths = _set_paths(sets)
        judged, failed = judge_all(paths, names, criterion, kind, bins, figures=not as_json)
        if as_json:
            sys.stdout.write(json.dumps(payload(judged, failed, criterion)) + "\n")
        else:
            print_drawn(lambda console: draw(console, judged, failed, criterion))
            command = _command(sets, methods, criterion, kind, out, bins)
            path = write_report(judged, failed, out, bins, command)
            typer.echo(f"report: {path}")
    if failed:
        raise typer.Exit(USAGE_EXIT)


def _set_paths(sets: list[Path] | None) -> list[Path]:
    """Every set under the folders or files given (default ``$SELFCAL_PREDICTIONS``)."""
    from selfcal.io import default_sets_root, find_prediction_sets

    roots = sets or [default_sets_root()]
    return [path for root in roots for path in find_prediction_sets(root)]


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
    from selfcal.io._sets import set_name

    judged: list[Judged] = []
    failed: dict[str, str] = {}
    named: dict[str, Path] = {}
    bar = rich_bar() if sys.stderr.isatty() and len(paths) > 1 else None
    task = bar.add_task("comparing", total=len(paths)) if bar is not None else None
    if bar is not None:
        bar.start()
    try:
        for path in paths:
            try:
                if set_name(path) in named:
                    raise ValueError(
                        f"{path}: another set is named {set_name(path)!r} "
                        f"({named[set_name(path)]}); rename one"
                    )
                named[set_name(path)] = path
                judged.append(judge_one(path, names, criterion, kind, bins, figures))
            except (ValueError, OSError) as exc:
                failed[str(path)] = _one_line(exc, path)
                sys.stderr.write(f"error: {failed[str(path)]}\n")
            if bar is not None:
                bar.advance(task)
    finally:
        if bar is not None:
            bar.stop()
    return judged, failed


def _one_line(exc: BaseException, path: Path) -> str:
    """The error's one line, led by the set's path unless it names it already."""
    if isinstance(exc, OSError) and exc.strerror and exc.filename:
        text = f"{exc.filename}: {exc.strerror}"
    else:
        text = " ".join(str(exc).split())
    return text if str(path) in text or path.name in text else f"{path}: {text}"


def judge_one(
    path: Path, names: list[str] | None, criterion: str, kind: str | None, bins: int, figures: bool
) -> Judged:
    """The set at ``path`` read by the one kind rule (``kind``: ``--kind``), compared, its
    split check and warnings said on stderr, its figure drawn (``figures``)."""
    from selfcal.io import load_prediction_set
    from selfcal.posthoc.compare import comparison

    data = load_prediction_set(path, kind=kind)
    found = comparison(data, names, criterion=criterion, n_bins=bins, keep_probs=figures)
    say_warnings(found)
    png = figure(data, found.rows, bins, criterion) if figures else None
    for row in found.rows:
        row.probs = None
    return Judged(found, png)


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


def warned_text(warned: Any) -> str:
    """``ts, svs: message (3 times)``: the calibrators, the message, the count if repeated."""
    times = f" ({warned.count} times)" if warned.count > 1 else ""
    return f"{', '.join(warned.calibrators)}: {warned.message}{times}"


# ----------------------------------------------------------------------------- terminal
def ordered(rows: list[Row], criterion: str = "nll") -> list[Row]:
    """By test ``criterion``, lowest first; calibrators that could not be fitted last."""
    return sorted(rows, key=lambda r: (bool(r.error), r.scores.get(criterion, float("inf"))))


def notes(row: Row, lowest: str, criterion: str, with_verdict: bool = True) -> str:
    """A row's note: (``with_verdict``) the criterion's verdict against TS, ``auto``'s
    choice, the lowest score, the number of warnings."""
    from selfcal.posthoc.compare import verdict

    said = verdict(row, criterion) if with_verdict else ""
    parts = [said] if said else []
    if row.name == "ts":
        parts.append("reference")
    if row.chosen is not None:
        parts.append(f"chose {row.chosen}")
    if row.name == lowest:
        parts.append(f"lowest {LABELS[criterion]}")
    if row.warnings:
        parts.append(f"{len(row.warnings)} warning{'s' if len(row.warnings) > 1 else ''}")
    return "; ".join(parts) or row.error


def lowest_name(rows: list[Row], criterion: str) -> str:
    found = ordered(rows, criterion)
    return found[0].name if found and not found[0].error else ""


def title(found: Comparison) -> str:
    return (
        f"{found.name}: {found.n_val:,} validation / {found.n_test:,} test rows, "
        f"{found.n_classes} classes ({found.kind})"
    )


def set_table(found: Comparison) -> Any:
    """The set's rich table: each calibrator's test scores, the criterion's difference from
    TS's with its interval (on one line), fit time and note."""
    from rich import box
    from rich.table import Table

    from selfcal.posthoc.compare import difference_text

    criterion = found.criterion
    lowest = lowest_name(found.rows, criterion)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    head = f"{LABELS[criterion]} − TS's [95% CI]" + (" (points)" if criterion == "ece" else "")
    for column in ("calibrator", "NLL", "ECE %", "Brier", head, "fit ms", "note"):
        left = column in ("calibrator", "note")
        table.add_column(column, justify="left" if left else "right", no_wrap=column != "note")
    for row in ordered(found.rows, criterion):
        if row.error:
            table.add_row(row.name, "—", "—", "—", "—", "—", row.error)
            continue
        table.add_row(
            row.name,
            f"{row.scores['nll']:.4f}",
            f"{100 * row.scores['ece']:.2f}",
            f"{row.scores['brier']:.4f}",
            difference_text(row, criterion) if criterion in row.difference else "—",
            f"{1e3 * row.seconds:.0f}",
            notes(row, lowest, criterion),
        )
    return table


def draw(console: Console, judged: list[Judged], failed: dict[str, str], criterion: str) -> None:
    """The terminal output: the summary across sets (where there are several, or a failure),
    then each set's title, split warning, table and recommendation."""
    if len(judged) + len(failed) > 1:
        for renderable in summary_renderables(judged, failed, criterion):
            console.print(renderable)
        console.print()
    for item in judged:
        found = item.comparison
        console.print(title(found), style="bold", markup=False)
        if not found.split_check.exchangeable:
            console.print(f"! {found.split_check.message}", style="yellow", markup=False)
        console.print(set_table(found))
        console.print(recommendation_line(found), markup=False)
        console.print()


def recommendation_line(found: Comparison) -> str:
    rec = found.recommendation
    return (
        rec.line
        if rec is not None
        else "no recommendation: temperature scaling could not be fitted"
    )


def tally(judged: list[Judged]) -> dict[str, list[int]]:
    """Per calibrator: ``[better, tied, worse]`` than TS by each set's criterion
    (:func:`~selfcal.posthoc.compare.verdict`) and how often it was recommended; most often
    better first."""
    from selfcal.posthoc.compare import verdict

    counts: dict[str, list[int]] = {}
    for item in judged:
        found = item.comparison
        for row in found.rows:
            entry = counts.setdefault(row.name, [0, 0, 0, 0])
            if not row.error:
                entry[{"better": 0, "": 1, "worse": 2}[verdict(row, found.criterion)]] += 1
        rec = found.recommendation
        if rec is not None:
            counts.setdefault(rec.name, [0, 0, 0, 0])[3] += 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1][0], kv[1][2], kv[0])))


def auto_choices(judged: list[Judged]) -> dict[str, int]:
    """How often ``auto`` chose each candidate."""
    chosen: dict[str, int] = {}
    for item in judged:
        for row in item.comparison.rows:
            if row.chosen is not None:
                chosen[row.chosen] = chosen.get(row.chosen, 0) + 1
    return dict(sorted(chosen.items(), key=lambda kv: (-kv[1], kv[0])))


def summary_lines(judged: list[Judged], failed: dict[str, str], criterion: str) -> list[str]:
    """The summary across sets as Markdown lines (the report's; the terminal draws the same
    tables): sets judged and failed, per calibrator better / tied / worse than TS and how
    often recommended, ``auto``'s choices, and per set the recommendation."""
    word = LABELS[criterion]
    flagged = sum(not item.comparison.split_check.exchangeable for item in judged)
    lines = [
        f"{len(judged)} set(s) compared by test {word}"
        + (f"; {len(failed)} could not be read" if failed else "")
        + (f"; {flagged} with splits that do not look exchangeable" if flagged else "")
        + ".",
        "",
        "| calibrator | better than TS | tied | worse | recommended |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, (better, tied, worse, used) in tally(judged).items():
        if name == "ts":
            lines.append(f"| ts | reference | — | — | {used} |")
        else:
            lines.append(f"| {name} | {better} | {tied} | {worse} | {used} |")
    chosen = auto_choices(judged)
    if chosen:
        lines += ["", "auto chose: " + ", ".join(f"{n} {k}" for n, k in chosen.items()) + "."]
    lines += ["", f"| set | use | {word} − TS's [95% CI] | also |", "|---|---|---|---|"]
    for item in judged:
        lines.append(set_summary_row(item.comparison))
    for path, message in failed.items():
        lines.append(f"| {Path(path).name} | — | — | could not be read: {message} |")
    return lines


def set_summary_row(found: Comparison) -> str:
    """One set's row of the summary: the recommendation, its interval, its costs and a
    failed split check."""
    from selfcal.posthoc.compare import difference_text

    rec = found.recommendation
    if rec is None:
        return f"| {found.name} | — | — | temperature scaling could not be fitted |"
    shown = difference_text(rec.row, rec.criterion) if rec.criterion in rec.row.difference else ""
    also = list(rec.costs)
    if not found.split_check.exchangeable:
        also.append("splits differ")
    return (
        f"| {found.name} | {rec.name} | {shown if rec.name != 'ts' else '—'} | {'; '.join(also)} |"
    )


def summary_renderables(judged: list[Judged], failed: dict[str, str], criterion: str) -> list[Any]:
    """:func:`summary_lines` for the terminal: prose as text, pipe tables as rich tables."""
    from rich import box
    from rich.table import Table

    from selfcal.cli._terminal import blocks, parse_table

    out: list[Any] = []
    for is_table, block in blocks(summary_lines(judged, failed, criterion)):
        if not is_table:
            out += [line for line in block if line.strip()]
            continue
        header, justify, rows = parse_table(block)
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        for name, side in zip(header, justify):
            table.add_column(name, justify=side, no_wrap=name.endswith("CI]"))
        for row in rows:
            table.add_row(*row)
        out.append(table)
    return out


# ----------------------------------------------------------------------------- report
def markdown(found: Comparison, figure_file: str | None) -> list[str]:
    """A set's section of the report: title, split check, the full table (every score's
    difference from TS's with its interval), the recommendation, the warnings, the figure."""
    criterion = found.criterion
    lowest = lowest_name(found.rows, criterion)
    check = found.split_check
    lines = [f"## {found.name}", ""]
    if not check.exchangeable:
        lines += [f"> **Warning:** {check.message}", ""]
    lines += [
        f"{found.n_val:,} validation and {found.n_test:,} test rows, {found.n_classes} classes "
        f"({found.kind})." + ("" if not check.exchangeable else f" Split check: {check.message}."),
        "",
        f"**{recommendation_line(found)}**",
        "",
        "| calibrator | test NLL | NLL − TS's | ECE (%) | ECE − TS's (points) | Brier | "
        "Brier − TS's (×100) | fit (ms) | note |",
        "|---|---:|---|---:|---|---:|---|---:|---|",
    ]
    for row in ordered(found.rows, criterion):
        if row.error:
            lines.append(f"| {row.name} | — | — | — | — | — | — | — | {row.error} |")
            continue
        diffs = {
            s: _marked(row, s) if s in row.difference else "—" for s in ("nll", "ece", "brier")
        }
        lines.append(
            f"| {row.name} | {row.scores['nll']:.4f} | {diffs['nll']} | "
            f"{100 * row.scores['ece']:.2f} | {diffs['ece']} | {row.scores['brier']:.4f} | "
            f"{diffs['brier']} | {1e3 * row.seconds:.0f} | "
            f"{notes(row, lowest, criterion, with_verdict=False)} |"
        )
    if found.warnings:
        lines += ["", "Warnings raised by the fits:", ""]
        lines += [f"- {warned_text(w)}" for w in found.warnings]
    if figure_file:
        lines += ["", f"![reliability diagrams of {found.name}]({figure_file})"]
    return lines + [""]


def _marked(row: Row, score: str) -> str:
    """The difference with its interval and, where it excludes 0 as printed, the verdict."""
    from selfcal.posthoc.compare import difference_text, verdict

    said = verdict(row, score)
    return difference_text(row, score) + (f" {said}" if said else "")


REPORT_HEAD = """Each calibrator is fitted on the set's validation split and scored on its test
split. "− TS's" is its test score minus temperature scaling's with a paired 95% bootstrap
interval over the test rows (1,000 resamples, centred); **better** / **worse** where it
excludes 0 at the printed precision. The recommendation is decided by {criterion}: `auto`'s
choice by cross-validation on the validation split, unless its test {criterion} is
significantly worse than TS's (then TS); without `auto`, the lowest test {criterion} where
significantly below TS's, else TS. The split check tests whether the test split looks
exchangeable with the validation split (label frequencies, top confidence; every verdict
assumes it). ECE: {bins} equal-width bins of top-label confidence. Fit times: one process, as
the machine ran. The figure shows the reliability diagrams of the test split with no
calibration, after temperature scaling and after `auto` (where it keeps temperature scaling,
after the calibrator with the lowest test {criterion})."""


def write_report(
    judged: list[Judged], failed: dict[str, str], out: Path, bins: int, command: str
) -> Path:
    """``out/README.md``: the summary across sets, then each set's section with its figure
    (``reliability_<set>.png``, where matplotlib is installed). The figures are written
    first and the README last, replacing the old one in one step."""
    out.mkdir(parents=True, exist_ok=True)
    criterion = judged[0].comparison.criterion if judged else "nll"
    lines = ["# Calibrators compared on prediction sets", "", f"Command: `{command}`", ""]
    lines += [" ".join(REPORT_HEAD.format(bins=bins, criterion=LABELS[criterion]).split()), ""]
    if len(judged) + len(failed) > 1:
        lines += ["## Summary", "", *summary_lines(judged, failed, criterion), ""]
    for item in judged:
        file = None
        if item.figure is not None:
            file = f"reliability_{item.comparison.name}.png"
            (out / file).write_bytes(item.figure)
        lines += markdown(item.comparison, file)
    path = out / "README.md"
    partial = out / ".README.md.partial"
    partial.write_text("\n".join(lines))
    partial.replace(path)
    return path


def figure(data: PredictionSet, rows: list[Row], bins: int, criterion: str) -> bytes | None:
    """The :data:`PANELS` reliability diagrams of the test split as PNG bytes; ``None``
    without matplotlib or without those rows."""
    try:
        from selfcal.plots import ReliabilityDiagramDisplay
        from selfcal.plots.save import DPI, new_figure
    except ImportError:
        return None
    import io

    from selfcal.predictions import Predictions

    by_name = {r.name: r for r in rows if r.probs is not None}
    shown = [n for n in PANELS if n in by_name]
    if "auto" in shown and by_name["auto"].chosen in ("ts", None):
        lowest = lowest_name(rows, criterion)
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
        label = name + chosen if name in PANELS else f"{name} (lowest test {LABELS[criterion]})"
        ReliabilityDiagramDisplay.from_predictions(pred, n_bins=bins, ax=ax, title=label)
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=DPI, format="png")
    fig.clear()
    return buffer.getvalue()


def payload(judged: list[Judged], failed: dict[str, str], criterion: str) -> dict[str, Any]:
    """``--json``: the criterion, each set's comparison
    (:meth:`~selfcal.posthoc.compare.Comparison.to_dict`), the sets that could not be read
    with why, and the summary (per calibrator better / tied / worse than TS and how often
    recommended; ``auto``'s choices)."""
    counts = tally(judged)
    return {
        "criterion": criterion,
        "sets": {item.comparison.name: item.comparison.to_dict() for item in judged},
        "failed": failed,
        "summary": {
            "calibrators": {
                name: dict(zip(("better", "tied", "worse", "recommended"), values))
                for name, values in counts.items()
            },
            "auto_chose": auto_choices(judged),
        },
    }
