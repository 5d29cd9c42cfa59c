"""The post-hoc leaderboard's report.

Every prediction set is one row of evidence: a calibrator *wins* against temperature scaling
(TS) on a set when its test NLL is lower (a tie counts one half); its **win rate** is the
fraction of sets it wins -- CalArena's statistic (Berta et al., 2026). Beside it, the mean
difference from TS of the test NLL, Brier score and 15-bin ECE, and the median fit time.
Intervals are 95% cluster-bootstrap intervals: the sets drawn from one data split (one dataset
and seed: the benchmark's 13 methods x 2 regimes, or the four scikit-learn models) are
resampled together (2,000 resamples, centred intervals), since they share their validation and
test rows. A calibrator is **better** / **worse** than TS when the interval of its NLL
difference excludes 0; no correction for multiple comparisons. Task types: binary or
multiclass, and a small (fewer than 1,000 rows) or large validation split; each is shown
pooled, then by source where it has both. "auto vs the best candidate" compares ``auto`` with
the candidate of its own list that has the lowest mean NLL on the group's sets -- chosen
after seeing the test scores, so a bar no selection rule can be expected to clear.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from selfcal.experiments.study import StudyResults
from selfcal.experiments.tables import Difference
from selfcal.metrics.bootstrap import interval_bounds
from selfcal.studies.posthoc.execute import AUTO_NAMES
from selfcal.studies.posthoc.protocol import REFERENCE

LARGE = 1000
"""Validation rows from which a set counts as large (in the module doc)."""
N_RESAMPLES = 2000
"""Cluster-bootstrap resamples (in the module doc)."""
REFERENCE_CALIBRATOR = "ts"
TASKS: dict[str, Callable[[dict[str, float]], bool]] = {
    "binary, small validation": lambda m: m["n_classes"] == 2 and m["n_val"] < LARGE,
    "binary, large validation": lambda m: m["n_classes"] == 2 and m["n_val"] >= LARGE,
    "multiclass, small validation": lambda m: m["n_classes"] > 2 and m["n_val"] < LARGE,
    "multiclass, large validation": lambda m: m["n_classes"] > 2 and m["n_val"] >= LARGE,
}
SOURCES = {
    "the benchmark's networks": lambda method: method.startswith("nn:"),
    "scikit-learn models": lambda method: not method.startswith("nn:"),
}


@dataclass(frozen=True)
class Row:
    """One calibrator against TS on a group of sets."""

    calibrator: str
    sets: int
    win_rate: Difference
    nll: Difference
    brier: Difference
    ece: Difference
    seconds: float


@dataclass(frozen=True)
class Group:
    """The sets of one task type (and source): their metrics and data-split clusters."""

    name: str
    metrics: list[dict[str, float]]
    clusters: np.ndarray

    def column(self, metric: str, calibrator: str) -> np.ndarray:
        key = f"{metric}.{calibrator}"
        return np.array([m.get(key, math.nan) for m in self.metrics], dtype=np.float64)


def groups(results: StudyResults) -> list[Group]:
    """Every task type with sets, pooled over sources, then split by source."""
    records = results.records
    out = []
    for task, is_task in TASKS.items():
        for source, is_source in (("", lambda _: True), *SOURCES.items()):
            chosen = [r for r in records if is_task(r.metrics) and is_source(r.spec.method)]
            if chosen and (not source or len(chosen) < len(_task(records, is_task))):
                ids: dict[tuple[str, int], int] = {}
                clusters = np.array(
                    [ids.setdefault((r.spec.dataset, r.spec.seed), len(ids)) for r in chosen]
                )
                name = f"{task} ({source})" if source else task
                out.append(Group(name, [r.metrics for r in chosen], clusters))
    return out


def _task(records: Sequence[Any], is_task: Callable[[dict[str, float]], bool]) -> list[Any]:
    return [r for r in records if is_task(r.metrics)]


def cluster_weights(clusters: np.ndarray, seed: int = 0) -> np.ndarray:
    """``(N_RESAMPLES, n_sets)``: how often each set is drawn when the clusters are
    resampled with replacement."""
    k = int(clusters.max()) + 1
    rng = np.random.default_rng(seed)
    counts = np.stack([np.bincount(rng.integers(0, k, k), minlength=k) for _ in range(N_RESAMPLES)])
    return counts[:, clusters].astype(np.float64)


def bootstrap_mean(values: np.ndarray, weights: np.ndarray) -> Difference:
    """Mean of ``values`` (NaN rows left out) with its centred cluster-bootstrap interval."""
    keep = ~np.isnan(values)
    v, w = values[keep], weights[:, keep]
    if not len(v):
        return Difference(math.nan, math.nan, math.nan, 0, math.nan)
    point = float(v.mean())
    total = w.sum(1)
    resampled = (w @ v)[total > 0] / total[total > 0]
    low, high = interval_bounds(torch.from_numpy(resampled), torch.tensor(point), 0.95)
    return Difference(point, float(low), float(high), len(v), float(resampled.std()))


def rows(group: Group, calibrators: Sequence[str]) -> list[Row]:
    """Each calibrator with results in ``group`` against TS, sorted by win rate."""
    weights = cluster_weights(group.clusters)
    base = {m: group.column(m, REFERENCE_CALIBRATOR) for m in ("nll", "brier", "ece")}
    out = []
    for name in calibrators:
        nll = group.column("nll", name)
        if np.isnan(nll).all():
            continue
        wins = np.where(nll < base["nll"], 1.0, np.where(nll == base["nll"], 0.5, 0.0))
        wins[np.isnan(nll) | np.isnan(base["nll"])] = math.nan
        diffs = {m: group.column(m, name) - base[m] for m in base}
        seconds = group.column("seconds", name)
        out.append(
            Row(
                name,
                int((~np.isnan(nll)).sum()),
                bootstrap_mean(wins, weights),
                bootstrap_mean(diffs["nll"], weights),
                bootstrap_mean(diffs["brier"], weights),
                bootstrap_mean(diffs["ece"], weights),
                float(np.nanmedian(seconds)) if not np.isnan(seconds).all() else math.nan,
            )
        )
    return sorted(out, key=lambda r: (-r.win_rate.mean, r.calibrator))


def calibrators(results: StudyResults) -> list[str]:
    names = list(results.protocol.calibrators)
    return names + [REFERENCE] if results.protocol.reference else names


VERDICT = {"better": "**better**", "worse": "worse", "tied": "tied"}


def table(group: Group, found: list[Row]) -> list[str]:
    ts = next((r.seconds for r in found if r.calibrator == REFERENCE_CALIBRATOR), math.nan)
    lines = [
        f"**{group.name}**: {len(group.metrics)} prediction sets from "
        f"{int(group.clusters.max()) + 1} data splits.",
        "",
        "| calibrator | sets | win rate vs TS | NLL − TS's | vs TS | Brier − TS's (×100) | "
        "ECE − TS's (points) | median fit (ms) | × TS's time |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in found:
        verdict = "reference" if r.calibrator == REFERENCE_CALIBRATOR else VERDICT[r.nll.verdict()]
        lines.append(
            f"| {r.calibrator} | {r.sets} | {rate(r.win_rate)} | {r.nll.format(1.0, 4)} "
            f"| {verdict} | {r.brier.format(100.0, 2)} | "
            f"{r.ece.format(100.0, 2)} | {1e3 * r.seconds:.1f} | {r.seconds / ts:.1f} |"
        )
    return lines


def rate(d: Difference) -> str:
    """``0.62 [0.55, 0.70]``."""
    return f"{d.mean:.2f} [{d.low:.2f}, {d.high:.2f}]"


def auto_lines(group: Group, found: list[Row]) -> list[str]:
    """What ``auto`` chose, and its NLL against the candidate with the lowest mean NLL."""
    chosen = [m["auto.chosen"] for m in group.metrics if "auto.chosen" in m]
    if not chosen:
        return []
    counts: dict[str, int] = {}
    for index in chosen:
        name = AUTO_NAMES[int(index)]
        counts[name] = counts.get(name, 0) + 1
    picks = ", ".join(f"{n} {c}" for n, c in sorted(counts.items(), key=lambda x: -x[1]))
    singles = [r for r in found if r.calibrator in AUTO_NAMES]
    best = min(singles, key=lambda r: r.nll.mean)
    weights = cluster_weights(group.clusters)
    diff = bootstrap_mean(
        group.column("nll", "auto") - group.column("nll", best.calibrator), weights
    )
    return [
        "",
        f"`auto` chose: {picks}. Its NLL − that of {best.calibrator} (the candidate with the "
        f"lowest mean NLL here): {diff.format(1.0, 4)} → {diff.verdict()}"
        + (" (auto significantly worse)." if diff.verdict() == "worse" else "."),
    ]


def sections(results: StudyResults) -> list[str]:
    names = calibrators(results)
    out = [*prose(__doc__), ""]
    for group in groups(results):
        found = rows(group, names)
        out += [*table(group, found), *auto_lines(group, found), ""]
    return out


def prose(text: str | None) -> list[str]:
    from selfcal.experiments.report import prose as as_markdown

    return as_markdown(text)


def summary(results: StudyResults) -> list[str]:
    """Per task type (all sources): the top calibrator by win rate, and SMS, auto and TS-mix
    against TS."""
    names = calibrators(results)
    lines = []
    for group in groups(results):
        if "(" in group.name:
            continue
        found = {r.calibrator: r for r in rows(group, names)}
        top = max(found.values(), key=lambda r: r.win_rate.mean)
        parts = [f"top win rate {top.calibrator} {rate(top.win_rate)}"]
        for name in ("sms", "auto", "ts-mix"):
            if name in found:
                r = found[name]
                parts.append(
                    f"{name} win rate {r.win_rate.mean:.2f}, NLL − TS's "
                    f"{r.nll.format(1.0, 4)} {r.nll.verdict()}"
                )
        lines.append(f"- {group.name} ({len(group.metrics)} sets): " + "; ".join(parts) + ".")
    return lines


def payload(results: StudyResults) -> dict[str, Any]:
    names = calibrators(results)
    return {
        group.name: {
            r.calibrator: {
                "sets": r.sets,
                "win_rate": r.win_rate.as_dict(),
                "nll_minus_ts": r.nll.as_dict(),
                "brier_minus_ts": r.brier.as_dict(),
                "ece_minus_ts": r.ece.as_dict(),
                "median_fit_seconds": r.seconds,
            }
            for r in rows(group, names)
        }
        for group in groups(results)
    }
