"""Tables and verdicts are queries over the results store: means over seeds with Student-t
intervals, and comparisons of two methods from *paired* intervals.

* **Mean over seeds.** For ``n`` seeds with mean ``m`` and sample standard deviation ``s`` the
  interval is ``m +- t_{(1+a)/2, n-1} s / sqrt(n)`` (``a`` = confidence, 95% by default); one
  seed has no interval (``NaN`` bounds). Seeds are independent replicates of the whole
  protocol (data draw, initialisation, hyperparameter selection), so the interval covers
  everything that varies between replicates.
* **Paired difference.** Two methods run on the same seeds share their data draw, so their
  comparison is the t-interval of the per-seed differences ``a_s - b_s`` (:func:`paired`),
  far narrower than the difference of two independent intervals.
* **Verdict.** ``better`` / ``worse`` when the paired interval excludes 0 on that side,
  ``tied`` when it contains 0 (or there is one seed). A claim is decided by verdicts, never by
  comparing means.
* **Rank.** A method's rank is 1 + the number of methods whose paired interval against it is
  entirely better (:func:`paired_ranks`): every method tied with the best shares rank 1. No
  correction for multiple comparisons is applied; reports say so.
* **Power.** :func:`detectable_difference` is the true paired difference that the protocol's
  seeds would detect with probability ``power`` at the interval's confidence:
  ``(t_{(1+a)/2, n-1} + t_{power, n-1}) sd / sqrt(n)``.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from selfcal.experiments.selection import regime
from selfcal.experiments.store import RunRecord

Verdict = Literal["better", "worse", "tied"]
AggregateKey = tuple[str, str, str, str]
"""``(dataset, method, metric, regime)``."""


@dataclass(frozen=True)
class Aggregate:
    """Mean over seeds of one metric of one method on one dataset (in one regime)."""

    dataset: str
    method: str
    metric: str
    mean: float
    low: float
    high: float
    std: float
    n: int
    regime: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "method": self.method,
            "regime": self.regime,
            "metric": self.metric,
            "mean": self.mean,
            "ci": [_clean(self.low), _clean(self.high)],
            "std": _clean(self.std),
            "n": self.n,
        }

    def format(self, scale: float = 1.0, digits: int = 3) -> str:
        """``mean ± half-width`` (scaled, e.g. ``scale=100`` for percentages)."""
        mean = self.mean * scale
        if math.isnan(self.high):
            return f"{mean:.{digits}f}"
        return f"{mean:.{digits}f} ± {(self.high - self.mean) * scale:.{digits}f}"


def _clean(x: float) -> float | None:
    return None if math.isnan(x) else x


@functools.lru_cache(maxsize=256)
def t_quantile(q: float, dof: int) -> float:
    """The ``q`` quantile of Student's t with ``dof`` degrees of freedom (scipy's ``t.ppf``,
    remembered: a report asks for the same few quantiles some 10^5 times)."""
    from scipy import stats

    return float(stats.t.ppf(q, dof))


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)`` of the Student-t interval for the mean of ``values``."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no values to aggregate")
    mean = float(x.mean())
    if x.size == 1:
        return mean, math.nan, math.nan
    half = float(t_quantile((1 + confidence) / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return mean, mean - half, mean + half


def aggregate(
    records: Iterable[RunRecord], metrics: Sequence[str] | None = None, confidence: float = 0.95
) -> list[Aggregate]:
    """One :class:`Aggregate` per (dataset, method, regime, metric) over the records' seeds, in
    the order first seen. ``metrics=None`` aggregates every metric the records carry."""
    groups: dict[tuple[str, str, str, str], list[float]] = defaultdict(list)
    for record in records:
        names = record.metrics if metrics is None else metrics
        for name in names:
            if name in record.metrics:
                groups[(record.spec.dataset, record.spec.method, regime(record), name)].append(
                    record.metrics[name]
                )
    out = []
    for (dataset, method, regime_name, name), values in groups.items():
        mean, low, high = mean_interval(values, confidence)
        std = float(np.std(values, ddof=1)) if len(values) > 1 else math.nan
        out.append(Aggregate(dataset, method, name, mean, low, high, std, len(values), regime_name))
    return out


def aggregate_by_key(
    records: Iterable[RunRecord], confidence: float = 0.95
) -> dict[AggregateKey, Aggregate]:
    """:func:`aggregate` keyed by ``(dataset, method, metric, regime)``."""
    return {
        (a.dataset, a.method, a.metric, a.regime): a for a in aggregate(records, None, confidence)
    }


# ----------------------------------------------------------------------------- paired
@dataclass(frozen=True)
class Difference:
    """Mean over seeds of ``a_s - b_s`` with its t-interval, ``n`` seeds and the standard
    deviation ``sd`` of the per-seed differences."""

    mean: float
    low: float
    high: float
    n: int
    sd: float

    def verdict(self, lower_is_better: bool = True) -> Verdict:
        """``better`` / ``worse`` for ``a`` against ``b`` when the interval excludes 0."""
        if math.isnan(self.low):
            return "tied"
        if self.high < 0:
            return "better" if lower_is_better else "worse"
        if self.low > 0:
            return "worse" if lower_is_better else "better"
        return "tied"

    def p_value(self) -> float:
        """Two-sided p-value of the paired t-test of a zero mean difference (the test whose
        95% interval is ``low`` .. ``high``); ``NaN`` below two seeds, 0 or 1 when every seed's
        difference is the same."""
        from scipy import stats

        if self.n < 2 or math.isnan(self.sd):
            return math.nan
        if self.sd == 0.0:
            return 1.0 if self.mean == 0.0 else 0.0
        t = self.mean / (self.sd / math.sqrt(self.n))
        return float(2.0 * stats.t.sf(abs(t), self.n - 1))

    def format(self, scale: float = 1.0, digits: int = 3) -> str:
        """``+0.012 [-0.003, +0.027]`` (scaled)."""
        m, lo, hi = (x * scale for x in (self.mean, self.low, self.high))
        if math.isnan(lo):
            return f"{m:+.{digits}f} (n={self.n})"
        return f"{m:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}]"

    def as_dict(self) -> dict[str, Any]:
        return {
            "mean": self.mean,
            "ci": [_clean(self.low), _clean(self.high)],
            "n": self.n,
            "sd": _clean(self.sd),
        }


def by_seed(records: Iterable[RunRecord], metric: str) -> dict[int, float]:
    """``{seed: value}`` of ``metric`` (records of one dataset, method and regime)."""
    out: dict[int, float] = {}
    for record in records:
        if metric in record.metrics:
            if record.spec.seed in out:
                raise ValueError(
                    f"two runs of seed {record.spec.seed} for one paired value "
                    f"({record.spec.dataset}, {record.spec.method})"
                )
            out[record.spec.seed] = record.metrics[metric]
    return out


def paired(
    a: Mapping[int, float], b: Mapping[int, float], confidence: float = 0.95
) -> Difference | None:
    """The paired difference ``a - b`` over the seeds both have (``None`` if none)."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return None
    diffs = [a[s] - b[s] for s in seeds]
    mean, low, high = mean_interval(diffs, confidence)
    sd = float(np.std(diffs, ddof=1)) if len(diffs) > 1 else math.nan
    return Difference(mean, low, high, len(diffs), sd)


def paired_ranks(
    values: Mapping[str, Mapping[int, float]],
    lower_is_better: bool = True,
    confidence: float = 0.95,
) -> dict[str, int]:
    """Rank of each method: 1 + the number of others significantly better than it (module
    doc); ``values`` is ``{method: {seed: value}}``."""
    ranks = {}
    for name, mine in values.items():
        beaten = 0
        for other, theirs in values.items():
            diff = None if other == name else paired(theirs, mine, confidence)
            if diff is not None and diff.verdict(lower_is_better) == "better":
                beaten += 1
        ranks[name] = 1 + beaten
    return ranks


def detectable_difference(sd: float, n: int, confidence: float = 0.95, power: float = 0.8) -> float:
    """Smallest true paired difference detected with probability ``power`` (module doc);
    ``NaN`` below two seeds."""
    if n < 2 or not math.isfinite(sd):
        return math.nan
    t = t_quantile((1 + confidence) / 2, n - 1) + t_quantile(power, n - 1)
    return float(t * sd / math.sqrt(n))


def command_line(command: str, seconds: float | None, records: Sequence[RunRecord]) -> str:
    """The report's provenance line: the command, this invocation's wall time, and the runs'
    own compute time (a rerun that only redraws the report takes seconds, not the sweep's)."""
    compute = sum(r.seconds or 0.0 for r in records)
    wall = "" if seconds is None else f"this invocation {seconds:.0f} s; "
    return f"Command: `{command}` ({wall}{len(records)} runs, {compute:.0f} s of worker time)."


METRIC_COLUMNS: dict[str, tuple[str, float]] = {
    "error": ("Error", 100.0),
    "train_error": ("train error", 100.0),
    "accuracy": ("accuracy", 100.0),
    "nll": ("NLL", 1.0),
    "nll_ts": ("NLL + TS", 1.0),
    "ece": ("ECE", 100.0),
    "ece_ts": ("ECE + TS", 100.0),
    "ece_iso": ("ECE + iso", 100.0),
    "nll_sms": ("NLL + SMS", 1.0),
    "nll_auto": ("NLL + auto", 1.0),
    "ece_sms": ("ECE + SMS", 100.0),
    "ece_auto": ("ECE + auto", 100.0),
    "error_sms": ("Error + SMS", 100.0),
    "error_auto": ("Error + auto", 100.0),
    "mce": ("MCE", 100.0),
    "adaece": ("AdaECE", 100.0),
    "classwise_ece": ("CW-ECE", 100.0),
    "aurc": ("AURC", 100.0),
    "brier": ("Brier", 1.0),
    "temperature": ("T", 1.0),
}
"""How the reports show a metric: ``metric -> (column name, scale)``; rates and calibration
errors in % (scale 100), NLL, Brier score and temperature raw."""


def columns(*metrics: str, **names: str) -> tuple[tuple[str, str, float], ...]:
    """``(column name, metric, scale)`` of each of ``metrics`` from :data:`METRIC_COLUMNS`,
    in that order; ``names`` renames columns by metric (e.g. ``adaece="ACE"``)."""
    return tuple((names.get(m, METRIC_COLUMNS[m][0]), m, METRIC_COLUMNS[m][1]) for m in metrics)
