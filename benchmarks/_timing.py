"""What the benchmarks share: interleaved timing and writing the report.

Each round times every row once, in order, so slow phases of a shared machine hit every row
of that round alike; ratios are then taken within a round, or between medians."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

Rows = dict[str, Callable[[], object]]
"""Row name -> a call to time."""


def interleaved_times(rows: Rows, repeats: int) -> dict[str, list[float]]:
    """One warm-up call per row (compilation, caches), then each row's seconds per round."""
    for fn in rows.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(repeats):
        for name, fn in rows.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def interleaved_medians(rows: Rows, repeats: int) -> dict[str, float]:
    """Median seconds per row over ``repeats`` interleaved rounds."""
    return {name: statistics.median(t) for name, t in interleaved_times(rows, repeats).items()}


def write_report(text: str, path: Path) -> None:
    """Print the report and write it to ``path`` (creating its folder)."""
    print(text)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
