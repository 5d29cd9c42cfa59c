"""The benchmark's report: a summary (which methods beat CE + TS, and CE followed by the
frontier's post-hoc steps, SMS and ``auto``; which post-hoc step suits CE itself), then per
dataset and regime a leaderboard sorted by post-TS ECE with paired intervals against CE, CE +
TS, CE + SMS and CE + auto, the power of each comparison, and the hyperparameters selected on
validation."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from selfcal.experiments.report import (
    cell,
    compare,
    detectable_line,
    hyperparameter_section,
    prose,
    ranks,
)
from selfcal.experiments.study import StudyResults
from selfcal.experiments.tables import Difference, columns
from selfcal.studies import _images
from selfcal.studies.benchmark import shift_report
from selfcal.studies.benchmark.protocol import (
    CANDIDATES_DOC,
    LABELS,
    REGIMES,
    REGIMES_DOC,
    SELECTION,
)

COLUMNS = columns(
    "ece_ts",
    "ece",
    "ece_iso",
    "accuracy",
    "nll",
    "nll_ts",
    "adaece",
    "classwise_ece",
    "aurc",
)
"""The leaderboard's metric columns (%, NLL raw): test scores of the selected runs."""
POSTHOC_COLUMNS = columns(
    "ece_ts", "ece_sms", "ece_auto", "nll_ts", "nll_sms", "nll_auto", "error", "error_sms"
)
"""The second table's columns: every method after each post-hoc step."""
RIVALS = (
    ("ECE − CE's", "ece", "ece", 100.0),
    ("ECE − (CE + TS)'s", "ece", "ece_ts", 100.0),
    ("ECE + TS − (CE + TS)'s", "ece_ts", "ece_ts", 100.0),
    ("ECE + SMS − (CE + SMS)'s", "ece_sms", "ece_sms", 100.0),
    ("ECE + auto − (CE + auto)'s", "ece_auto", "ece_auto", 100.0),
    ("NLL + TS − (CE + TS)'s", "nll_ts", "nll_ts", 1.0),
    ("NLL + SMS − (CE + SMS)'s", "nll_sms", "nll_sms", 1.0),
    ("NLL + auto − (CE + auto)'s", "nll_auto", "nll_auto", 1.0),
)
"""The paired comparisons against CE: (column, the method's metric, CE's metric, scale); the
first three in the leaderboard, the rest in the post-hoc table."""
FIRST_TABLE = 3
POSTHOC_STEPS = (("TS", "ts"), ("SMS", "sms"), ("auto", "auto"), ("isotonic", "iso"))
"""CE's own post-hoc steps (label, metric suffix), compared with TS in the summary."""
WORDS = {"better": "**better**", "tied": "tied", "worse": "worse"}


@dataclass
class Entry:
    """One method's leaderboard row: its paired rank by post-TS ECE, its differences against
    CE (``None`` for CE itself), and its training time relative to CE's."""

    method: str
    rank: int
    differences: tuple[Difference | None, ...]
    time_ratio: float | None


def entries(results: StudyResults, dataset: str, regime: str) -> list[Entry]:
    """Every method with runs, sorted by mean post-TS ECE."""
    methods = [m for m in results.protocol.methods if results.runs(dataset, m, regime)]
    rank = ranks(results, dataset, methods, "ece_ts", regime)
    out = []
    for m in methods:
        diffs = tuple(
            None if m == "ce" else compare(results, dataset, (m, mine), ("ce", theirs), regime)
            for _, mine, theirs, _ in RIVALS
        )
        out.append(Entry(m, rank[m], diffs, time_ratio(results, dataset, m, regime)))

    def ece_ts(entry: Entry) -> float:
        found = results.get(dataset, entry.method, "ece_ts", regime)
        return found.mean if found is not None else float("inf")

    return sorted(out, key=ece_ts)


def time_ratio(results: StudyResults, dataset: str, method: str, regime: str) -> float | None:
    """Median training seconds over seeds relative to CE's median (medians: the first run of
    each worker process also pays its warm-up)."""
    seconds = {
        m: [
            r.metrics["train_seconds"]
            for r in results.runs(dataset, m, regime)
            if "train_seconds" in r.metrics
        ]
        for m in (method, "ce")
    }
    if not seconds[method] or not seconds["ce"]:
        return None
    return statistics.median(seconds[method]) / statistics.median(seconds["ce"])


def difference_cell(diff: Difference | None, scale: float = 100.0) -> str:
    digits = 3 if scale == 1 else 2
    return "—" if diff is None else f"{diff.format(scale, digits)} {WORDS[diff.verdict()]}"


def table(results: StudyResults, dataset: str, regime: str) -> list[str]:
    """The leaderboard: raw, post-TS and post-isotonic scores, against CE and CE + TS."""
    rivals = RIVALS[:FIRST_TABLE]
    head = ["rank", "method", *(n for n, *_ in COLUMNS), "time × CE", *(n for n, *_ in rivals)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for e in entries(results, dataset, regime):
        ratio = "—" if e.time_ratio is None else f"{e.time_ratio:.2f}"
        lines.append(
            f"| {e.rank} | {LABELS[e.method]} | "
            + " | ".join(cells(results, dataset, e.method, regime, COLUMNS))
            + f" | {ratio} | "
            + " | ".join(
                difference_cell(d, r[3]) for d, r in zip(e.differences[:FIRST_TABLE], rivals)
            )
            + " |"
        )
    return lines


def posthoc_table(results: StudyResults, dataset: str, regime: str) -> list[str]:
    """Every method after TS, SMS and ``auto``, against CE with the same post-hoc step."""
    rivals = RIVALS[FIRST_TABLE:]
    head = ["method", *(n for n, *_ in POSTHOC_COLUMNS), *(n for n, *_ in rivals)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for e in entries(results, dataset, regime):
        lines.append(
            f"| {LABELS[e.method]} | "
            + " | ".join(cells(results, dataset, e.method, regime, POSTHOC_COLUMNS))
            + " | "
            + " | ".join(
                difference_cell(d, r[3]) for d, r in zip(e.differences[FIRST_TABLE:], rivals)
            )
            + " |"
        )
    return lines


def cells(results: StudyResults, dataset: str, method: str, regime: str, which: Any) -> list[str]:
    return [
        cell(results, dataset, method, metric, regime, scale, 3 if scale == 1 else 2)
        for _, metric, scale in which
    ]


# ----------------------------------------------------------------------------- summary
def verdicts(
    results: StudyResults, regime: str, column: int, verdict: str
) -> list[tuple[str, str, Difference, float]]:
    """``(dataset, method, difference, scale)`` of every method whose ``RIVALS[column]``
    comparison has ``verdict``."""
    out = []
    for d in results.datasets:
        for e in entries(results, d, regime):
            diff = e.differences[column]
            if diff is not None and diff.verdict() == verdict:
                out.append((d, e.method, diff, RIVALS[column][3]))
    return out


def listing(
    results: StudyResults, regime: str, found: list[tuple[str, str, Difference, float]]
) -> str:
    """``LABEL on DATASET (ECE difference; accuracy difference against CE)``, or ``none``."""
    if not found:
        return "none"
    out = []
    for d, m, diff, scale in found:
        accuracy = compare(results, d, (m, "accuracy"), ("ce", "accuracy"), regime)
        out.append(
            f"{LABELS[m]} on {d} ({diff.format(scale, 3 if scale == 1 else 2)}; accuracy "
            f"{'—' if accuracy is None else accuracy.format(100.0, 2)})"
        )
    return "; ".join(out)


def summary_lines(results: StudyResults) -> list[str]:
    """Per regime: who beats CE + TS without and with TS, who beats raw CE, how many are worse
    than CE + TS, and how many "better" verdicts chance alone would give."""
    lines = []
    for regime in regime_names(results):
        pairs = sum(len(entries(results, d, regime)) - 1 for d in results.datasets)
        worse = verdicts(results, regime, 2, "worse")
        better = [
            listing(results, regime, verdicts(results, regime, column, "better"))
            for column in range(len(RIVALS))
        ]
        frontier = [
            f"- better than CE + {step} with {step} applied to them too: ECE {better[ece]}; "
            f"NLL {better[ece + 3]}; worse: ECE {len(verdicts(results, regime, ece, 'worse'))}"
            f", NLL {len(verdicts(results, regime, ece + 3, 'worse'))} of {pairs}."
            for step, ece in (("SMS", 3), ("auto", 4))
        ]
        lines += [
            f"**{regime} regime** ({pairs} method × dataset pairs against CE; "
            "differences method − CE, paired 95% CI over seeds, ECE in points):",
            "",
            f"- better than CE + TS without post-hoc calibration: {better[1]}.",
            f"- better than CE + TS with TS applied to them too: ECE {better[2]}; NLL {better[5]}.",
            f"- worse than CE + TS with TS applied to them too: {len(worse)} of {pairs} "
            f"(ECE), {len(verdicts(results, regime, 5, 'worse'))} (NLL).",
            *frontier,
            f"- better than raw CE (no post-hoc calibration on either): {better[0]}.",
            f"- chance: with {pairs} uncorrected comparisons per line, about "
            f'{0.025 * pairs:.1f} "better" verdicts per line are expected even if no '
            "method differed from CE.",
            "- post-hoc fits the validation set could not identify: "
            f"{degenerate(results, regime)}.",
            "",
        ]
    return lines


def ce_posthoc_lines(results: StudyResults) -> list[str]:
    """CE's own post-hoc steps: each one's ECE and NLL minus TS's on the same runs (paired
    over seeds), per dataset and regime."""
    head = ["dataset", "regime", "CE + TS: ECE, NLL"] + [
        f"{label} − TS: ECE, NLL" for label, _ in POSTHOC_STEPS[1:]
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for d in results.datasets:
        for regime in regime_names(results):
            row = [
                d,
                regime,
                f"{cell(results, d, 'ce', 'ece_ts', regime)}, "
                f"{cell(results, d, 'ce', 'nll_ts', regime, 1.0, 3)}",
            ]
            for _, suffix in POSTHOC_STEPS[1:]:
                ece = compare(results, d, ("ce", f"ece_{suffix}"), ("ce", "ece_ts"), regime)
                nll = (
                    compare(results, d, ("ce", f"nll_{suffix}"), ("ce", "nll_ts"), regime)
                    if suffix != "iso"
                    else None
                )
                row.append(
                    f"{difference_cell(ece)}, {'—' if nll is None else difference_cell(nll, 1.0)}"
                )
            lines.append("| " + " | ".join(row) + " |")
    return lines


def degenerate(results: StudyResults, regime: str) -> str:
    """The selected runs whose post-hoc fits warned ``DegenerateCalibration`` (every validation
    prediction correct, in practice: temperature scaling then returns ``T = 1``), grouped by
    dataset and seed; or ``none``."""
    runs = results.runs(regime_name=regime)
    found: dict[tuple[str, int], list[str]] = {}
    for r in runs:
        if r.metrics.get("degenerate_fits", 0.0) > 0:
            found.setdefault((r.spec.dataset, r.spec.seed), []).append(LABELS[r.spec.method])
    if not found:
        return "none"
    groups = [
        f"{d} seed {seed} ({', '.join(m) if len(m) <= 3 else f'{len(m)} methods'})"
        for (d, seed), m in sorted(found.items())
    ]
    count = sum(map(len, found.values()))
    return (
        f"{count} of {len(runs)} runs, {'; '.join(groups)} (on a validation set where every "
        "prediction is correct, temperature scaling returns T = 1, the scores unchanged)"
    )


def regime_names(results: StudyResults) -> list[str]:
    return [r for r in REGIMES if r in results.regimes]


# ----------------------------------------------------------------------------- report
def recipe_lines(results: StudyResults) -> list[str]:
    lines = [
        "| dataset | backbone | optimizer | epochs | batch | milestones |",
        "|---|---|---|---|---|---|",
    ]
    for d in results.datasets:
        r = results.protocol.recipe(d)
        backbone = r.model if r.hidden is None else f"MLP {' × '.join(map(str, r.hidden))}"
        lines.append(
            f"| {d} | {backbone} | {r.optimizer} {r.lr:g} | {r.epochs} | "
            f"{r.batch_size or 'full'} | {', '.join(map(str, r.milestones)) or '—'} |"
        )
    return lines


def sections(results: StudyResults) -> list[str]:
    from selfcal.studies import benchmark
    from selfcal.studies.benchmark import execute

    parts = [
        "## Summary",
        "",
        *summary_lines(results),
        "**CE's own post-hoc step**: CE after SMS, `auto` and (top-label, mixed) isotonic "
        "regression, minus CE after TS, paired over seeds (ECE in points; isotonic remaps the "
        "top-label confidence only, so it has no NLL):",
        "",
        *ce_posthoc_lines(results),
        "",
        "## Stopping by refinement",
        "",
        "The `refine-stop` record minus the `early-stop` record of the same run, paired over "
        "seeds (NLL; ECE and accuracy in points): does stopping where the validation refinement "
        "loss is lowest, then recalibrating, beat stopping at the lowest validation NLL? "
        "Methods better / worse: paired 95% intervals, uncorrected.",
        "",
        *shift_report.refine_table(results),
        "",
        "## Under shift",
        "",
        *prose(shift_report.SHIFT_DOC),
        *shift_report.shift_summary_lines(results),
        "",
        "Per dataset: `shift_<dataset>_<regime>.png` plots ECE, NLL (after TS) and accuracy "
        "against severity for every method; the tables below give CE's own numbers (mean ± 95% "
        "CI over seeds, %) and the counts of methods significantly better / worse than CE + TS "
        "after the correction.",
        "",
        *shift_sections(results),
        "## Protocol",
        "",
        *prose(benchmark.__doc__),
        *prose(execute.__doc__),
        REGIMES_DOC,
        "",
        *recipe_lines(results),
        "",
        *prose(CANDIDATES_DOC),
        f"Candidates are selected per seed and regime by the {SELECTION}. Cells: mean ± "
        "95% CI half-width over seeds (% except NLL). Rank: 1 + the number of methods "
        "whose post-TS ECE is significantly lower (paired 95% t-interval). The last three "
        "columns are paired differences against CE's runs of the same seeds (ECE "
        "points): **better** / worse when the interval excludes 0, no "
        "multiple-comparison correction. time × CE: the median training time over seeds "
        "relative to CE's.",
        "",
    ]
    if not any(d in _images.CIFAR for d in results.datasets):
        parts += [
            "CIFAR-10/100 rows were not run: their files are not under `$SELFCAL_DATA` "
            "(they run with ResNet-18 and the papers' 350-epoch schedule when present).",
            "",
        ]
    for d in results.datasets:
        for regime in regime_names(results):
            parts += [
                f"## {d}, {regime} regime",
                "",
                *table(results, d, regime),
                "",
                detectable_line(results, d, "ce", list(results.protocol.methods), "ece_ts", regime),
                "",
                "After the frontier's post-hoc steps (SMS can change the predicted class: "
                "Error + SMS):",
                "",
                *posthoc_table(results, d, regime),
                "",
            ]
    note = "Tuned values and (`epochs`) the checkpoint each regime evaluated."
    return parts + hyperparameter_section(results, list(results.protocol.methods), LABELS, note)


def shift_sections(results: StudyResults) -> list[str]:
    """One table per dataset and regime: CE under shift (:func:`shift_report.shift_table`)."""
    out = []
    for d in results.datasets:
        if not shift_report.shifts(results, d):
            continue
        for regime in regime_names(results):
            out += [f"### {d} under shift, {regime} regime", ""]
            out += [*shift_report.shift_table(results, d, regime), ""]
    return out


def summary(results: StudyResults) -> list[str]:
    lines = summary_lines(results) + shift_report.shift_summary_lines(results) + [""]
    for d in results.datasets:
        for regime in regime_names(results):
            lines += [f"{d}, {regime} regime", *table(results, d, regime), ""]
    return lines


PAYLOAD_KEYS = (
    "ece_vs_ce",
    "ece_vs_ce_ts",
    "ece_ts_vs_ce_ts",
    "ece_sms_vs_ce_sms",
    "ece_auto_vs_ce_auto",
    "nll_ts_vs_ce_ts",
    "nll_sms_vs_ce_sms",
    "nll_auto_vs_ce_auto",
)
"""The payload's name of each :data:`RIVALS` comparison."""


def payload(results: StudyResults) -> dict[str, Any]:
    """``leaderboard``: per dataset and regime, every method in post-TS ECE order with its raw,
    post-TS and post-isotonic ECE (mean and 95% CI), its rank and its paired differences
    against CE and CE + TS."""
    board = []
    for d in results.datasets:
        for regime in regime_names(results):
            for e in entries(results, d, regime):
                stats = {
                    metric: results.get(d, e.method, metric, regime) for _, metric, _ in COLUMNS
                }
                board.append(
                    {
                        "dataset": d,
                        "regime": regime,
                        "method": e.method,
                        "rank": e.rank,
                        **{k: None if a is None else a.as_dict() for k, a in stats.items()},
                        "time_ratio": e.time_ratio,
                        **{
                            key: None
                            if diff is None
                            else {**diff.as_dict(), "verdict": diff.verdict()}
                            for key, diff in zip(PAYLOAD_KEYS, e.differences)
                        },
                    }
                )
    return {"leaderboard": board, **shift_report.payload(results)}
