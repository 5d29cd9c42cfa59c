"""Tables are queries over the results store: per (dataset, method, metric) the mean over seeds
with a Student-t confidence interval.

For ``n`` seeds with mean ``m`` and sample standard deviation ``s`` the interval is
``m +- t_{(1+a)/2, n-1} s / sqrt(n)`` (``a`` = confidence, 95% by default); with one seed there
is no interval (``NaN`` bounds). Seeds are independent replicates of the whole protocol (data
draw, initialisation, hyperparameter selection), so the interval is over everything that
varies between replicates.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from selfcal.experiments.protocols import CIFAR
from selfcal.experiments.spec import RunSpec
from selfcal.experiments.store import ResultsStore, RunRecord


@dataclass(frozen=True)
class Aggregate:
    """Mean over seeds of one metric of one method on one dataset, with its interval."""

    dataset: str
    method: str
    metric: str
    mean: float
    low: float
    high: float
    std: float
    n: int

    def as_dict(self) -> dict[str, Any]:
        def clean(x: float) -> float | None:
            return None if math.isnan(x) else x

        return {
            "dataset": self.dataset, "method": self.method, "metric": self.metric,
            "mean": self.mean, "ci": [clean(self.low), clean(self.high)],
            "std": clean(self.std), "n": self.n,
        }

    def format(self, scale: float = 1.0, digits: int = 3) -> str:
        """``mean ± half-width`` (scaled, e.g. ``scale=100`` for percentages)."""
        mean = self.mean * scale
        if math.isnan(self.high):
            return f"{mean:.{digits}f}"
        return f"{mean:.{digits}f} ± {(self.high - self.mean) * scale:.{digits}f}"


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)`` of the Student-t interval for the mean of ``values``."""
    from scipy import stats

    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no values to aggregate")
    mean = float(x.mean())
    if x.size == 1:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf((1 + confidence) / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return mean, mean - half, mean + half


def aggregate(
    records: Iterable[RunRecord], metrics: Sequence[str] | None = None, confidence: float = 0.95
) -> list[Aggregate]:
    """One :class:`Aggregate` per (dataset, method, metric) over the records' seeds, in the
    order first seen. ``metrics=None`` aggregates every metric the records carry."""
    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for record in records:
        names = record.metrics if metrics is None else metrics
        for name in names:
            if name in record.metrics:
                groups[(record.spec.dataset, record.spec.method, name)].append(
                    record.metrics[name]
                )
    out = []
    for (dataset, method, name), values in groups.items():
        mean, low, high = mean_interval(values, confidence)
        std = float(np.std(values, ddof=1)) if len(values) > 1 else math.nan
        out.append(Aggregate(dataset, method, name, mean, low, high, std, len(values)))
    return out


def study_records(store: ResultsStore, study: str, specs: Iterable[RunSpec]) -> list[RunRecord]:
    """The completed runs of ``study`` whose keys are among ``specs`` (one protocol version)."""
    wanted = {spec.key for spec in specs}
    return [r for r in store.runs(study=study) if r.spec.key in wanted]


def datasets_run(records: Sequence[RunRecord], datasets: Sequence[str]) -> tuple[str, ...]:
    """``datasets``, then any CIFAR set that was run (its data was present locally)."""
    extra = tuple(d for d in CIFAR if any(r.spec.dataset == d for r in records))
    return tuple(datasets) + tuple(d for d in extra if d not in datasets)


def aggregate_by_key(
    records: Iterable[RunRecord], confidence: float = 0.95
) -> dict[tuple[str, str, str], Aggregate]:
    """:func:`aggregate` keyed by ``(dataset, method, metric)``."""
    return {(a.dataset, a.method, a.metric): a for a in aggregate(records, None, confidence)}


def command_line(command: str, seconds: float | None, records: Sequence[RunRecord]) -> str:
    """The report's provenance line: the command, this invocation's wall time, and the runs'
    own compute time (a rerun that only redraws the report takes seconds, not the sweep's)."""
    compute = sum(r.seconds or 0.0 for r in records)
    wall = "" if seconds is None else f"this invocation {seconds:.0f} s; "
    return f"Command: `{command}` ({wall}{len(records)} runs, {compute:.0f} s of worker time)."
