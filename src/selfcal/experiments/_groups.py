"""What every sweep back end shares: the executor and group types, running one group (its
warnings caught), and the one-line summary of a sweep's warnings.

:func:`run_group` is the function a group runs through wherever it runs -- in the sweep's own
process, in a worker process (:mod:`selfcal.experiments.runner`) or in a Ray task
(:mod:`selfcal.experiments.ray_executor`) -- so an exception becomes the same failed results
and the results are bit-identical whichever back end ran them. Both back ends import this
module; it imports neither.
"""

from __future__ import annotations

import dataclasses
import re
import string
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from selfcal._warnings import warn_user
from selfcal.experiments.spec import RunResult, RunSpec

NUMBER = re.compile(r"[-+]?\d+(\.\d+)?([eE][-+]?\d+)?")
"""A number in a warning's text: warnings that differ only in their numbers are one kind."""
CLAUSE_END = re.compile(rf"; |, so |\. (?=[{string.ascii_uppercase}])")
"""Where a warning's first clause -- what happened -- ends: a semicolon, ``, so`` (what it
implies follows), or a full stop before a capital."""
SUMMARY_WIDTH = 111
"""The most characters of a line of a sweep's warning summary: with the command line's
``warning: `` it stays within 120 columns (the report lists the runs in full)."""

Executor = Callable[[list[RunSpec]], list[RunResult]]
Group = list[RunSpec]
OnDone = Callable[[Group, list[RunResult]], None]


def run_group(execute: Executor, group: Group) -> list[RunResult]:
    """Run one group (in this process or a worker); exceptions become failed results, except
    an ``ImportError``: a package missing from the environment is not a result of the run, so
    it propagates and stops the sweep, and nothing is stored for the group (the rerun after
    installing the package runs it). Results without ``seconds`` get the group's wall time
    shared equally. The warnings the group raises are caught, not printed (a worker's would
    land in the progress bar), and ride on its first result (``RunResult.warnings``)."""
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            results = execute(list(group))
            _check_results(results, len(group))
        except ImportError:
            raise
        except Exception as err:
            share = (time.perf_counter() - start) / len(group)
            results = [RunResult.failure(f"{type(err).__name__}: {err}", share) for _ in group]
    share = (time.perf_counter() - start) / len(group)
    results = [dataclasses.replace(r, seconds=share) if r.seconds is None else r for r in results]
    if caught:
        results[0] = dataclasses.replace(results[0], warnings=warning_counts(caught))
    return results


def warning_counts(caught: list[warnings.WarningMessage]) -> tuple[tuple[str, int], ...]:
    """Each distinct warning as ``"Category: message"`` on one line, with how often it came."""
    texts = Counter(f"{w.category.__name__}: {' '.join(str(w.message).split())}" for w in caught)
    return tuple(texts.items())


def _check_results(results: Any, expected: int) -> None:
    if not isinstance(results, list) or not all(isinstance(r, RunResult) for r in results):
        raise TypeError(f"execute must return a list of RunResult, got {type(results).__name__}")
    if len(results) != expected:
        raise ValueError(f"execute returned {len(results)} results for {expected} specs")


def warn_summary(caught: tuple[tuple[str, int], ...], runs: int) -> None:
    """One warning per kind of warning the sweep's groups raised (the same text but for its
    numbers), with how often it came and its first example -- instead of each one, which a
    sweep of hundreds of runs repeats hundreds of times."""
    summarize(caught, f"in {runs} runs")


def summarize(caught: tuple[tuple[str, int], ...], where: str) -> None:
    """``warning: N times WHERE: <first clause of the first example>`` once per kind of
    warning in ``caught`` (``(text, count)`` pairs, :func:`warning_counts`), each line within
    :data:`SUMMARY_WIDTH` characters."""
    kinds: dict[str, tuple[int, str]] = {}
    for text, count in caught:
        key = NUMBER.sub("#", text)
        seen, example = kinds.get(key, (0, text))
        kinds[key] = (seen + count, example)
    for count, example in kinds.values():
        lead = f"{'once' if count == 1 else f'{count} times'} {where}: "
        text = lead + gist(example, SUMMARY_WIDTH - len(lead))
        warn_user(text, RuntimeWarning)


@contextmanager
def summarized_warnings(where: str) -> Iterator[None]:
    """Inside, warnings are caught and, at the end, summarized one line per kind
    (:func:`summarize`): for the main process's own share of a sweep's work, e.g. writing its
    report (``where="in the report"``)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    summarize(warning_counts(caught), where)


def gist(text: str, width: int) -> str:
    """The first clause of a warning's text (:data:`CLAUSE_END`), cut to ``width`` characters
    with an ellipsis."""
    clause = CLAUSE_END.split(text, maxsplit=1)[0]
    return clause if len(clause) <= width else clause[: width - 1].rstrip() + "…"
