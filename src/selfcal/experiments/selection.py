"""Hyperparameters selected on validation data, over stored runs: one mechanism for every
study.

A method's tuned hyperparameters form a grid (:class:`selfcal.selection.Grid`); every grid
point is a *candidate*, one run whose spec carries the values as ``hp.<name>`` hyperparameters
(so they are part of its key and of every table row). A candidate run reports its validation
scores (``val_nll``, ``val_ece``, ...) next to its test metrics. :func:`select_runs` then keeps,
for every ``(dataset, method, regime, seed)``, the candidate with the best validation score
under the method's stated :class:`~selfcal.selection.Criterion` -- per seed, since every seed is
a replicate of the whole protocol, selection included -- by the one selection rule,
:func:`selfcal.selection.select`. The test metrics are never read by the selection.

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

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from selfcal.experiments.store import RunRecord
from selfcal.selection import Criterion, select

HP_PREFIX = "hp."


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


@dataclass(frozen=True)
class _Run:
    """A stored run as a :class:`selfcal.selection.Candidate`: done or not, its metrics and the
    grid values of its spec."""

    record: RunRecord

    @property
    def ok(self) -> bool:
        return self.record.status == "done"

    @property
    def metrics(self) -> Mapping[str, float]:
        return self.record.metrics

    @property
    def hyperparameters(self) -> Mapping[str, Any]:
        hparams = self.record.spec.hparams
        return {k[len(HP_PREFIX) :]: v for k, v in hparams.items() if k.startswith(HP_PREFIX)}


def select_runs(
    records: Iterable[RunRecord], criterion: Criterion | Callable[[RunRecord], Criterion]
) -> list[RunRecord]:
    """Per ``(dataset, method, regime, seed)``, the candidate with the best validation score
    (:func:`selfcal.selection.select`; module doc for missing values and ties). ``criterion``
    may depend on the run (e.g. on its method or regime). Keys with no finite candidate are
    left out. Order: first appearance."""

    def of_run(run: _Run) -> Criterion:
        return criterion if isinstance(criterion, Criterion) else criterion(run.record)

    runs = select([_Run(r) for r in records], of_run, key=lambda run: selection_key(run.record))
    return [run.record for run in runs]
