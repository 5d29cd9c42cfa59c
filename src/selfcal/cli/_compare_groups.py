"""``selfcal compare`` on a set with groups: each calibrator's calibration per test group
(:mod:`selfcal.posthoc._compare_groups`), never left out.

* The terminal, after the set's table: one line per calibrator -- its worst group by ECE with
  a 95% interval, the difference from temperature scaling's with a paired interval, the
  multicalibration error with its interval -- then the groups whose ECE most exceeds what a
  perfectly calibrated model shows at their size (the ``--groups-shown`` worst by excess
  under no calibration, under TS and under the recommended calibrator), their ECE and excess
  under each of the three.
* The report: the same per-calibrator table with the worst group by excess too, every
  group's ECE under every calibrator, and for no calibration, TS and the recommended
  calibrator every group's size, accuracy, NLL, ECE, calibrated ECE, excess and p-value.
* ``--json``: every group under every calibrator, under the set's key ``groups``
  (:meth:`~selfcal.posthoc._compare_groups.GroupComparison.to_dict`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from selfcal._markdown import markdown_text
from selfcal.cli._groups import p_text

if TYPE_CHECKING:  # pragma: no cover - typing only
    from selfcal.metrics.bootstrap import Interval
    from selfcal.metrics.group_summary import GroupEvaluation
    from selfcal.posthoc._compare_groups import GroupComparison
    from selfcal.posthoc.compare import Comparison

COMPARE_GROUPS_SHOWN = 3
"""Worst groups by excess listed in the terminal under each of none, TS and the
recommended calibrator (their union is the table)."""


def _points(x: float) -> str:
    return "nan" if math.isnan(x) else f"{100 * x:.1f}"


def _ci(iv: Interval) -> str:
    """``21.9 [17.6, 29.2]``: a value and its interval, in points."""
    return f"{_points(iv.value)} [{_points(iv.low)}, {_points(iv.high)}]"


def featured(found: Comparison) -> list[str]:
    """The calibrators whose groups are listed: none, TS and the recommended one (the row it
    was judged by: ``auto``'s where ``auto`` decided), those judged per group, once each."""
    groups = found.groups
    rec = found.recommendation
    names = ["none", "ts", *([] if rec is None else [rec.row.name])]
    return [n for n in dict.fromkeys(names) if groups is not None and n in groups.evaluations]


def label(found: Comparison, name: str) -> str:
    """A calibrator's name, with what ``auto`` chose and ``(recommended)`` where it is."""
    row = next(r for r in found.rows if r.name == name)
    text = name + (f" → {row.chosen}" if row.chosen else "")
    rec = found.recommendation
    return text + (" (recommended)" if rec is not None and rec.row.name == name else "")


def _judged(found: Comparison, order: list[str]) -> list[str]:
    """The calibrators of ``order`` (the set's table's) judged per group."""
    groups = found.groups
    judged = [] if groups is None else groups.evaluations
    return [name for name in order if name in judged]


def _worst_cells(groups: GroupComparison, name: str) -> list[str]:
    """Worst group by ECE, its ECE with interval, the paired difference from TS's, and its
    verdict (``better`` / ``worse`` where the interval excludes 0 as printed, else ``""``)."""
    ev = groups.evaluations[name]
    paired = groups.worst_minus_ts.get(name)
    minus = "—" if paired is None else paired.text()
    verdict = "" if paired is None else paired.verdict
    return [ev.report.names[ev.report.worst], _ci(ev.worst_ece), minus, verdict]


def head_line(found: Comparison) -> str:
    """What the section is, in one line."""
    groups = found.groups
    assert groups is not None
    return (
        f"{len(groups.names)} groups in the test split ({min(groups.sizes)}–{max(groups.sizes)} "
        f"rows): the worst group's ECE in points with a 95% interval "
        f"({groups.n_worst_resamples:,} resamples, paired against TS); excess = ECE less what "
        f"a perfectly calibrated model shows at the group's size ({groups.n_draws} draws)"
    )


def calibrated_line(groups: GroupComparison) -> str:
    """What the worst of the groups shows under perfect calibration, over the calibrators."""
    means = [float(ev.report.worst_null.mean()) for ev in groups.evaluations.values()]
    span = _points(min(means)) + (f"–{_points(max(means))}" if max(means) > min(means) else "")
    return (
        f"a perfectly calibrated model's worst of these {len(groups.names)} groups shows {span} "
        f"points on average (under each calibrator's confidences); the report has each "
        "worst group's p-value and every group"
    )


def worst_groups(found: Comparison, shown: int) -> list[int]:
    """The union of the ``shown`` worst groups by excess ECE under each :func:`featured`
    calibrator, ordered by the last one's excess (the recommended), worst first."""
    groups = found.groups
    assert groups is not None
    names = featured(found)
    picked: dict[int, None] = {}
    for name in names:
        excess = groups.evaluations[name].report.excess_ece.nan_to_num(nan=-math.inf)
        picked.update(dict.fromkeys(excess.argsort(descending=True)[:shown].tolist()))
    last = groups.evaluations[names[-1]].report.excess_ece.nan_to_num(nan=-math.inf)
    return sorted(picked, key=lambda g: -float(last[g]))


def draw_groups(console: Any, found: Comparison, shown: int, order: list[str]) -> None:
    """The terminal's per-group section of a set (module docstring), the calibrators in
    ``order`` (the set's table's)."""
    from rich import box
    from rich.table import Table

    groups = found.groups
    if groups is None:
        return
    console.print(head_line(found), markup=False)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for head in ("calibrator", "worst group"):
        table.add_column(head, overflow="fold")
    for head in ("its ECE [95% CI]", "− TS's [95% CI]", "multical. [95% CI]"):
        table.add_column(head, justify="right", no_wrap=True)
    table.add_column("note")
    for name in _judged(found, order):
        ev = groups.evaluations[name]
        group, ece, minus, verdict = _worst_cells(groups, name)
        table.add_row(name, group, ece, minus, _ci(ev.multicalibration), verdict)
    console.print(table)
    console.print(calibrated_line(groups), markup=False)
    if shown <= 0:
        return
    console.print()
    names = featured(found)
    picked = worst_groups(found, shown)
    worst = Table(
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        title=f"the {shown} worst groups by excess under {', '.join(names)}: ECE (excess), points",
    )
    worst.add_column("group", overflow="fold")
    worst.add_column("n", justify="right")
    for name in names:
        worst.add_column(label(found, name), justify="right", no_wrap=True)
    for g in picked:
        cells = [_ece_excess(groups.evaluations[name], g) for name in names]
        worst.add_row(groups.names[g], str(groups.sizes[g]), *cells)
    console.print(worst)


def _ece_excess(ev: GroupEvaluation, g: int) -> str:
    report = ev.report
    excess = float(report.excess_ece[g])
    sign = "nan" if math.isnan(excess) else f"{100 * excess:+.1f}"
    return f"{_points(float(report.ece[g]))} ({sign})"


# ----------------------------------------------------------------------------- report
def markdown_groups(found: Comparison, order: list[str]) -> list[str]:
    """A set's per-group part of the report (module docstring), the calibrators in ``order``
    (the set's table's); ``[]`` without groups."""
    groups = found.groups
    if groups is None:
        return []
    lines = ["### Per group", "", head_line(found) + ".", ""]
    lines += [
        "Calibrated worst: what the worst of these groups shows on average under perfect "
        "calibration (the draws), and p how often it is as bad as the observed worst; "
        "multicalibration: the worst group × class cumulative calibration error "
        "(`selfcal.metrics.multicalibration_error`).",
        "",
    ]
    lines += [
        "| calibrator | worst group by ECE | its ECE (%) [95% CI] | − TS's (points) [95% CI] | "
        "calibrated worst (%) | p | worst group by excess | excess (points) [95% CI] | "
        "multicalibration (%) [95% CI] |",
        "|---|---|---|---|---:|---:|---|---|---|",
    ]
    for name in _judged(found, order):
        ev = groups.evaluations[name]
        report = ev.report
        group, ece, minus, verdict = _worst_cells(groups, name)
        cells = [
            markdown_text(label(found, name)),
            markdown_text(group),
            ece,
            minus + (f" {verdict}" if verdict else ""),
            _points(float(report.worst_null.mean())),
            p_text(report.worst_p_value, ev.n_draws),
            markdown_text(report.names[ev.worst_excess_group]),
            _ci(ev.worst_excess),
            _ci(ev.multicalibration),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", *every_group_ece(found, order), ""]
    for name in featured(found):
        lines += [*group_table(found, name), ""]
    return lines


def every_group_ece(found: Comparison, order: list[str]) -> list[str]:
    """Every group's ECE (%) under every calibrator judged per group (in ``order``), the
    groups in their order."""
    groups = found.groups
    assert groups is not None
    names = _judged(found, order)
    lines = [
        "Every group's ECE (%) under each calibrator:",
        "",
        "| group | n | " + " | ".join(map(markdown_text, names)) + " |",
        "|---|---:|" + "---:|" * len(names),
    ]
    for g, group in enumerate(groups.names):
        values = [_points(float(groups.evaluations[n].report.ece[g])) for n in names]
        lines.append(f"| {markdown_text(group)} | {groups.sizes[g]} | " + " | ".join(values) + " |")
    return lines


def group_table(found: Comparison, name: str) -> list[str]:
    """Every group under calibrator ``name``: size, accuracy, NLL, ECE, the calibrated ECE
    at its size, the excess and its p-value, the largest excess first."""
    groups = found.groups
    assert groups is not None
    report = groups.evaluations[name].report
    order = report.excess_ece.nan_to_num(nan=-math.inf).argsort(descending=True).tolist()
    lines = [
        f"Every group under {markdown_text(label(found, name))}, the largest excess first:",
        "",
        "| group | n | accuracy | NLL | ECE (%) | calibrated ECE (%) | excess (points) | p |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for g in order:
        lines.append(
            f"| {markdown_text(report.names[g])} | {int(report.size[g])} | "
            f"{float(report.accuracy[g]):.3f} | {float(report.nll[g]):.4f} | "
            f"{_points(float(report.ece[g]))} | {_points(float(report.null_ece[g]))} | "
            f"{100 * float(report.excess_ece[g]):+.1f} | "
            f"{p_text(float(report.p_value[g]), report.worst_null.shape[0])} |"
        )
    return lines
