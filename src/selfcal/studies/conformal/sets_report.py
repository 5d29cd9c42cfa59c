"""The report of the conformal study on prediction sets (``selfcal reproduce conformal --sets
DIR``).

Each set is one model's validation and test predictions. A post-hoc step -- none (the
model's softmax), temperature scaling (TS), structured matrix scaling (SMS) or ``auto`` -- is
fitted on the validation split; the test split is halved at random 20 times (the same
halvings for every step, and for every set of as many rows), one half calibrating a
split-conformal predictor and the other scored; each number is the mean over the halvings.
Sets are grouped into **families** by their number of classes. Every predictor covers at
least ``1 - α`` of the rows on average by construction, so at the same ``α`` a smaller
**set size** is the better predictor; the tables give, per step, the mean over the family's
sets and each set's change from no step (how many sets' sets shrink, and the range).

For sets with **groups** (the MMLU subject of each question) the marginal guarantee says
nothing about a group: each group's **coverage** is the fraction of its scored rows whose
set holds the label, pooled over the halvings, under the marginal LAC predictor and under a
**Mondrian-by-group** one (each group's threshold from its own calibration rows, so each group
is covered at ``1 - α`` on average, at the price of larger sets -- every label, where a group
has too few calibration rows for ``α``). A group's coverage rests on a few dozen rows a
halving, so the worst of 57 groups lies below ``1 - α`` by chance alone.

A step that could not be fitted on a set, and a level ``α`` a set's calibration halves are too
small for (a threshold needs at least ``1/α − 1`` rows: 99 at α = 0.01), have no numbers there
(a line under the family's heading says which and why): the means are over the other sets, and
a cell no set has is ``—``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from selfcal._markdown import markdown_text
from selfcal.experiments.store import RunRecord
from selfcal.experiments.study import StudyResults
from selfcal.studies._sets import linked_lines, stored_reasons
from selfcal.studies.conformal.execute import key
from selfcal.studies.conformal.sets import GROUPED, LEVEL

MAIN_ALPHA = 0.1
STEPS = {"none": "none", "ts": "TS", "sms": "SMS", "auto": "auto"}


def families(results: StudyResults) -> list[tuple[int, list[RunRecord]]]:
    by_count: dict[int, list[RunRecord]] = {}
    for record in sorted(results.records, key=lambda r: r.spec.dataset):
        by_count.setdefault(int(record.metrics["n_classes"]), []).append(record)
    return sorted(by_count.items(), key=lambda item: -item[0])


def column(records: list[RunRecord], metric: str) -> np.ndarray:
    return np.array([r.metrics.get(metric, math.nan) for r in records])


def coverage_table(results: StudyResults, records: list[RunRecord]) -> list[str]:
    protocol = results.protocol
    alphas = protocol.alphas
    lines = [
        "| step | score | " + " | ".join(f"α = {a:g}: mean [min]" for a in alphas) + " |",
        "|---|---|" + "---|" * len(alphas),
    ]
    for step in protocol.posthoc:
        for score in protocol.score_names:
            cells = []
            for alpha in alphas:
                values = column(records, key("coverage", step, score, alpha))
                cells.append(
                    "—"
                    if np.isnan(values).all()
                    else f"{np.nanmean(values):.4f} [{np.nanmin(values):.4f}]"
                )
            lines.append(f"| {STEPS.get(step, step)} | {score} | " + " | ".join(cells) + " |")
    return lines


def size_table(results: StudyResults, records: list[RunRecord], alpha: float) -> list[str]:
    """Per step and score: the mean set size over the sets, and each set's change from no
    step."""
    protocol = results.protocol
    lines = [
        "| step | score | set size (mean) | − none's: sets smaller / larger | − none's: "
        "mean [min, max] |",
        "|---|---|---|---|---|",
    ]
    for step in protocol.posthoc:
        for score in protocol.score_names:
            size = column(records, key("size", step, score, alpha))
            if np.isnan(size).all():
                continue
            diff = size - column(records, key("size", "none", score, alpha))
            diff = diff[~np.isnan(diff)]
            if step == "none" or not len(diff):
                change = "— | —"
            else:
                change = (
                    f"{int((diff < 0).sum())} / {int((diff > 0).sum())} | {np.mean(diff):+.3f} "
                    f"[{np.min(diff):+.3f}, {np.max(diff):+.3f}]"
                )
            mean = f"{np.nanmean(size):.3f}"
            lines.append(f"| {STEPS.get(step, step)} | {score} | {mean} | {change} |")
    return lines


def group_names(record: RunRecord) -> tuple[list[str], np.ndarray] | None:
    """The set's group names (sorted, as the executor coded them) and each group's test rows,
    read from the set again; ``None`` when it is no longer there."""
    from selfcal.studies._sets import spec_set

    try:
        data = spec_set(record.spec)
    except (OSError, ValueError):
        return None
    if data.test_groups is None:
        return None
    names, counts = np.unique(data.test_groups, return_counts=True)
    return [str(g) for g in names], counts


def group_table(results: StudyResults, record: RunRecord, alpha: float) -> list[str]:
    """One set with groups: per step, each predictor's worst group and how many groups fall
    below ``1 - α``."""
    found = group_names(record)
    names = found[0] if found else None
    lines = [
        f"**{markdown_text(record.spec.dataset)}** ({int(record.metrics['n_groups'])} groups), "
        f"α = {alpha:g}:",
        "",
        "| step | predictor | worst group: coverage | groups below 1 − α | set size |",
        "|---|---|---|---|---|",
    ]
    for step in fitted_steps(results, record):
        coverage = results.store.artefact(record.key, f"group_coverage.{step}.{alpha:g}")
        for i, predictor in enumerate(GROUPED):
            worst = int(np.nanargmin(coverage[i]))
            label = markdown_text(names[worst]) if names else f"group {worst}"
            below = int((coverage[i] < 1 - alpha).sum())
            size = record.metrics[key("group_size", step, predictor, alpha)]
            lines.append(
                f"| {STEPS.get(step, step)} | {predictor} | {label}: {coverage[i, worst]:.3f} "
                f"| {below} | {size:.3f} |"
            )
    return lines


def per_group_table(results: StudyResults, record: RunRecord, alpha: float) -> list[str]:
    """Every group of one set: its test rows and its coverage under each step's marginal
    predictor and Mondrian-by-group one (pooled over the halvings, which score half the rows
    each), lowest marginal coverage without a post-hoc step first."""
    found = group_names(record)
    steps = fitted_steps(results, record)
    coverage = {
        step: results.store.artefact(record.key, f"group_coverage.{step}.{alpha:g}")
        for step in steps
    }
    n_groups = coverage[steps[0]].shape[1]
    names = found[0] if found else [f"group {g}" for g in range(n_groups)]
    rows = found[1] if found else np.full(n_groups, -1)
    shown = [STEPS.get(step, step) for step in steps]
    lines = [
        f"Each group of **{markdown_text(record.spec.dataset)}**, α = {alpha:g}: coverage under "
        "the marginal "
        "predictor, then under the Mondrian-by-group one.",
        "",
        "| group | test rows | "
        + " | ".join(f"marginal: {s}" for s in shown)
        + " | "
        + " | ".join(f"Mondrian: {s}" for s in shown)
        + " |",
        "|---|---:|" + "---:|" * (2 * len(steps)),
    ]
    for g in np.argsort(coverage[steps[0]][0], kind="stable"):
        cells = [f"{coverage[step][i, g]:.3f}" for i in range(len(GROUPED)) for step in steps]
        lines.append(f"| {markdown_text(names[g])} | {rows[g]} | " + " | ".join(cells) + " |")
    return lines


def fitted_steps(results: StudyResults, record: RunRecord) -> list[str]:
    """The post-hoc steps fitted on ``record``'s set (a step that failed stored no numbers)."""
    return [s for s in results.protocol.posthoc if f"failed.{s}" not in record.metrics]


def not_fitted(results: StudyResults, records: list[RunRecord]) -> list[str]:
    """A line naming the steps that could not be fitted on ``records``' sets: per set, the
    steps of each reason; nothing where every step was fitted on every set."""
    parts = []
    for record in records:
        stored = stored_reasons(results, record)
        by_reason: dict[str, list[str]] = {}
        for step in results.protocol.posthoc:
            if f"failed.{step}" in record.metrics:
                why = stored.get(step, "reason not stored")
                by_reason.setdefault(why, []).append(STEPS.get(step, step))
        name = markdown_text(record.spec.dataset)
        for why, steps in by_reason.items():
            parts.append(f"{', '.join(steps)} on {name} ({markdown_text(why)})")
    lines = ["Not fitted: " + "; ".join(parts) + ".", ""] if parts else []
    return lines + levels_left_out(results, records)


def levels_left_out(results: StudyResults, records: list[RunRecord]) -> list[str]:
    """A line naming, per set, the levels its calibration halves are too small for, and why."""
    parts = [
        f"α = {level.removeprefix(LEVEL)} on {markdown_text(record.spec.dataset)} "
        f"({markdown_text(why)})"
        for record in records
        for level, why in stored_reasons(results, record).items()
        if level.startswith(LEVEL)
    ]
    return ["Not computed: " + "; ".join(parts) + ".", ""] if parts else []


def sections(results: StudyResults) -> list[str]:
    from selfcal.experiments.report import prose

    out = [*prose(__doc__), ""]
    for n_classes, records in families(results):
        sets = ", ".join(markdown_text(r.spec.dataset) for r in records)
        out += [f"## {n_classes} classes: {len(records)} sets", "", f"Sets: {sets}.", ""]
        out += not_fitted(results, records)
        out += ["### Coverage (each predictor's guarantee is 1 − α)", ""]
        out += [*coverage_table(results, records), ""]
        for alpha in results.protocol.alphas:
            out += [f"### Set size, α = {alpha:g}", "", *size_table(results, records, alpha), ""]
        grouped = [r for r in records if "n_groups" in r.metrics]
        if grouped:
            out += ["### Coverage of each group", ""]
            for record in grouped:
                for alpha in results.protocol.alphas:
                    out += [*group_table(results, record, alpha), ""]
            for record in grouped:
                out += [*per_group_table(results, record, MAIN_ALPHA), ""]
    return out + linked_lines(results)


def summary(results: StudyResults) -> list[str]:
    """Per family, at α = 0.1: how many sets' LAC sets TS, SMS and auto shrink."""
    lines = []
    for n_classes, records in families(results):
        parts = []
        for step in results.protocol.posthoc[1:]:
            diff = column(records, key("size", step, "lac", MAIN_ALPHA)) - column(
                records, key("size", "none", "lac", MAIN_ALPHA)
            )
            diff = diff[~np.isnan(diff)]
            if len(diff):
                parts.append(
                    f"{STEPS.get(step, step)} shrinks LAC sets on {int((diff < 0).sum())} of "
                    f"{len(diff)} sets (mean {np.mean(diff):+.3f})"
                )
        said = "; ".join(parts) or "no post-hoc step was fitted on any set (the report says why)"
        lines.append(f"- {n_classes} classes, α = {MAIN_ALPHA:g}: {said}.")
    return lines


def payload(results: StudyResults) -> dict[str, Any]:
    return {
        f"{n_classes} classes": {
            r.spec.dataset: {k: v for k, v in r.metrics.items() if not k.startswith("n_")}
            for r in records
        }
        for n_classes, records in families(results)
    }
