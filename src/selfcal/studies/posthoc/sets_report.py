"""The report of the leaderboard on prediction sets (``selfcal reproduce posthoc --sets DIR``).

Each set is one model's validation and test predictions: every calibrator is fitted on the
validation split and scored on the test split. Sets are grouped into **families** by their
number of classes (sets of one family usually share a task and often their test rows). For
each calibrator against temperature scaling (TS): on **each set**, whether its test NLL is
significantly lower (**better**), higher (worse) or neither (tied) -- a paired 95% bootstrap
interval over the set's test rows (1,000 resamples, centred) -- and over the family: the
**win rate** (the fraction of sets where its test NLL is lower, CalArena's statistic) and the
mean difference from TS of the test NLL, Brier score and 15-bin ECE. A family's intervals
resample the test rows, the same resample for every set of a size -- jointly, where sets share
their test rows -- so they say how sure the numbers are for these models on test sets like
these, not for other models. The differences' intervals are centred; the win rate's is the
percentile interval of the resampled win rates, which are fractions of sets, so it stays in
[0, 1] (the centred interval, moved to sit on the point, can leave it). A calibrator that could
not be fitted on a set of the family is not in its table; the line under the table says on
which sets and why. Fit times are medians over the family's sets, in one process on one
thread, beside other work: read them as ratios.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from selfcal._markdown import markdown_text
from selfcal.experiments.store import RunRecord
from selfcal.experiments.study import StudyResults
from selfcal.experiments.tables import Difference
from selfcal.metrics.bootstrap import interval_bounds
from selfcal.posthoc.compare import BASELINE, SCORES
from selfcal.studies._sets import linked_lines, stored_reasons
from selfcal.studies.posthoc.execute import AUTO_NAMES
from selfcal.studies.posthoc.protocol import REFERENCE

VERDICT = {"better": "**better**", "worse": "worse", "tied": "tied"}


@dataclass(frozen=True)
class Family:
    """The sets of one class count: their records and resampled scores."""

    n_classes: int
    records: list[RunRecord]
    replicates: list[np.ndarray]

    @property
    def name(self) -> str:
        return f"{self.n_classes} classes"

    def column(self, metric: str, calibrator: str) -> np.ndarray:
        key = f"{metric}.{calibrator}"
        return np.array([r.metrics.get(key, math.nan) for r in self.records])

    def resampled(self, calibrator: str, score: str) -> np.ndarray | None:
        """``(sets, R)`` resampled ``score`` of ``calibrator``; ``None`` unless every set has it."""
        j = SCORES.index(score)
        out = []
        for record, reps in zip(self.records, self.replicates):
            index = record.metrics.get(f"replicate.{calibrator}")
            if index is None:
                return None
            out.append(reps[int(index), j])
        return np.stack(out).astype(np.float64)


@dataclass(frozen=True)
class Row:
    """One calibrator against TS on a family."""

    calibrator: str
    sets: int
    better: int
    worse: int
    win_rate: Difference
    scores: dict[str, Difference]
    seconds: float


def families(results: StudyResults) -> list[Family]:
    """The sets by class count, largest count first."""
    by_count: dict[int, list[RunRecord]] = {}
    for record in sorted(results.records, key=lambda r: r.spec.dataset):
        by_count.setdefault(int(record.metrics["n_classes"]), []).append(record)
    return [
        Family(c, records, [results.store.artefact(r.key, "replicates") for r in records])
        for c, records in sorted(by_count.items(), key=lambda item: -item[0])
    ]


def centred(values: np.ndarray, point: float, method: str = "centred") -> Difference:
    """``point`` with the ``method`` 95% interval of its resampled ``values`` (centred, or
    ``"percentile"`` for a win rate: :func:`~selfcal.metrics.bootstrap.interval_bounds`)."""
    bounds = interval_bounds(torch.from_numpy(values), torch.tensor(point), 0.95, method)
    low, high = (float(bound) for bound in bounds)
    return Difference(point, low, high, len(values), float(values.std()))


def row(family: Family, calibrator: str) -> Row | None:
    """``calibrator`` against TS on ``family``; ``None`` where some set lacks it."""
    nll = family.column("nll", calibrator)
    resampled = {s: family.resampled(calibrator, s) for s in SCORES}
    base = {s: family.resampled(BASELINE, s) for s in SCORES}
    if np.isnan(nll).any() or any(v is None for v in (*resampled.values(), *base.values())):
        return None
    scores = {}
    for score in SCORES:
        diff = family.column(score, calibrator) - family.column(score, BASELINE)
        mine, theirs = resampled[score], base[score]
        assert mine is not None and theirs is not None  # checked above
        scores[score] = centred((mine - theirs).mean(0), float(diff.mean()))
        if score == "nll":
            resampled_wins = ((mine < theirs) + 0.5 * (mine == theirs)).mean(0)
            wins = centred(resampled_wins, win_rate(nll, family), "percentile")
    low, high = family.column("nll_low", calibrator), family.column("nll_high", calibrator)
    return Row(
        calibrator,
        len(nll),
        int((high < 0).sum()),
        int((low > 0).sum()),
        wins,
        scores,
        float(np.median(family.column("seconds", calibrator))),
    )


def win_rate(nll: np.ndarray, family: Family) -> float:
    """The fraction of sets where ``nll`` is below TS's (a tie counts one half)."""
    base = family.column("nll", BASELINE)
    return float(((nll < base) + 0.5 * (nll == base)).mean())


def rows(family: Family, calibrators: Sequence[str]) -> list[Row]:
    """Every calibrator every set of ``family`` has, by win rate."""
    found = [r for r in (row(family, name) for name in calibrators) if r is not None]
    return sorted(found, key=lambda r: (-r.win_rate.mean, r.calibrator))


def table(family: Family, found: list[Row]) -> list[str]:
    ts = next(r.seconds for r in found if r.calibrator == BASELINE)
    lines = [
        f"**{family.name}**: {len(family.records)} prediction sets "
        f"({', '.join(markdown_text(r.spec.dataset) for r in family.records)}).",
        "",
        "| calibrator | sets better / tied / worse than TS | win rate vs TS | NLL − TS's | "
        "vs TS | Brier − TS's (×100) | ECE − TS's (points) | median fit (ms) | × TS's time |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in found:
        nll = r.scores["nll"]
        verdict = "reference" if r.calibrator == BASELINE else VERDICT[nll.verdict()]
        tied = r.sets - r.better - r.worse
        lines.append(
            f"| {r.calibrator} | {r.better} / {tied} / {r.worse} | {rate(r.win_rate)} | "
            f"{nll.format(1.0, 4)} | {verdict} | {r.scores['brier'].format(100.0, 2)} | "
            f"{r.scores['ece'].format(100.0, 2)} | {1e3 * r.seconds:.1f} | "
            f"{r.seconds / ts:.1f} |"
        )
    return lines


def rate(d: Difference) -> str:
    return f"{d.mean:.2f} [{d.low:.2f}, {d.high:.2f}]"


def auto_lines(family: Family) -> list[str]:
    """What ``auto`` chose, and on which sets it is worse than TS."""
    if any("auto.chosen" not in r.metrics for r in family.records):
        return []
    counts: dict[str, int] = {}
    for r in family.records:
        name = AUTO_NAMES[int(r.metrics["auto.chosen"])]
        counts[name] = counts.get(name, 0) + 1
    picks = ", ".join(f"{n} {c}" for n, c in sorted(counts.items(), key=lambda x: (-x[1], x[0])))
    worse = [markdown_text(r.spec.dataset) for r in family.records if r.metrics["nll_low.auto"] > 0]
    better = sum(r.metrics["nll_high.auto"] < 0 for r in family.records)
    return [
        "",
        f"`auto` chose: {picks}. Against TS it is significantly better on {better} of "
        f"{len(family.records)} sets and significantly worse on {len(worse)}"
        + (f" ({', '.join(worse)})." if worse else "."),
    ]


def per_set(families_: list[Family]) -> list[str]:
    """Every set: ``auto``'s choice and its test NLL against TS's, and SMS's."""
    lines = [
        "**Each set**: test NLL of TS, and of `auto` and SMS minus TS's (paired 95% interval "
        "over the set's test rows).",
        "",
        "| set | classes | validation / test rows | TS | `auto` chose | `auto` − TS | SMS − TS |",
        "|---|---|---|---|---|---|---|",
    ]
    for family in families_:
        for r in family.records:
            m = r.metrics
            chosen = AUTO_NAMES[int(m["auto.chosen"])] if "auto.chosen" in m else "—"
            lines.append(
                f"| {markdown_text(r.spec.dataset)} | {family.n_classes} | {int(m['n_val'])} / "
                f"{int(m['n_test'])} | {m['nll.ts']:.4f} | {chosen} | {difference(m, 'auto')} "
                f"| {difference(m, 'sms')} |"
            )
    return lines


def difference(metrics: dict[str, float], name: str) -> str:
    if f"nll.{name}" not in metrics:
        return "—"
    point = metrics[f"nll.{name}"] - metrics["nll.ts"]
    low, high = metrics[f"nll_low.{name}"], metrics[f"nll_high.{name}"]
    mark = " better" if high < 0 else " worse" if low > 0 else ""
    return f"{point:+.4f} [{low:+.4f}, {high:+.4f}]{mark}"


def calibrators(results: StudyResults) -> list[str]:
    names = list(results.protocol.calibrators)
    return names + [REFERENCE] if results.protocol.reference else names


def sections(results: StudyResults) -> list[str]:
    from selfcal.experiments.report import prose

    found = families(results)
    out = [*prose(__doc__), ""]
    for family in found:
        shown = rows(family, calibrators(results))
        out += [*table(family, shown), *not_fitted(results, family, shown), *auto_lines(family)]
        out.append("")
    return out + per_set(found) + groups_unused(found) + linked_lines(results)


def groups_unused(families_: list[Family]) -> list[str]:
    """The sets with groups (the ``n_groups`` metric): the leaderboard does not use them."""
    grouped = [
        f"{markdown_text(r.spec.dataset)} ({int(r.metrics['n_groups'])} groups)"
        for family in families_
        for r in family.records
        if "n_groups" in r.metrics
    ]
    if not grouped:
        return []
    return [
        "",
        f"Sets with groups: {', '.join(grouped)}. This leaderboard judges each calibrator on the "
        "whole test split and does not use the groups; `selfcal compare SET` reports each "
        "calibrator per group (the worst group's ECE with an interval, the multicalibration "
        "error).",
    ]


def not_fitted(results: StudyResults, family: Family, shown: list[Row]) -> list[str]:
    """A line for each calibrator left out of ``family``'s table because it could not be fitted
    on some of its sets: which sets, and why (each distinct reason once)."""
    in_table = {r.calibrator for r in shown}
    reasons = {r.key: stored_reasons(results, r) for r in family.records}
    parts = []
    for name in calibrators(results):
        failed = [r for r in family.records if f"failed.{name}" in r.metrics]
        if name in in_table or not failed:
            continue
        sets = ", ".join(markdown_text(r.spec.dataset) for r in failed)
        why = dict.fromkeys(reasons[r.key].get(name, "reason not stored") for r in failed)
        parts.append(
            f"{name} on {len(failed)} of {len(family.records)} sets ({sets}: "
            f"{'; '.join(map(markdown_text, why))})"
        )
    return (
        ["", "Not in the table, as not fitted on every set: " + "; ".join(parts) + "."]
        if parts
        else []
    )


def summary(results: StudyResults) -> list[str]:
    """Per family: the top calibrator by win rate, and ``auto``, SMS against TS."""
    lines = []
    for family in families(results):
        found = {r.calibrator: r for r in rows(family, calibrators(results))}
        top = max(found.values(), key=lambda r: r.win_rate.mean)
        parts = [f"top win rate {top.calibrator} {rate(top.win_rate)}"]
        for name in ("auto", "sms"):
            if name in found:
                r = found[name]
                parts.append(
                    f"{name} better than TS on {r.better} sets, worse on {r.worse}, NLL − TS's "
                    f"{r.scores['nll'].format(1.0, 4)}"
                )
        lines.append(f"- {family.name} ({len(family.records)} sets): " + "; ".join(parts) + ".")
    return lines


def payload(results: StudyResults) -> dict[str, Any]:
    return {
        family.name: {
            r.calibrator: {
                "sets": r.sets,
                "sets_better_than_ts": r.better,
                "sets_worse_than_ts": r.worse,
                "win_rate": r.win_rate.as_dict(),
                **{f"{s}_minus_ts": d.as_dict() for s, d in r.scores.items()},
                "median_fit_seconds": r.seconds,
            }
            for r in rows(family, calibrators(results))
        }
        for family in families(results)
    }
