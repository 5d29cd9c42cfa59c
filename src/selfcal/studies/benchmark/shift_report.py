"""The benchmark under shift (:data:`SHIFT_DOC`) and by stopping rule: each method's
``refine-stop`` record against its ``early-stop`` record of the same run, paired over seeds."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from selfcal.data.shift import IMAGE_CORRUPTIONS, MNIST1D_CORRUPTIONS, TABULAR_CORRUPTIONS
from selfcal.experiments.report import cell, compare, values
from selfcal.experiments.study import StudyResults
from selfcal.experiments.tables import Difference, paired
from selfcal.studies.benchmark.protocol import LABELS, REGIMES

SHIFT_DOC = """\
On every shifted test set (`selfcal.data.shift`: each corruption at severities 1-5, fixed by
seed), every method after TS against CE after TS, paired over seeds; the post-hoc maps are the
ones fitted on the clean validation split. A regime holds (methods - 1) x (test sets)
comparisons per metric, so uncorrected 95% intervals would call about 2.5% of them "better" by
chance alone: the verdicts here are Benjamini-Hochberg's at a false discovery rate of 5% over
all comparisons of a regime and metric, the clean test set's included
(`scipy.stats.false_discovery_control` on the paired t-tests' p-values), with the uncorrected
counts beside them."""
SHIFT_METRICS = (("ECE + TS", "ece_ts", 100.0), ("NLL + TS", "nll_ts", 1.0))
"""The metrics compared under shift: (label, metric, scale to the reported unit)."""
FDR = 0.05
REFERENCE = "ce"


def shifts(results: StudyResults, dataset: str) -> list[tuple[str, int]]:
    """The ``(corruption, severity)`` pairs the dataset's records were scored on."""
    runs = results.runs(dataset)
    if not runs:
        return []
    found = [
        (parts[1], int(parts[2]))
        for parts in (k.split(".") for k in runs[0].metrics)
        if parts[0] == "shift" and parts[-1] == "ece_ts"
    ]
    known = [*IMAGE_CORRUPTIONS, *TABULAR_CORRUPTIONS, *MNIST1D_CORRUPTIONS]
    order = list(dict.fromkeys([*known, *(c for c, _ in found)]))
    return sorted(set(found), key=lambda cs: (order.index(cs[0]), cs[1]))


def key(corruption: str, severity: int, metric: str) -> str:
    """The record's metric on a shifted set (severity 0: the clean test set's)."""
    return metric if severity == 0 else f"shift.{corruption}.{severity}.{metric}"


@dataclass(frozen=True)
class Comparison:
    """One method after TS against CE after TS on one shifted set, with its
    Benjamini-Hochberg adjusted p-value ``q`` (NaN below two seeds)."""

    dataset: str
    corruption: str
    severity: int
    method: str
    diff: Difference
    q: float

    def verdict(self) -> str:
        if math.isnan(self.q) or self.q >= FDR:
            return "tied"
        return "better" if self.diff.mean < 0 else "worse"


def comparisons(results: StudyResults, regime: str, metric: str) -> list[Comparison]:
    """Every (dataset, test set, method) of a regime against CE, BH-adjusted together (the
    clean test set is ``("clean", 0)``)."""
    # computed once per results object (the tables, summary and payload read them many times)
    cache = results.__dict__.setdefault("_shift_comparisons", {})
    if (regime, metric) not in cache:
        cache[regime, metric] = _comparisons(results, regime, metric)
    return cache[regime, metric]


def _comparisons(results: StudyResults, regime: str, metric: str) -> list[Comparison]:
    found = []
    for d in results.datasets:
        methods = [
            m for m in results.protocol.methods if m != REFERENCE and results.runs(d, m, regime)
        ]
        for c, s in [("clean", 0), *shifts(results, d)]:
            k = key(c, s, metric)
            for m in methods:
                diff = compare(results, d, (m, k), (REFERENCE, k), regime)
                if diff is not None:
                    found.append((d, c, s, m, diff))
    q = adjusted([diff.p_value() for *_, diff in found])
    return [Comparison(*row, qi) for row, qi in zip(found, q, strict=True)]


def adjusted(p: list[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values of the finite ``p`` (NaN stays NaN)."""
    from scipy.stats import false_discovery_control

    p_arr = np.asarray(p, dtype=np.float64)
    out = np.full_like(p_arr, math.nan)
    finite = np.isfinite(p_arr)
    if finite.any():
        out[finite] = false_discovery_control(p_arr[finite], method="bh")
    return out.tolist()


# ----------------------------------------------------------------------------- summary
def shift_summary_lines(results: StudyResults) -> list[str]:
    """Per regime and metric: how many methods beat / lose to CE + TS under shift, after the
    correction and before it, and the significant wins by method."""
    lines = []
    for regime in regimes(results):
        for label, metric, scale in SHIFT_METRICS:
            found = [c for c in comparisons(results, regime, metric) if c.severity > 0]
            if not found:
                continue
            raw = [c.diff.verdict() for c in found]
            better = [c for c in found if c.verdict() == "better"]
            worse = sum(c.verdict() == "worse" for c in found)
            lines.append(
                f"- **{regime}, {label}**: {len(found)} comparisons with CE + TS; "
                f"Benjamini-Hochberg (FDR 5%): {len(better)} better, {worse} worse; "
                f"uncorrected 95% intervals: {raw.count('better')} better, "
                f"{raw.count('worse')} worse (about {0.025 * len(found):.0f} false "
                f'"better" expected by chance alone).'
                + (f" Better: {wins(better, scale)}." if better else "")
            )
    return lines


def wins(better: list[Comparison], scale: float) -> str:
    """``Method: dataset corruption s (±diff), ...; Method: ...`` grouped by method."""
    by_method: dict[str, list[str]] = {}
    for c in better:
        digits = 3 if scale == 1.0 else 2
        by_method.setdefault(c.method, []).append(
            f"{c.dataset} {c.corruption} {c.severity} ({c.diff.mean * scale:+.{digits}f})"
        )
    return "; ".join(f"{LABELS[m]}: {', '.join(v)}" for m, v in by_method.items())


def shift_table(results: StudyResults, dataset: str, regime: str) -> list[str]:
    """Per shifted set (severity 0 first): CE's accuracy and ECE raw and after each post-hoc
    step, TS − raw, and how many methods beat / lose to CE + TS after the correction."""
    found = {metric: comparisons(results, regime, metric) for _, metric, _ in SHIFT_METRICS}
    head = [
        "corruption",
        "severity",
        "CE accuracy",
        "CE ECE raw",
        "CE + TS",
        "CE + SMS",
        "CE + auto",
        "CE: TS − raw (ECE)",
        "methods better / worse than CE + TS: ECE, NLL",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c, s in [("clean", 0), *shifts(results, dataset)]:
        ce = [
            cell(results, dataset, REFERENCE, key(c, s, m), regime)
            for m in ("accuracy", "ece", "ece_ts", "ece_sms", "ece_auto")
        ]
        ts_gain = compare(
            results,
            dataset,
            (REFERENCE, key(c, s, "ece_ts")),
            (REFERENCE, key(c, s, "ece")),
            regime,
        )
        counts = []
        for _, metric, _ in SHIFT_METRICS:
            here = [
                v.verdict()
                for v in found[metric]
                if (v.dataset, v.corruption, v.severity) == (dataset, c, s)
            ]
            counts.append(f"{here.count('better')} / {here.count('worse')}")
        gain = "—" if ts_gain is None else ts_gain.format(100.0, 2)
        lines.append(f"| {c} | {s} | " + " | ".join(ce) + f" | {gain} | {', '.join(counts)} |")
    return lines


# ----------------------------------------------------------------------------- stopping
def refine_table(results: StudyResults) -> list[str]:
    """Per dataset: CE's refine-stop record minus its early-stop record (NLL and ECE after TS,
    accuracy, the epochs each kept), and how many methods are better / worse by refine-stop."""
    head = [
        "dataset",
        "CE: NLL + TS",
        "CE: ECE + TS",
        "CE: accuracy",
        "CE epochs (early, refine)",
        "methods better / worse by refine-stop: NLL + TS, ECE + TS",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for d in results.datasets:
        diffs = {m: refine_minus_early(results, d, REFERENCE, m) for m in ("nll_ts", "ece_ts")}
        accuracy = refine_minus_early(results, d, REFERENCE, "accuracy")
        if diffs["nll_ts"] is None:
            continue
        epochs = [results.get(d, REFERENCE, "hp.epochs", r) for r in ("early-stop", "refine-stop")]
        counts = []
        for metric in ("nll_ts", "ece_ts"):
            verdicts = [
                diff.verdict()
                for m in results.protocol.methods
                if (diff := refine_minus_early(results, d, m, metric)) is not None
            ]
            counts.append(f"{verdicts.count('better')} / {verdicts.count('worse')}")
        lines.append(
            f"| {d} | {fmt(diffs['nll_ts'], 1.0)} | {fmt(diffs['ece_ts'], 100.0)} | "
            f"{fmt(accuracy, 100.0, lower_is_better=False)} | "
            + ", ".join("—" if e is None else f"{e.mean:.0f}" for e in epochs)
            + f" | {', '.join(counts)} |"
        )
    return lines


def refine_minus_early(
    results: StudyResults, dataset: str, method: str, metric: str
) -> Difference | None:
    """``metric`` of the refine-stop record minus the early-stop record, paired over seeds."""
    return paired(
        values(results, dataset, method, metric, "refine-stop"),
        values(results, dataset, method, metric, "early-stop"),
    )


def fmt(diff: Difference | None, scale: float, lower_is_better: bool = True) -> str:
    """``+0.012 [-0.003, +0.027] tied`` (scaled; **better** / worse by the interval)."""
    if diff is None:
        return "—"
    words = {"better": "**better**", "worse": "worse", "tied": "tied"}
    return f"{diff.format(scale, 3 if scale == 1.0 else 2)} {words[diff.verdict(lower_is_better)]}"


def regimes(results: StudyResults) -> list[str]:
    return [r for r in REGIMES if r in results.regimes]


# ----------------------------------------------------------------------------- payload
def payload(results: StudyResults) -> dict[str, Any]:
    """``shifted_sets``: per dataset, the (corruption, severity) pairs scored; ``shift``: every
    comparison with CE + TS (mean, CI, p, BH q, verdict); ``refine_vs_early``: per dataset and
    method, refine-stop minus early-stop on NLL + TS and ECE + TS."""
    shift_rows = [
        {
            "regime": regime,
            "metric": metric,
            "dataset": c.dataset,
            "corruption": c.corruption,
            "severity": c.severity,
            "method": c.method,
            **c.diff.as_dict(),
            "p": c.diff.p_value(),
            "q": c.q,
            "verdict": c.verdict(),
        }
        for regime in regimes(results)
        for _, metric, _ in SHIFT_METRICS
        for c in comparisons(results, regime, metric)
    ]
    refine = [
        {"dataset": d, "method": m, "metric": metric, **diff.as_dict(), "verdict": diff.verdict()}
        for d in results.datasets
        for m in results.protocol.methods
        for metric in ("nll_ts", "ece_ts")
        if (diff := refine_minus_early(results, d, m, metric)) is not None
    ]
    return {
        "regimes": regimes(results),
        "shifted_sets": {d: [list(cs) for cs in shifts(results, d)] for d in results.datasets},
        "shift": [{k: clean(v) for k, v in row.items()} for row in shift_rows],
        "refine_vs_early": refine,
    }


def clean(value: Any) -> Any:
    """NaN as ``None`` (JSON has no NaN)."""
    return None if isinstance(value, float) and math.isnan(value) else value
