"""Hyperparameters selected on validation data: one mechanism for every study.

A method's tuned hyperparameters form a grid (:func:`grid`); every grid point is a
*candidate*, one run whose spec carries the values as ``hp.<name>`` hyperparameters (so they
are part of its key and of every table row). A candidate run reports its validation scores
(``val_nll``, ``val_ece``, ...) next to its test metrics. :func:`select` then keeps, for every
``(dataset, method, regime, seed)``, the candidate with the best validation score under the
method's stated :class:`Criterion` -- per seed, since every seed is a replicate of the whole
protocol, selection included. The test metrics are never read by the selection.

Selection is a query over stored runs, so a report can always show every seed's choice
(:func:`hyperparameters`) and a rerun with another criterion needs no training.

Choices:

* A candidate whose criterion is missing or not finite (a diverged run) is never selected.
* Ties go to the candidate whose hyperparameter values sort first, compared axis by axis in
  alphabetical order of the names: deterministic, and independent of the run keys.
* A value a run *chose itself* along its trajectory (e.g. the checkpoint epoch picked by its
  regime's rule) is an output, reported as an ``hp.<name>`` metric; :func:`hyperparameters`
  shows both kinds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from selfcal.experiments.store import RunRecord

HP_PREFIX = "hp."


@dataclass(frozen=True)
class Criterion:
    """Select the candidate with the lowest (``maximize=False``) or highest validation
    ``metric``; ``words`` is how reports name it."""

    metric: str
    maximize: bool = False
    words: str = ""

    def __str__(self) -> str:
        return self.words or f"{'highest' if self.maximize else 'lowest'} {self.metric}"

    def score(self, record: RunRecord) -> float:
        """The value to minimise (``inf`` when missing or not finite: never selected)."""
        value = record.metrics.get(self.metric, math.nan)
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


def hp(config: Mapping[str, Any]) -> dict[str, Any]:
    """``{"gamma": 2.0} -> {"hp.gamma": 2.0}``: a candidate's values as spec hyperparameters."""
    return {HP_PREFIX + name: value for name, value in config.items()}


def hyperparameters(record: RunRecord) -> dict[str, Any]:
    """The run's hyperparameters by name: the grid values of its spec, then the values it
    chose itself (``hp.*`` metrics, e.g. the checkpoint epoch)."""
    chosen = {k: v for k, v in record.spec.hparams.items() if k.startswith(HP_PREFIX)}
    chosen.update({k: v for k, v in record.metrics.items() if k.startswith(HP_PREFIX)})
    return {k[len(HP_PREFIX) :]: v for k, v in chosen.items()}


def regime(record: RunRecord) -> str:
    """The run's regime (``""`` for a study without regimes)."""
    return str(record.spec.hparams.get("regime", ""))


SelectionKey = tuple[str, str, str, int]


def selection_key(record: RunRecord) -> SelectionKey:
    """``(dataset, method, regime, seed)``: one selected run per key."""
    return record.spec.dataset, record.spec.method, regime(record), record.spec.seed


def select(
    records: Iterable[RunRecord], criterion: Criterion | Callable[[RunRecord], Criterion]
) -> list[RunRecord]:
    """Per ``(dataset, method, regime, seed)``, the candidate with the best validation score
    (module doc for missing values and ties). ``criterion`` may depend on the run (e.g. on its
    method or regime). Keys with no finite candidate are left out. Order: first appearance."""
    criterion_of = (
        criterion
        if callable(criterion) and not isinstance(criterion, Criterion)
        else (lambda record: criterion)
    )
    groups: dict[SelectionKey, list[RunRecord]] = {}
    for record in records:
        groups.setdefault(selection_key(record), []).append(record)
    chosen = []
    for candidates in groups.values():
        scored = [(criterion_of(r).score(r), _grid_order(r), r) for r in candidates]
        best = min(scored, key=lambda item: item[:2])
        if math.isfinite(best[0]):
            chosen.append(best[2])
    return chosen


def _grid_order(record: RunRecord) -> tuple[Any, ...]:
    """Tie-break: the candidate's grid values by name (module doc)."""
    return tuple(v for k, v in sorted(record.spec.hparams.items()) if k.startswith(HP_PREFIX))
