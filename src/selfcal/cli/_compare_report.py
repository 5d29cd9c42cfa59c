"""What ``selfcal compare`` draws (:mod:`selfcal.cli._compare` runs it): the terminal's summary
across sets and per-set tables, the Markdown report with a reliability figure per set, and the
``--json`` payload -- all from the sets' :class:`~selfcal.posthoc.compare.Comparison`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from selfcal._markdown import markdown_link, markdown_text
from selfcal.cli._compare_groups import draw_groups, markdown_groups

if TYPE_CHECKING:  # pragma: no cover - typing only
    from rich.console import Console

    from selfcal.io import PredictionSet
    from selfcal.posthoc.compare import Comparison, Row, Warned

PANELS = ("none", "ts", "auto")
"""The reliability diagrams of a set's figure: no calibration, temperature scaling, ``auto``
(where ``auto`` keeps temperature scaling, the calibrator with the lowest test score by the
criterion instead)."""
LABELS = {"nll": "NLL", "brier": "Brier", "ece": "ECE"}


@dataclass
class Judged:
    """A set judged: its :class:`~selfcal.posthoc.compare.Comparison`, its figure (PNG
    bytes, drawn as soon as the set is done so that no set's probabilities are kept) and
    where its files were read from when links led elsewhere
    (:meth:`selfcal.io.PredictionSet.read_from`)."""

    comparison: Comparison
    figure: bytes | None = field(default=None, repr=False)
    read_from: str = ""


def warned_text(warned: Warned) -> str:
    """``ts, svs: message (3 times)``: the calibrators, the message, the count if repeated."""
    times = f" ({warned.count} times)" if warned.count > 1 else ""
    return f"{', '.join(warned.calibrators)}: {warned.message}{times}"


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


UNITS = {"nll": "", "brier": " (×100)", "ece": " (points)"}
"""The unit of each score's printed difference (:data:`selfcal.posthoc.compare.PRINTED`)."""


def difference_head(criterion: str) -> str:
    """The column of the criterion's difference from TS: ``ECE − TS's [95% CI] (points)``."""
    return f"{LABELS[criterion]} − TS's [95% CI]{UNITS[criterion]}"


def set_table(found: Comparison) -> Any:
    """The set's rich table: each calibrator's test scores, the criterion's difference from
    TS's with its interval (on one line), fit time and note."""
    from rich import box
    from rich.table import Table

    from selfcal.posthoc.compare import difference_text

    criterion = found.criterion
    lowest = lowest_name(found.rows, criterion)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    head = difference_head(criterion)
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


def draw(
    console: Console, judged: list[Judged], failed: dict[str, str], criterion: str, shown: int = 3
) -> None:
    """The terminal output: the summary across sets (where there are several, or a failure),
    then each set's title, where its files were read from (links), split warning, table,
    recommendation and, on a set with groups, its per-group section (``shown`` worst groups:
    :func:`selfcal.cli._compare_groups.draw_groups`)."""

    if len(judged) + len(failed) > 1:
        for renderable in summary_renderables(judged, failed, criterion):
            console.print(renderable)
        console.print()
    for item in judged:
        found = item.comparison
        console.print(title(found), style="bold", markup=False)
        if item.read_from:
            console.print(f"files {item.read_from}", style="dim", markup=False)
        if not found.split_check.exchangeable:
            console.print(f"! {found.split_check.message}", style="yellow", markup=False)
        console.print(set_table(found))
        console.print(recommendation_line(found), markup=False)
        console.print()
        if found.groups is not None:
            draw_groups(console, found, shown, [r.name for r in ordered(found.rows, criterion)])
            console.print()


def recommendation_line(found: Comparison) -> str:
    """The recommendation's line; where the split check failed, with what it rests on."""
    rec = found.recommendation
    if rec is None:
        return "no recommendation: temperature scaling could not be fitted"
    if found.split_check.exchangeable:
        return rec.line
    return f"{rec.line} (on a test split unlike validation: see the warning above)"


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
    lines += ["", f"| set | use | {difference_head(criterion)} | also |", "|---|---|---|---|"]
    for item in judged:
        lines.append(set_summary_row(item.comparison))
    for path, message in failed.items():
        name, reason = markdown_text(Path(path).name), markdown_text(message)
        lines.append(f"| {name} | — | — | could not be read: {reason} |")
    return lines


def set_summary_row(found: Comparison) -> str:
    """One set's row of the summary: the recommendation, its interval, its costs and a
    failed split check."""
    from selfcal.posthoc.compare import difference_text

    rec = found.recommendation
    if rec is None:
        return f"| {markdown_text(found.name)} | — | — | temperature scaling could not be fitted |"
    shown = difference_text(rec.row, rec.criterion) if rec.criterion in rec.row.difference else ""
    also = list(rec.costs)
    if not found.split_check.exchangeable:
        also.append("splits differ")
    return (
        f"| {markdown_text(found.name)} | {rec.name} | {shown if rec.name != 'ts' else '—'} | "
        f"{'; '.join(also)} |"
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
def markdown(found: Comparison, figure_file: str | None, read_from: str = "") -> list[str]:
    """A set's section of the report: title, where its files were read from (links), split
    check, the full table (every score's difference from TS's with its interval), the
    recommendation, the warnings, the figure."""
    criterion = found.criterion
    lowest = lowest_name(found.rows, criterion)
    check = found.split_check
    lines = [f"## {markdown_text(found.name)}", ""] + (
        [f"Files {markdown_text(read_from)}.", ""] if read_from else []
    )
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
            lines.append(f"| {row.name} | — | — | — | — | — | — | — | {markdown_text(row.error)} |")
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
    order = [r.name for r in ordered(found.rows, criterion)]
    lines += ["", *markdown_groups(found, order)] if found.groups is not None else []
    if found.warnings:
        lines += ["", "Warnings raised by the fits:", ""]
        lines += [f"- {markdown_text(warned_text(w))}" for w in found.warnings]
    if figure_file:
        alt = markdown_text(f"reliability diagrams of {found.name}")
        lines += ["", f"![{alt}]({markdown_link(figure_file)})"]
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
    (``reliability_<set>.png``, where matplotlib is installed); the folder is replaced whole
    (:func:`selfcal._folders.whole_folder`: a kill leaves the old report or the new one)."""
    from selfcal._folders import whole_folder

    criterion = judged[0].comparison.criterion if judged else "nll"
    lines = ["# Calibrators compared on prediction sets", "", f"Command: `{command}`", ""]
    lines += [" ".join(REPORT_HEAD.format(bins=bins, criterion=LABELS[criterion]).split()), ""]
    if len(judged) + len(failed) > 1:
        lines += ["## Summary", "", *summary_lines(judged, failed, criterion), ""]
    with whole_folder(out) as scratch:
        for item in judged:
            file = None
            if item.figure is not None:
                file = f"reliability_{item.comparison.name}.png"
                (scratch / file).write_bytes(item.figure)
            lines += markdown(item.comparison, file, item.read_from)
        (scratch / "README.md").write_text("\n".join(lines), encoding="utf-8")
    return out / "README.md"


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
        "sets": {
            item.comparison.name: {**item.comparison.to_dict(), "read_from": item.read_from}
            for item in judged
        },
        "failed": failed,
        "summary": {
            "calibrators": {
                name: dict(zip(("better", "tied", "worse", "recommended"), values))
                for name, values in counts.items()
            },
            "auto_chose": auto_choices(judged),
        },
    }
