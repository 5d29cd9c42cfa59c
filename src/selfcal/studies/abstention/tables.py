"""The abstention study's tables, pooled per family of sets: each rule's violation rate with
its Clopper-Pearson interval and the coverage it keeps, CRC's joint risk, the paired
coverage gain of calibrating first, the per-group certificates and the per-set lines (the
intervals are stated in :mod:`selfcal.studies.abstention.report`)."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
from scipy.stats import beta

from selfcal._markdown import markdown_text
from selfcal.experiments.store import RunRecord
from selfcal.experiments.study import StudyResults
from selfcal.studies._sets import stored_reasons
from selfcal.studies.abstention.execute import GROUP_ROWS, key, rule_configs, rule_key

FAMILIES = ("cifar10", "cifar100", "mmlu", "synthetic", "other")
FAMILY_TITLES = {
    "cifar10": "CIFAR-10",
    "cifar100": "CIFAR-100",
    "mmlu": "MMLU (Llama-3.1-8B base and instruct)",
    "synthetic": "synthetic",
    "other": "other sets",
}
RULE_TITLES = {"empirical": "empirical", "crc": "CRC", "ltt": "LTT", "ltt_mapie": "LTT, MAPIE"}
HEADLINE_DELTA = 0.05
HEADLINE_CAL = "ts"


def family(name: str) -> str:
    lowered = name.lower()
    for fam in ("mmlu", "cifar100", "cifar10", "synthetic"):
        if fam in lowered:
            return fam
    return "other"


def by_family(results: StudyResults[Any]) -> dict[str, list[RunRecord]]:
    out: dict[str, list[RunRecord]] = {}
    for record in sorted(results.records, key=lambda r: r.spec.dataset):
        if record.status == "done":
            out.setdefault(family(record.spec.dataset), []).append(record)
    return {f: out[f] for f in FAMILIES if f in out}


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    a = (1 - level) / 2
    low = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - a, k + 1, n - k))
    return low, high


def label(rule: str) -> str:
    name, _, delta = rule.partition("@")
    return RULE_TITLES[name] + (f" δ={delta}" if delta else "")


class Family:
    """One family's records and the protocol's settings, with its pooled numbers."""

    def __init__(self, records: list[RunRecord], protocol: Any) -> None:
        self.records = records
        self.r = protocol.resplits

    def has(self, cal: str) -> list[RunRecord]:
        return [r for r in self.records if f"{cal}|accuracy" in r.metrics]

    def rate(self, cal: str, kind: str, rule: str, eps: float) -> tuple[float, float, float, int]:
        recs = self.has(cal)
        k = int(sum(r.metrics[key(cal, kind, rule, eps, "viol")] for r in recs))
        n = self.r * len(recs)
        low, high = clopper_pearson(k, n) if n else (math.nan, math.nan)
        return (k / n if n else math.nan), low, high, len(recs)

    def mean(self, cal: str, kind: str, rule: str, eps: float, name: str) -> tuple[float, float]:
        """Mean over sets and its 95% Monte-Carlo half-width (module doc)."""
        recs = [r for r in self.has(cal) if key(cal, kind, rule, eps, name) in r.metrics]
        if not recs:
            return math.nan, math.nan
        means = [r.metrics[key(cal, kind, rule, eps, name)] for r in recs]
        var = sum(r.metrics[key(cal, kind, rule, eps, name + "_var")] for r in recs)
        return float(np.mean(means)), 1.96 * math.sqrt(var / self.r) / len(recs)


def pct(x: float) -> str:
    return "–" if math.isnan(x) else f"{100 * x:.1f}"


def rate_cell(fam: Family, cal: str, kind: str, rule: str, eps: float) -> str:
    v, low, high, n = fam.rate(cal, kind, rule, eps)
    if not n:
        return "–"
    cov, half = fam.mean(cal, kind, rule, eps, "cov")
    return f"{pct(v)} [{pct(low)}, {pct(high)}] · {pct(cov)} ± {pct(half)}"


def rules_of(protocol: Any) -> list[str]:
    return [rule_key(r, d) for r, d in rule_configs(protocol)]


def rate_tables(results: StudyResults[Any], kind: str) -> list[str]:
    p = results.protocol
    lines = []
    for fam_name, recs in by_family(results).items():
        fam = Family(recs, p)
        lines += [
            f"### {FAMILY_TITLES[fam_name]} ({len(recs)} sets)",
            "",
            "| calibrator | rule | " + " | ".join(f"ε = {e:g}" for e in p.eps) + " |",
            "|---|---|" + "---|" * len(p.eps),
        ]
        for cal in p.calibrators:
            for rule in rules_of(p):
                cells = [rate_cell(fam, cal, kind, rule, e) for e in p.eps]
                lines.append(f"| {cal} | {label(rule)} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def crc_table(results: StudyResults[Any]) -> list[str]:
    p = results.protocol
    lines = [
        "| family | calibrator | " + " | ".join(f"ε = {e:g}" for e in p.eps) + " |",
        "|---|---|" + "---|" * len(p.eps),
    ]
    for fam_name, recs in by_family(results).items():
        fam = Family(recs, p)
        for cal in p.calibrators:
            cells = []
            for e in p.eps:
                m, half = fam.mean(cal, "iid", "crc", e, "joint")
                cells.append("–" if math.isnan(m) else f"{100 * m:.2f} ± {100 * half:.2f}")
            lines.append(f"| {FAMILY_TITLES[fam_name]} | {cal} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def gain_table(results: StudyResults[Any]) -> list[str]:
    p = results.protocol
    lines = [
        "| family | calibrator | rule | " + " | ".join(f"ε = {e:g}" for e in p.eps) + " |",
        "|---|---|---|" + "---|" * len(p.eps),
    ]
    rules = [r for r in rules_of(p) if r.startswith("ltt")] + ["empirical"]
    for fam_name, recs in by_family(results).items():
        fam = Family(recs, p)
        for cal in p.calibrators[1:]:
            for rule in rules:
                cells = []
                for e in p.eps:
                    m, half = fam.mean(cal, "iid", rule, e, "dcov")
                    cells.append("–" if math.isnan(m) else f"{100 * m:+.1f} ± {pct(half)}")
                lines.append(
                    f"| {FAMILY_TITLES[fam_name]} | {cal} | {label(rule)} | "
                    + " | ".join(cells)
                    + " |"
                )
    return [*lines, ""]


def group_section(results: StudyResults[Any]) -> list[str]:
    p = results.protocol
    lines: list[str] = []
    for record in sorted(results.records, key=lambda r: r.spec.dataset):
        if record.status != "done" or "groups" not in record.artefacts:
            continue
        table = results.artefact(record, "groups")
        names = json.loads(results.artefact(record, "group_names").tobytes().decode("utf-8"))
        n = p.group_resplits
        rows, viol, cov, none = (table[GROUP_ROWS.index(x)] for x in GROUP_ROWS)
        never = int(np.sum(none == n))
        mostly = int(np.sum(none > n / 2))
        certified = n - none
        pooled_k, pooled_n = int(viol.sum()), int(certified.sum())
        low, high = clopper_pearson(pooled_k, pooled_n) if pooled_n else (math.nan, math.nan)
        lines += [
            f"### {markdown_text(record.spec.dataset)} ({p.group_calibrator}, ε = "
            f"{p.group_eps:g}, δ = {p.group_delta:g}, {len(names)} groups, {n} re-splits)",
            "",
            f"{never} groups certify nothing in every re-split, {mostly} in more than half. "
            f"Pooled over groups and re-splits, the violation rate is "
            f"{pct(pooled_k / max(n * len(names), 1))}% of all (group, re-split) pairs "
            f"[{pct(clopper_pearson(pooled_k, n * len(names))[0])}, "
            f"{pct(clopper_pearson(pooled_k, n * len(names))[1])}]; among the certified "
            f"pairs {pct(pooled_k / max(pooled_n, 1))}% [{pct(low)}, {pct(high)}]. "
            "A group's violation rate counts a re-split that certifies nothing as no "
            "violation (nothing answered).",
            "",
            "| group | population rows | violation rate [95%] | mean coverage "
            "| certifies nothing |",
            "|---|---|---|---|---|",
        ]
        for g in np.argsort(-viol / n, kind="stable"):
            lo, hi = clopper_pearson(int(viol[g]), n)
            lines.append(
                f"| {markdown_text(names[g])} | {int(rows[g])} | {pct(viol[g] / n)} "
                f"[{pct(lo)}, {pct(hi)}] | {pct(cov[g])} | {pct(none[g] / n)}% |"
            )
        lines.append("")
    return ["## Per group", "", *lines] if lines else []


def per_set(results: StudyResults[Any]) -> list[str]:
    p = results.protocol
    e = 0.05 if 0.05 in p.eps else p.eps[0]
    d = HEADLINE_DELTA
    lines = [
        f"## Per set (ts, ε = {e:g}, δ = {d:g}, i.i.d. re-splits)",
        "",
        "| set | accuracy | empirical: fails / coverage | LTT: fails / coverage | "
        "LTT MAPIE: fails / coverage | not fitted |",
        "|---|---|---|---|---|---|",
    ]
    for record in sorted(results.records, key=lambda r: r.spec.dataset):
        if record.status != "done":
            continue
        m = record.metrics
        cal = HEADLINE_CAL if f"{HEADLINE_CAL}|accuracy" in m else p.calibrators[0]
        cells = []
        for rule in ("empirical", f"ltt@{d:g}", f"ltt_mapie@{d:g}"):
            v = m[key(cal, "iid", rule, e, "viol")] / p.resplits
            cells.append(f"{pct(v)}% / {pct(m[key(cal, 'iid', rule, e, 'cov')])}%")
        reasons = stored_reasons(results, record)
        lines.append(
            f"| {markdown_text(record.spec.dataset)} | {pct(m[f'{cal}|accuracy'])} | "
            + " | ".join(cells)
            + f" | {markdown_text(', '.join(sorted(reasons))) or '–'} |"
        )
    return [*lines, ""]
