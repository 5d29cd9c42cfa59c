"""Experiments as data: a run is a :class:`RunSpec` (study, dataset, method, seed,
hyperparameters, model) and produces a :class:`RunResult` (metrics, artefact arrays, status);
:func:`run_sweep` runs the specs not yet stored through any executor function -- in this
process or in spawned worker processes -- and a :class:`ResultsStore` (one SQLite file, one
transaction per run, safe to kill at any moment) keeps every result with the
:func:`environment` it ran in. Tables and plots are queries over the store
(:meth:`ResultsStore.runs`, :meth:`ResultsStore.to_rows`).

This package runs executors; it does not import datasets, models or training code.
"""

from selfcal.experiments.environment import environment
from selfcal.experiments.runner import SweepSummary, run_sweep
from selfcal.experiments.spec import RunResult, RunSpec
from selfcal.experiments.store import ResultsStore, RunRecord

__all__ = [
    "ResultsStore",
    "RunRecord",
    "RunResult",
    "RunSpec",
    "SweepSummary",
    "environment",
    "run_sweep",
]
