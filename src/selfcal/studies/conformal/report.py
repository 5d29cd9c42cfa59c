"""The conformal study's report.

Every stored run is one prediction set. Its post-hoc step (none, temperature scaling TS or
structured matrix scaling SMS) is fitted on its validation predictions; its test predictions
are halved at random many times (the protocol's ``halvings``: 20 in ``full``; the same
halvings for every method of a dataset and seed), one half calibrating a split-conformal
predictor and the other scored, and each metric is the mean over the halvings. **Set size** is
the average number of labels in a set; **worst-class coverage** the lowest per-class coverage.
Every set has coverage at least ``1 - alpha`` by construction (the first table checks it), so a
smaller set at the same ``alpha`` is the better set.

Comparisons are paired 95% t-intervals over seeds (a seed is a replicate of the data split,
the initialisation and the selection; the halvings are averaged within it): (a) each training
method against cross-entropy (CE) with the same post-hoc step, and (b) TS and SMS against no
post-hoc step on the same model. **smaller** / **larger** when the interval of the set-size
difference excludes 0 (for worst-class coverage: **higher** / **lower**), **tied** otherwise;
no correction for multiple comparisons, so about 2.5% of comparisons land on each side by
chance when nothing differs.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

from selfcal.experiments.selection import regime as regime_of
from selfcal.experiments.store import RunRecord
from selfcal.experiments.study import StudyResults
from selfcal.experiments.tables import Difference, paired
from selfcal.studies.conformal.execute import key

MAIN_ALPHA = 0.1
"""The level of the detailed tables (every level is counted in the summaries)."""
REFERENCE = "ce"
"""The training method the others are compared with."""
WORDS = {
    "size": {"better": "smaller", "worse": "larger", "tied": "tied"},
    "worst_class_coverage": {"better": "higher", "worse": "lower", "tied": "tied"},
}
LOWER_IS_BETTER = {"size": True, "worst_class_coverage": False}
SHOWN = ("size", "worst_class_coverage")
TITLES = {"size": "set size", "worst_class_coverage": "worst-class coverage"}


def regimes(results: StudyResults) -> list[str]:
    return sorted({regime_of(r) for r in results.records})


class RegimeRecords(list[RunRecord]):
    """One regime's records, in store order, and the study results they come from (whose
    :meth:`~selfcal.experiments.study.StudyResults.runs` looks them up by dataset and method)."""

    def __init__(self, results: StudyResults, regime_name: str) -> None:
        super().__init__(r for r in results.records if regime_of(r) == regime_name)
        self.results, self.regime = results, regime_name


def _records(results: StudyResults, regime_name: str) -> RegimeRecords:
    return RegimeRecords(results, regime_name)


def by_seed(records: RegimeRecords, dataset: str, method: str, metric: str) -> dict:
    """``{seed: metric}`` of one (dataset, method) in the records' regime."""
    runs = records.results.runs(dataset, method, records.regime, candidates=True)
    return {r.spec.seed: r.metrics[metric] for r in runs if metric in r.metrics}


def _cell(d: Difference | None, metric: str) -> str:
    if d is None:
        return "—"
    scale, digits = (1.0, 3) if metric == "size" else (100.0, 2)
    verdict = WORDS[metric][d.verdict(LOWER_IS_BETTER[metric])]
    shown = f"**{verdict}**" if verdict != "tied" else "tied"
    return f"{d.format(scale, digits)} {shown}"


def posthoc_difference(
    records: RegimeRecords,
    dataset: str,
    method: str,
    step: str,
    name: str,
    alpha: float,
    metric: str,
) -> Difference | None:
    """``step`` − no post-hoc step, same model (b)."""
    mine = by_seed(records, dataset, method, key(metric, step, name, alpha))
    base = by_seed(records, dataset, method, key(metric, "none", name, alpha))
    return paired(mine, base)


def method_difference(
    records: RegimeRecords,
    dataset: str,
    method: str,
    step: str,
    name: str,
    alpha: float,
    metric: str,
) -> Difference | None:
    """``method`` − CE, same post-hoc step (a)."""
    k = key(metric, step, name, alpha)
    return paired(by_seed(records, dataset, method, k), by_seed(records, dataset, REFERENCE, k))


def _grid(results: StudyResults, records: RegimeRecords) -> tuple[list[str], list[str]]:
    datasets = sorted({r.spec.dataset for r in records})
    methods = list(dict.fromkeys(r.spec.method for r in sorted(records, key=_method_order)))
    return datasets, methods


def _method_order(r: RunRecord) -> tuple[int, str]:
    return (0 if r.spec.method == REFERENCE else 1, r.spec.method)


def coverage_table(results: StudyResults, records: RegimeRecords) -> list[str]:
    p = results.protocol
    head = "| post-hoc | score | " + " | ".join(f"α = {a:g}: mean [min]" for a in p.alphas) + " |"
    lines = [head, "|---|---|" + "---|" * len(p.alphas)]
    for step in p.posthoc:
        for name in p.score_names:
            cells = []
            for alpha in p.alphas:
                vals = [
                    r.metrics[k]
                    for r in records
                    if (k := key("coverage", step, name, alpha)) in r.metrics
                ]
                cells.append(f"{sum(vals) / len(vals):.4f} [{min(vals):.4f}]" if vals else "—")
            lines.append(f"| {step} | {name} | " + " | ".join(cells) + " |")
    return lines


def counts(diffs: Iterable[Difference | None], metric: str) -> Counter:
    found: Counter = Counter()
    for d in diffs:
        if d is not None and d.n > 1:
            found[WORDS[metric][d.verdict(LOWER_IS_BETTER[metric])]] += 1
    return found


def _count_text(c: Counter, metric: str) -> str:
    better, worse = WORDS[metric]["better"], WORDS[metric]["worse"]
    total = sum(c.values())
    return f"{c[better]} {better}, {c[worse]} {worse}, {c['tied']} tied of {total}"


def posthoc_section(results: StudyResults, records: RegimeRecords) -> list[str]:
    p = results.protocol
    datasets, methods = _grid(results, records)
    steps = [s for s in p.posthoc if s != "none"]
    out = [f"### (b) Post-hoc calibration vs none, same model (α = {MAIN_ALPHA:g})", ""]
    for metric in SHOWN:
        ref = REFERENCE if REFERENCE in methods else methods[0]
        cols = [f"{s.upper()} − none ({ref})" for s in steps]
        cols += [f"{s.upper()} − none, all methods" for s in steps]
        out += [f"**{TITLES[metric]}**" + (" (points)" if metric != "size" else ""), ""]
        out += ["| dataset | score | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
        for d in datasets:
            for name in p.score_names:
                cells = [
                    _cell(posthoc_difference(records, d, ref, s, name, MAIN_ALPHA, metric), metric)
                    for s in steps
                ]
                for s in steps:
                    c = counts(
                        (
                            posthoc_difference(records, d, m, s, name, MAIN_ALPHA, metric)
                            for m in methods
                        ),
                        metric,
                    )
                    cells.append(_count_text(c, metric))
                out.append(f"| {d} | {name} | " + " | ".join(cells) + " |")
        out.append("")
    out += ["Every level, score, dataset and method:", ""]
    out += [f"- {line}" for line in posthoc_totals(results, records)]
    return [*out, ""]


def posthoc_totals(results: StudyResults, records: RegimeRecords) -> list[str]:
    p = results.protocol
    datasets, methods = _grid(results, records)
    lines = []
    for step in (s for s in p.posthoc if s != "none"):
        for metric in SHOWN:
            c = counts(
                (
                    posthoc_difference(records, d, m, step, name, a, metric)
                    for d in datasets
                    for m in methods
                    for name in p.score_names
                    for a in p.alphas
                ),
                metric,
            )
            lines.append(f"{step.upper()} − none, {TITLES[metric]}: {_count_text(c, metric)}.")
    return lines


def method_section(results: StudyResults, records: RegimeRecords) -> list[str]:
    p = results.protocol
    datasets, methods = _grid(results, records)
    if REFERENCE not in methods:
        return ["### (a) Training methods vs CE", "", "No CE runs in this protocol.", ""]
    out = [f"### (a) Training methods vs CE, same post-hoc step (α = {MAIN_ALPHA:g})", ""]
    shown = [(m, n) for n in p.score_names[:2] for m in ("size",)] + [
        ("worst_class_coverage", p.score_names[min(1, len(p.score_names) - 1)])
    ]
    for step in p.posthoc:
        for metric, name in shown:
            unit = " (points)" if metric != "size" else ""
            out += [f"**{TITLES[metric]}{unit}, post-hoc {step}, score {name}**: method − CE", ""]
            out += ["| method | " + " | ".join(datasets) + " |", "|---|" + "---|" * len(datasets)]
            for m in methods[1:]:
                cells = [
                    _cell(method_difference(records, d, m, step, name, MAIN_ALPHA, metric), metric)
                    for d in datasets
                ]
                out.append(f"| {m} | " + " | ".join(cells) + " |")
            out.append("")
    out += ["Every level, score, post-hoc step and dataset:", ""]
    out += [f"- {line}" for line in method_totals(results, records)]
    return [*out, ""]


def method_totals(results: StudyResults, records: RegimeRecords) -> list[str]:
    p = results.protocol
    datasets, methods = _grid(results, records)
    lines = []
    for metric in SHOWN:
        for step in p.posthoc:
            c = counts(
                (
                    method_difference(records, d, m, step, name, a, metric)
                    for d in datasets
                    for m in methods[1:]
                    for name in p.score_names
                    for a in p.alphas
                ),
                metric,
            )
            lines.append(
                f"method − CE, post-hoc {step}, {TITLES[metric]}: {_count_text(c, metric)}."
            )
    return lines


def by_score(results: StudyResults, records: RegimeRecords, step: str) -> str:
    """``step`` − none, set size, counted per score over datasets, methods and levels."""
    p = results.protocol
    datasets, methods = _grid(results, records)
    parts = []
    for name in p.score_names:
        c = counts(
            (
                posthoc_difference(records, d, m, step, name, a, "size")
                for d in datasets
                for m in methods
                for a in p.alphas
            ),
            "size",
        )
        parts.append(f"{name} {c['smaller']} smaller / {c['larger']} larger / {c['tied']} tied")
    return "; ".join(parts)


def smaller_than_ce(results: StudyResults, records: RegimeRecords, step: str) -> list[str]:
    """Every (method, dataset, score, level) whose sets are significantly smaller than CE's
    with the same post-hoc ``step``, largest reduction first."""
    p = results.protocol
    datasets, methods = _grid(results, records)
    found = []
    for d in datasets:
        for m in methods[1:]:
            for name in p.score_names:
                for a in p.alphas:
                    diff = method_difference(records, d, m, step, name, a, "size")
                    if diff is not None and diff.n > 1 and diff.verdict() == "better":
                        found.append(
                            (diff.mean, f"{m} on {d} ({name}, α = {a:g}: {diff.format()})")
                        )
    return [text for _, text in sorted(found)]


def answer(results: StudyResults) -> list[str]:
    """The plain answer, per regime, from the verdicts' counts (every level, score, dataset
    and method)."""
    lines = []
    for regime in regimes(results):
        records = _records(results, regime)
        datasets, methods = _grid(results, records)
        head = f"**{regime or 'scikit-learn models'}**"
        for step in (s for s in results.protocol.posthoc if s != "none"):
            lines.append(
                f"- {head}, {step.upper()} − none (same model), set size by score: "
                f"{by_score(results, records, step)}."
            )
        if REFERENCE not in methods:
            continue
        for step in results.protocol.posthoc:
            c = counts(
                (
                    method_difference(records, d, m, step, name, a, "size")
                    for d in datasets
                    for m in methods[1:]
                    for name in results.protocol.score_names
                    for a in results.protocol.alphas
                ),
                "size",
            )
            smaller = smaller_than_ce(results, records, step)
            shown = "; ".join(smaller[:6]) + (
                f"; and {len(smaller) - 6} more" if len(smaller) > 6 else ""
            )
            lines.append(
                f"- {head}, training method − CE with post-hoc {step}, set size: "
                f"{_count_text(c, 'size')}" + (f" -- smaller: {shown}." if smaller else ".")
            )
        lines.append(f"- {head}, " + per_method(results, records, "ts"))
    return lines


def per_method(results: StudyResults, records: RegimeRecords, step: str) -> str:
    """Each training method's set-size verdicts against CE with post-hoc ``step``, counted
    over datasets, scores and levels."""
    p = results.protocol
    datasets, methods = _grid(results, records)
    parts = []
    for m in methods[1:]:
        c = counts(
            (
                method_difference(records, d, m, step, name, a, "size")
                for d in datasets
                for name in p.score_names
                for a in p.alphas
            ),
            "size",
        )
        parts.append(f"{m} {c['smaller']}/{c['larger']}")
    return (
        f"set size against CE with post-hoc {step}, per method (smaller/larger of "
        f"{len(datasets) * len(p.score_names) * len(p.alphas)}): " + ", ".join(parts) + "."
    )


def sections(results: StudyResults) -> list[str]:
    from selfcal.experiments.report import prose

    out = [*prose(__doc__), "", "## Answer", "", *answer(results), ""]
    for regime in regimes(results):
        records = _records(results, regime)
        out += [f"## Regime: {regime or 'scikit-learn models'}", ""]
        out += [
            "### Coverage (each set's guarantee is 1 − α)",
            "",
            *coverage_table(results, records),
            "",
        ]
        out += posthoc_section(results, records)
        out += method_section(results, records)
    return out


def summary(results: StudyResults) -> list[str]:
    return answer(results)


def payload(results: StudyResults) -> dict[str, Any]:
    p = results.protocol
    out: dict[str, Any] = {}
    for regime in regimes(results):
        records = _records(results, regime)
        datasets, methods = _grid(results, records)
        rows = []
        for d in datasets:
            for m in methods:
                for step in p.posthoc:
                    for name in p.score_names:
                        for a in p.alphas:
                            row: dict[str, Any] = {
                                "dataset": d,
                                "method": m,
                                "posthoc": step,
                                "score": name,
                                "alpha": a,
                            }
                            for metric in SHOWN:
                                diff = posthoc_difference(records, d, m, step, name, a, metric)
                                row[f"{metric}_vs_none"] = (
                                    None if diff is None or step == "none" else diff.as_dict()
                                )
                            vals = by_seed(records, d, m, key("size", step, name, a))
                            row["size"] = sum(vals.values()) / len(vals) if vals else math.nan
                            rows.append(row)
        out[regime or "sklearn"] = rows
    return {"conformal": out}
