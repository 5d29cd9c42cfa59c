"""The groups study's report: per family of sets, each method against temperature scaling
(TS) on the worst group's and the mean group calibration error, the marginal NLL and the
worst group's coverage by split-conformal sets.

Each set's validation and test rows are pooled and re-split at random (the same splits for
every method): half fits each method, half measures it; each number is a mean over the
family's sets and the re-splits. A group's ECE rests on its own rows, so a small group
shows a large ECE even when it is perfectly calibrated, and the worst of many groups more
still: every group number is printed beside, in parentheses, what a perfectly calibrated
model shows at those sizes (the mean over draws of correctness from the calibrated
confidences themselves), and every coverage beside the worst group's coverage when every row
is covered with probability exactly 1 − α (for Mondrian sets, when each group's threshold is
an exact split-conformal one fitted on that group's calibration rows: its coverage is then
Beta-distributed around 1 − α, wider for a group with few rows). A method is better than TS
only where it beats TS's number, not the yardstick.

**Paired intervals.** Per re-split, the difference method − TS is averaged over the family's
sets; the cell gives its mean and 95% Student-t interval over the re-splits, and after it
how many sets (each judged by its own interval over its re-splits) are better / worse than
TS. A verdict is read from the interval only: an interval that holds 0 is no evidence
either way. For the group ECEs and the NLL lower is better; for the worst coverage higher
is (at the price of larger sets).

**MMLU and noisy labels.** MMLU-Redux (Gema et al. 2024) re-annotated 100 questions of each
subject and found errors in 6.49% overall, 57% in virology: a subject can look miscalibrated
because its answer key is wrong. The MMLU numbers are also given without the subjects with
at least 10 errors in 100 (the same re-splits, those subjects' rows left out of fitting and
measuring).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any

import numpy as np

from selfcal._markdown import markdown_text
from selfcal.experiments.store import RunRecord
from selfcal.experiments.study import StudyResults
from selfcal.experiments.tables import Difference, paired
from selfcal.studies._sets import linked_lines, stored_reasons
from selfcal.studies.groups.data import (
    FAMILIES,
    FAMILY_TITLES,
    FLAGGED_RATE,
    MMLU_REDUX_ERRORS,
    flagged_subjects,
)
from selfcal.studies.groups.execute import GROUP_ROWS
from selfcal.studies.groups.protocol import BASELINE
from selfcal.studies.groups.sets import CLEAN

LABELS = {
    "none": "none",
    "ts": "TS",
    "sms": "SMS",
    "auto": "auto",
    "groupwise": "group-wise",
    "multicalibration": "multicalibration",
}
GROUP_AWARE = ("groupwise", "multicalibration")
METRICS = (
    ("worst_ece", "worst group ECE", "worst_null", True),
    ("mean_ece", "mean group ECE", "mean_null", True),
    ("nll", "marginal NLL", None, True),
    (
        "worst_coverage.marginal",
        "worst group coverage, marginal sets",
        "worst_coverage_null",
        False,
    ),
    (
        "worst_coverage.mondrian",
        "worst group coverage, Mondrian sets",
        "worst_coverage_null_mondrian",
        False,
    ),
)
"""(metric, label, its yardstick's metric, lower is better)."""
Sets = dict[str, dict[int, RunRecord]]
SYNTHETIC_NOTE = (
    "The synthetic set (`synthetic_set`): true logits N(0, 4 I) over the protocol's classes, "
    "the model overconfident by 1.5 everywhere, twice more in group A, half as much in group B, "
    "and "
    "inflating class 0 in group C; a row is in A, B, C independently with chances 0.3, 0.2, "
    "0.15 (overlapping). Mondrian sets need one group a row: here they condition on the "
    "pattern of membership (A, A+B, none, ...; each group is a union of such cells)."
)


def label(method: str) -> str:
    return LABELS.get(method, method)


def families(results: StudyResults) -> list[tuple[str, Sets]]:
    """The runs by family (in :data:`FAMILIES` order), then set, then re-split."""
    found: dict[str, Sets] = {}
    for record in sorted(results.records, key=lambda r: (r.spec.dataset, r.spec.seed)):
        family = FAMILIES[int(record.metrics["family"])]
        found.setdefault(family, {}).setdefault(record.spec.dataset, {})[record.spec.seed] = record
    return [(f, found[f]) for f in FAMILIES if f in found]


def value(record: RunRecord, metric: str, method: str | None, prefix: str = "") -> float:
    name = f"{prefix}{metric}" if method is None else f"{prefix}{metric}.{method}"
    return float(record.metrics.get(name, math.nan))


def null_of(record: RunRecord, null: str, method: str, prefix: str) -> float:
    per_method = value(record, null, method, prefix)
    return per_method if not math.isnan(per_method) else value(record, null, None, prefix)


def level(sets: Sets, metric: str, method: str, prefix: str = "", null: str | None = None) -> float:
    """The mean over the sets and re-splits of ``metric`` (or of its yardstick ``null``)."""
    values = [
        value(r, metric, method, prefix) if null is None else null_of(r, null, method, prefix)
        for runs in sets.values()
        for r in runs.values()
    ]
    finite = [v for v in values if not math.isnan(v)]
    return float(np.mean(finite)) if finite else math.nan


def difference(sets: Sets, metric: str, method: str, prefix: str = "") -> Difference | None:
    """Method − TS, averaged over the family's sets per re-split, with its t-interval over the
    re-splits (``None`` where no re-split has both)."""
    per_seed: dict[int, list[float]] = {}
    for runs in sets.values():
        for seed, r in runs.items():
            d = value(r, metric, method, prefix) - value(r, metric, BASELINE, prefix)
            if not math.isnan(d):
                per_seed.setdefault(seed, []).append(d)
    means = {s: float(np.mean(v)) for s, v in per_seed.items()}
    return paired(means, dict.fromkeys(means, 0.0)) if means else None


def set_verdicts(sets: Sets, metric: str, method: str, prefix: str, lower: bool) -> Counter[str]:
    """How many sets are better / worse / tied against TS, each by its own interval."""
    counts: Counter[str] = Counter()
    for runs in sets.values():
        mine = {s: value(r, metric, method, prefix) for s, r in runs.items()}
        theirs = {s: value(r, metric, BASELINE, prefix) for s, r in runs.items()}
        both = [s for s in mine if not (math.isnan(mine[s]) or math.isnan(theirs[s]))]
        diff = paired({s: mine[s] for s in both}, {s: theirs[s] for s in both})
        if diff is not None:
            counts[diff.verdict(lower)] += 1
    return counts


def methods_with(sets: Sets, methods: tuple[str, ...], prefix: str = "") -> list[str]:
    return [m for m in methods if not math.isnan(level(sets, "nll", m, prefix))]


def level_table(sets: Sets, methods: list[str], prefix: str = "") -> list[str]:
    head = " | ".join(f"{text} (calibrated)" if null else text for _, text, null, _ in METRICS)
    lines = [f"| method | {head} |", "|---|" + "---:|" * len(METRICS)]
    for m in methods:
        cells = []
        for metric, _, null, _ in METRICS:
            v = level(sets, metric, m, prefix)
            if math.isnan(v):
                cells.append("—")
                continue
            shown = f"{v:.4f}"
            if null is not None:
                shown += f" ({level(sets, metric, m, prefix, null):.4f})"
            cells.append(shown)
        lines.append(f"| {label(m)} | " + " | ".join(cells) + " |")
    return lines


def paired_table(sets: Sets, methods: list[str], prefix: str = "") -> list[str]:
    lines = [
        "| method − TS | " + " | ".join(text for _, text, _, _ in METRICS) + " |",
        "|---|" + "---|" * len(METRICS),
    ]
    for m in methods:
        if m == BASELINE:
            continue
        cells = []
        for metric, _, _, lower in METRICS:
            diff = difference(sets, metric, m, prefix)
            if diff is None:
                cells.append("—")
                continue
            cell = f"{diff.format(digits=4)} {diff.verdict(lower)}"
            if len(sets) > 1:
                counts = set_verdicts(sets, metric, m, prefix, lower)
                cell += (
                    f"; sets {counts['better']} better / {counts['worse']} worse of "
                    f"{sum(counts.values())}"
                )
            cells.append(cell)
        lines.append(f"| {label(m)} | " + " | ".join(cells) + " |")
    return lines


def not_fitted(results: StudyResults, sets: Sets, prefix: str = "") -> list[str]:
    """A line per method that could not be fitted somewhere: in how many runs, and why."""
    reasons: dict[str, Counter[str]] = {}
    for runs in sets.values():
        for r in runs.values():
            for name, why in stored_reasons(results, r).items():
                if name.startswith(prefix) and (prefix or not name.startswith(CLEAN)):
                    reasons.setdefault(name.removeprefix(prefix), Counter())[why] += 1
    lines = []
    for name, counts in reasons.items():
        why, n = counts.most_common(1)[0]
        lines.append(
            f"- {label(name)}: not fitted in {sum(counts.values())} runs ({markdown_text(why)})."
        )
    return ["Not fitted:", "", *lines, ""] if lines else []


def group_means(
    results: StudyResults, runs: dict[int, RunRecord], method: str
) -> np.ndarray | None:
    """A method's ``(4, G)`` per-group array (:data:`GROUP_ROWS`), mean over the re-splits."""
    arrays = [
        results.store.artefact(r.key, f"groups.{method}")
        for r in runs.values()
        if f"groups.{method}" in r.artefacts
    ]
    return np.nanmean(np.stack(arrays), 0) if arrays else None


def subject_table(
    results: StudyResults, name: str, runs: dict[int, RunRecord], methods: list[str]
) -> list[str]:
    """The MMLU subjects of one set whose ECE under TS most exceeds the calibrated yardstick:
    MMLU-Redux's errors, the ECE of each method, and TS's coverage by marginal and Mondrian
    sets (means over the re-splits)."""
    first = next(iter(runs.values()))
    names = json.loads(results.store.artefact(first.key, "group_names").tobytes().decode("utf-8"))
    per = {m: group_means(results, runs, m) for m in methods}
    ts = per.get(BASELINE)
    if ts is None:
        return []
    ece, null = ts[GROUP_ROWS.index("ece")], ts[GROUP_ROWS.index("null_ece")]
    shown = [m for m in methods if per[m] is not None]
    lines = [
        f"The 12 subjects of **{markdown_text(name)}** whose ECE under TS most exceeds what a "
        "calibrated model shows at their size (means over the re-splits):",
        "",
        "| subject | MMLU-Redux errors / 100 | calibrated ECE | "
        + " | ".join(f"ECE {label(m)}" for m in shown)
        + " | TS coverage: marginal | TS coverage: Mondrian |",
        "|---|---:|---:|" + "---:|" * len(shown) + "---:|---:|",
    ]
    for g in np.argsort(-(ece - null), kind="stable")[:12]:
        cells = [f"{per[m][0, g]:.3f}" for m in shown]  # type: ignore[index]
        lines.append(
            f"| {markdown_text(names[g])} | {MMLU_REDUX_ERRORS.get(names[g], '—')} | "
            f"{null[g]:.3f} | " + " | ".join(cells) + f" | {ts[2, g]:.3f} | {ts[3, g]:.3f} |"
        )
    return lines


def class_order_line(sets: Sets) -> list[str]:
    observed = [
        r.metrics.get("errors_within_group", math.nan)
        for runs in sets.values()
        for r in runs.values()
    ]
    chance = [
        r.metrics.get("chance_within_group", math.nan)
        for runs in sets.values()
        for r in runs.values()
    ]
    if all(math.isnan(v) for v in observed):
        return []
    return [
        "The class order checked: of the models' wrong top predictions, "
        f"{np.nanmean(observed):.1%} fall in the true class's group (mean over the sets), "
        f"against {np.nanmean(chance):.1%} if a wrong prediction picked any other class at "
        "random: the map matches the sets' class order.",
        "",
    ]


def family_section(results: StudyResults, family: str, sets: Sets, prefix: str = "") -> list[str]:
    methods = methods_with(sets, results.protocol.methods, prefix)
    n_splits = max(len(runs) for runs in sets.values())
    out = [
        *not_fitted(results, sets, prefix),
        f"Means over {len(sets)} set(s) and {n_splits} re-splits; in parentheses, a perfectly "
        "calibrated model at the same sizes:",
        "",
        *level_table(sets, methods, prefix),
        "",
        "Against TS (paired over the re-splits):",
        "",
        *paired_table(sets, methods, prefix),
        "",
    ]
    return out


def versus_ts(sets: Sets, method: str, prefix: str) -> str:
    """``group-wise: worst group ECE −0.0123 [−0.0150, −0.0096] better, marginal NLL ...``."""
    parts = []
    for metric, text in (("worst_ece", "worst group ECE"), ("nll", "marginal NLL")):
        diff = difference(sets, metric, method, prefix)
        if diff is not None:
            parts.append(f"{text} {diff.format(digits=4)} {diff.verdict()}")
    return f"{label(method)} − TS: " + ", ".join(parts)


def answer(family: str, sets: Sets, methods: tuple[str, ...], prefix: str = "") -> str:
    """The plain answer for one family, from the intervals only: the worst group's ECE and
    coverage before (none) and after TS, beside the calibrated yardstick; which methods beat
    TS on the worst group's ECE, at what change in marginal NLL; the group-aware methods'
    differences from TS."""
    fitted = methods_with(sets, methods, prefix)

    def at(metric: str, method: str, null: str | None = None) -> str:
        return f"{level(sets, metric, method, prefix, null):.4f}"

    said = [
        f"worst group ECE {at('worst_ece', 'none')} without calibration, "
        f"{at('worst_ece', BASELINE)} after TS (a calibrated model shows "
        f"{at('worst_ece', BASELINE, 'worst_null')} at these sizes)"
    ]
    winners = []
    for m in fitted:
        worst = difference(sets, "worst_ece", m, prefix)
        if m not in (BASELINE, "none") and worst is not None and worst.verdict() == "better":
            winners.append(label(m))
    said.append(
        f"better than TS on it: {', '.join(winners)}" if winners else "nothing beats TS on it"
    )
    said += [versus_ts(sets, m, prefix) for m in GROUP_AWARE if m in fitted]
    said += [f"{label(m)} not fitted" for m in GROUP_AWARE if m in methods and m not in fitted]
    cover = (
        f"worst group coverage at α = 0.1: marginal sets {at('worst_coverage.marginal', 'none')}"
        f" (none) / {at('worst_coverage.marginal', BASELINE)} (TS), Mondrian-by-group sets "
        f"{at('worst_coverage.mondrian', BASELINE)} (TS); exact coverage 1 − α in every group "
        f"shows {at('worst_coverage.marginal', BASELINE, 'worst_coverage_null')}, an exact "
        f"Mondrian predictor at these calibration sizes "
        f"{at('worst_coverage.mondrian', BASELINE, 'worst_coverage_null_mondrian')}"
    )
    return f"- {FAMILY_TITLES[family]} ({len(sets)} set(s)): " + "; ".join([*said, cover]) + "."


def sections(results: StudyResults) -> list[str]:
    from selfcal.experiments.report import prose

    out = [*prose(__doc__), "", "## The answer, per family", "", *summary(results), ""]
    out += ["![Group calibration error per method](group_ece.png)", ""]
    for family, sets in families(results):
        names = ", ".join(markdown_text(n) for n in sets)
        out += [f"## {FAMILY_TITLES[family]}", "", f"Sets: {names}.", ""]
        out += class_order_line(sets)
        if family == "synthetic":
            out += [SYNTHETIC_NOTE, ""]
        out += family_section(results, family, sets)
        if family == "mmlu":
            flagged = ", ".join(flagged_subjects())
            out += [
                f"### Without the subjects MMLU-Redux flags (at least {FLAGGED_RATE} errors in "
                "100)",
                "",
                f"Left out: {flagged}.",
                "",
                *family_section(results, family, sets, CLEAN),
                "### Each subject",
                "",
            ]
            methods = methods_with(sets, results.protocol.methods)
            for name, runs in sets.items():
                out += [*subject_table(results, name, runs, methods), ""]
    return out + linked_lines(results)


def summary(results: StudyResults) -> list[str]:
    lines = []
    methods = results.protocol.methods
    for family, sets in families(results):
        lines.append(answer(family, sets, methods))
        if family == "mmlu":
            clean = answer(family, sets, methods, CLEAN).removeprefix("- ")
            lines.append(f"- Without MMLU-Redux's flagged subjects -- {clean}")
    return lines


def payload(results: StudyResults) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for family, sets in families(results):
        out[family] = {
            m: {metric: level(sets, metric, m) for metric, *_ in METRICS}
            for m in methods_with(sets, results.protocol.methods)
        }
    return out
