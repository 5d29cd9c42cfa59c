"""Hyperparameters selected on validation data: the one selection rule of ``selfcal train``
and of every study.

A method's tuned hyperparameters form a grid (:class:`Grid`, :func:`grid`) or an explicit list
of points (:class:`Candidates`); every point is a *candidate*, trained and scored on validation
data (``val_nll``, ``val_ece``, ...). :func:`select` then keeps, in every group of candidates,
the one with the best validation score under a :class:`Criterion`. The test metrics are never
read by the selection.

:func:`select` reads a candidate through the :class:`Candidate` protocol only -- ``ok``, its
``metrics`` and its ``hyperparameters`` (the grid point) -- so each user passes its own
objects: :mod:`selfcal.pipeline` its trained candidates (one group), the study engine its
stored runs (:func:`selfcal.experiments.selection.select_runs`, one group per ``(dataset,
method, regime, seed)``). This module sits below both and imports neither.

Choices:

* A failed candidate, or one whose criterion is missing or not finite (a diverged run), is
  never selected.
* Ties go to the candidate whose hyperparameter values sort first, compared axis by axis in
  alphabetical order of the names: deterministic, and independent of the order or keys of the
  candidates.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar


class Candidate(Protocol):
    """What :func:`select` reads of a candidate: whether it trained (``ok``; a failed
    candidate is never selected), its scores (``metrics``, the validation ones among them) and
    its grid point (``hyperparameters``, by name)."""

    @property
    def ok(self) -> bool: ...

    @property
    def metrics(self) -> Mapping[str, float]: ...

    @property
    def hyperparameters(self) -> Mapping[str, Any]: ...


C = TypeVar("C", bound=Candidate)
"""The caller's candidate type: :func:`select` returns the objects it was given."""


@dataclass(frozen=True)
class Criterion:
    """Select the candidate with the lowest (``maximize=False``) or highest validation
    ``metric``; ``words`` is how reports name it."""

    metric: str
    maximize: bool = False
    words: str = ""

    def __str__(self) -> str:
        return self.words or f"{'highest' if self.maximize else 'lowest'} {self.metric}"

    def score(self, candidate: Candidate) -> float:
        """The value to minimise (``inf`` when missing or not finite: never selected)."""
        value = candidate.metrics.get(self.metric, math.nan)
        if not math.isfinite(value):
            return math.inf
        return -value if self.maximize else value


VAL_NLL = Criterion("val_nll", words="lowest validation NLL")
VAL_ECE = Criterion("val_ece", words="lowest validation ECE (15 bins)")
VAL_ACCURACY = Criterion("val_accuracy", maximize=True, words="highest validation accuracy")


@dataclass(frozen=True, init=False)
class Grid:
    """The tuned hyperparameters of one method in a protocol:
    ``Grid("bsce-gra", gamma=(1.0, 2.0), norm=(1, 2))``. Frozen and hashable, so protocols
    can hold them (and fingerprint them: ``asdict`` sees ``method`` and ``axes``)."""

    method: str
    axes: tuple[tuple[str, tuple[Any, ...]], ...]

    def __init__(self, method: str, **axes: Sequence[Any]) -> None:
        object.__setattr__(self, "method", method)
        object.__setattr__(self, "axes", tuple((k, tuple(v)) for k, v in axes.items()))
        grid(**dict(self.axes))  # validates

    def configs(self) -> list[dict[str, Any]]:
        return grid(**dict(self.axes))

    def describe(self) -> str:
        return ", ".join(f"{name} ∈ {list(values)}" for name, values in self.axes)


@dataclass(frozen=True, init=False)
class Candidates:
    """An explicit list of one method's candidate configurations -- e.g. a grid pruned to the
    points a pilot's validation selections used: ``Candidates("bo4sc", [{"T": 10, "lr":
    0.01}, {"T": 5, "lr": 0.003}])``."""

    method: str
    points: tuple[tuple[tuple[str, Any], ...], ...]

    def __init__(self, method: str, points: Sequence[Mapping[str, Any]]) -> None:
        if not points:
            raise ValueError(f"{method}: no candidate configurations")
        object.__setattr__(self, "method", method)
        object.__setattr__(self, "points", tuple(tuple(p.items()) for p in points))

    def configs(self) -> list[dict[str, Any]]:
        return [dict(p) for p in self.points]

    def describe(self) -> str:
        return "; ".join(
            ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in p)
            for p in self.points
        )


def candidates(grids: Sequence[Grid], method: str) -> list[dict[str, Any]]:
    """The grid points of ``method`` (one empty config when it has no :class:`Grid`)."""
    for g in grids:
        if g.method == method:
            return g.configs()
    return [{}]


def grid(**axes: Sequence[Any]) -> list[dict[str, Any]]:
    """Every combination of the axes' values, the first axis varying slowest:
    ``grid(a=(1, 2), b=(3,)) == [{"a": 1, "b": 3}, {"a": 2, "b": 3}]``."""
    configs: list[dict[str, Any]] = [{}]
    for name, values in axes.items():
        if not values:
            raise ValueError(f"grid axis {name!r} has no values")
        configs = [{**c, name: v} for c in configs for v in values]
    return configs


def select(
    candidates: Iterable[C],
    criterion: Criterion | Callable[[C], Criterion],
    *,
    key: Callable[[C], Hashable] | None = None,
) -> list[C]:
    """In every group of candidates with equal ``key`` (``None``: one group), the candidate
    with the best validation score (module doc for missing values and ties). ``criterion`` may
    depend on the candidate. Groups with no finite candidate are left out. Order: the groups'
    first appearance."""
    criterion_of = (
        criterion
        if callable(criterion) and not isinstance(criterion, Criterion)
        else (lambda candidate: criterion)
    )
    groups: dict[Hashable, list[C]] = {}
    for candidate in candidates:
        if not candidate.ok:
            continue
        groups.setdefault(None if key is None else key(candidate), []).append(candidate)
    chosen = []
    for group in groups.values():
        scored = [(criterion_of(c).score(c), _grid_order(c), c) for c in group]
        best = min(scored, key=lambda item: item[:2])
        if math.isfinite(best[0]):
            chosen.append(best[2])
    return chosen


def _grid_order(candidate: Candidate) -> tuple[Any, ...]:
    """Tie-break: the candidate's grid values by name (module doc)."""
    return tuple(v for _, v in sorted(candidate.hyperparameters.items()))
