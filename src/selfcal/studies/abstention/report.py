"""The abstention study's report: per family of sets and calibrator, each rule's violation
rate (the fraction of re-splits whose risk exceeds the target ``eps``) with its Clopper-Pearson
95% interval over the re-splits, the coverage it keeps, CRC's mean joint risk against ``eps``,
the coverage calibrating first buys at the same guarantee (paired over re-splits), and per
group (MMLU subjects) the per-subject certificates.

**Intervals.** A family's violation rate pools its sets' re-splits (each re-split of each set
is an independent Bernoulli trial given the sets): Clopper-Pearson 95% over the pooled count.
A family's mean coverage is the mean over its sets of each set's mean over re-splits; its 95%
interval is normal with the Monte-Carlo standard error ``sqrt(sum_s var_s / R) / S`` (the
sets held fixed). Paired differences use the per-set variances of the split-by-split
differences the same way. These intervals are about the re-splits, given the sets: they say
how well 1,000 re-splits pin the rates down, not how another model would behave.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
from scipy.stats import beta

from selfcal._markdown import markdown_text
from selfcal.experiments.store import RunRecord
from selfcal.experiments.study import StudyResults
from selfcal.studies._sets import linked_lines, stored_reasons
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
                cells.append(f"{pct(m)} ± {pct(half)}")
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


def holds(results: StudyResults[Any], rule_name: str) -> tuple[int, int, int, float]:
    """Over every (family, calibrator, eps, delta) cell of ``rule_name`` on i.i.d. re-splits:
    cells, cells whose rate exceeds delta, cells whose interval lies above delta, the
    largest rate."""
    p = results.protocol
    cells = above = clear = 0
    worst = 0.0
    for recs in by_family(results).values():
        fam = Family(recs, p)
        for cal in p.calibrators:
            for d in p.deltas:
                for e in p.eps:
                    v, low, _, n = fam.rate(cal, "iid", f"{rule_name}@{d:g}", e)
                    if not n:
                        continue
                    cells += 1
                    above += v > d
                    clear += low > d
                    worst = max(worst, v)
    return cells, above, clear, worst


def answer(results: StudyResults[Any]) -> list[str]:
    p = results.protocol
    d = HEADLINE_DELTA
    lines = ["## The answer", ""]
    for rule_name in ("ltt", "ltt_mapie"):
        cells, above, clear, worst = holds(results, rule_name)
        lines.append(
            f"- **{label(rule_name)}**: over {cells} (family, calibrator, ε, δ) cells of "
            f"i.i.d. re-splits, the violation rate exceeds δ in {above} "
            f"(its 95% interval lies wholly above δ in {clear}); the largest rate is "
            f"{pct(worst)}%."
        )
    for fam_name, recs in by_family(results).items():
        fam = Family(recs, p)
        cal = HEADLINE_CAL if fam.has(HEADLINE_CAL) else p.calibrators[0]
        parts = []
        for e in p.eps:
            emp_v = fam.rate(cal, "iid", "empirical", e)[0]
            split_v = fam.rate(cal, "split", "empirical", e)[0]
            emp_c = fam.mean(cal, "iid", "empirical", e, "cov")[0]
            ltt_v = fam.rate(cal, "iid", f"ltt@{d:g}", e)[0]
            ltt_c = fam.mean(cal, "iid", f"ltt@{d:g}", e, "cov")[0]
            map_c = fam.mean(cal, "iid", f"ltt_mapie@{d:g}", e, "cov")[0]
            parts.append(
                f"ε = {e:g}: empirical fails {pct(emp_v)}% (held-out half: {pct(split_v)}%) "
                f"at coverage {pct(emp_c)}%, LTT fails {pct(ltt_v)}% at {pct(ltt_c)}% "
                f"(MAPIE's regime {pct(map_c)}%)"
            )
        lines.append(
            f"- **{FAMILY_TITLES[fam_name]}** ({cal}, δ = {d:g}): " + "; ".join(parts) + "."
        )
    lines += [
        "",
        "Which rule to use: where a promise is needed, ``ltt`` (selfcal's default: every "
        "distinct confidence, multi-start fixed sequence); the coverage it gives up against "
        "the empirical rule is the price of the promise, read in the lines above. CRC "
        "bounds the joint risk P(answered and wrong), not the error rate of the answered "
        "rows: its selective risk exceeds ε in most re-splits by design.",
        "",
    ]
    return lines


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


def protocol_lines(results: StudyResults[Any]) -> list[str]:
    p = results.protocol
    return [
        "## Protocol",
        "",
        f"- Each set's validation and test rows are pooled and permuted once (seeded): the "
        f"first {p.fit_share:.3g} fits each calibrator ({', '.join(p.calibrators)}); the "
        "rest, calibrated by that fixed map, is the **population**: its empirical "
        "distribution is the true distribution of this experiment.",
        f"- **i.i.d. re-splits** ({p.resplits}): n = half the population drawn with "
        "replacement certifies a threshold per rule; the threshold's risk is read exactly on "
        "the population (selective risk among the population rows it answers; coverage the "
        "fraction it answers; joint risk P(answered and wrong)). A violation is a population "
        "selective risk above ε: exactly the event LTT bounds by δ over the certifying draw.",
        f"- **Held-out half** (the issue's protocol, {p.resplits} re-splits): the population "
        "split 50/50 without replacement; the first half certifies, the second measures. "
        "The test half's own sampling noise adds to every rule's rate, so a rule whose "
        "threshold sits exactly at risk ε fails about half the time; the calibrator is "
        "fitted once, not per split as in the issue's measurement.",
        "- Rules: the empirical rule (lowest threshold with selective accuracy at least "
        "1 − ε on the certifying rows; no promise), CRC (E[P(answered and wrong)] ≤ ε), "
        "LTT as selfcal does it (every distinct confidence, multi-start fixed sequence, "
        "exact binomial p-value; assumes the error rate non-increasing in the confidence), "
        "and LTT in MAPIE's regime (grid np.linspace(0, 0.99, 100), Holm, "
        "Hoeffding-Bentkus: no monotonicity assumption). The thresholds equal "
        "`selfcal.abstention.certify_threshold`'s (a test holds them equal).",
        f"- ε in {{{', '.join(f'{e:g}' for e in p.eps)}}}, δ in "
        f"{{{', '.join(f'{d:g}' for d in p.deltas)}}}. A re-split that certifies nothing "
        "answers nothing: coverage 0, no violation.",
        "- Cells: violation rate in % [Clopper-Pearson 95% over the pooled re-splits] · "
        "mean coverage in % ± 95% Monte-Carlo half-width.",
        "",
    ]


def sections(results: StudyResults[Any]) -> list[str]:
    return [
        *answer(results),
        *protocol_lines(results),
        "## Violation rate and coverage: i.i.d. re-splits, population risk",
        "",
        *rate_tables(results, "iid"),
        "## Violation rate and coverage: held-out half (the issue's protocol)",
        "",
        *rate_tables(results, "split"),
        "## CRC: mean joint risk P(answered and wrong) against ε (i.i.d. re-splits)",
        "",
        "CRC promises this mean is at most ε.",
        "",
        *crc_table(results),
        "## Does calibrating first buy coverage at the same guarantee?",
        "",
        "Coverage of each calibrator minus none's, in points, paired over the same "
        "re-splits (mean ± 95% Monte-Carlo half-width), i.i.d. re-splits.",
        "",
        *gain_table(results),
        *group_section(results),
        *per_set(results),
        *linked_lines(results),
    ]


def summary(results: StudyResults[Any]) -> list[str]:
    return answer(results)


def payload(results: StudyResults[Any]) -> dict[str, Any]:
    return {
        "families": {f: [r.spec.dataset for r in recs] for f, recs in by_family(results).items()}
    }
