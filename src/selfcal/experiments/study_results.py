"""A study protocol's runs as its report reads them (:class:`StudyResults`): every done
candidate, the validation-selected ones, their aggregates over seeds and the failures --
queries over the :class:`~selfcal.experiments.store.ResultsStore` of
:func:`~selfcal.experiments.study.run_study`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from selfcal.experiments.selection import regime, select_runs
from selfcal.experiments.store import ResultsStore, RunRecord
from selfcal.experiments.tables import Aggregate, AggregateKey, aggregate_by_key

if TYPE_CHECKING:
    from selfcal.experiments.study import Study, StudyProtocol

P = TypeVar("P", bound="StudyProtocol")
"""A study's protocol type."""


@dataclass
class StudyResults(Generic[P]):
    """A protocol's runs as its report reads them: every done candidate (:attr:`records`), the
    validation-selected ones (:attr:`selected`), their aggregates and the failures."""

    study: Study[P]
    protocol: P
    store: ResultsStore

    @classmethod
    def load(cls, study: Study[P], protocol: P, store: ResultsStore) -> StudyResults[P]:
        return cls(study, protocol, store)

    @cached_property
    def _answers(self) -> dict[tuple[Any, ...], list[RunRecord]]:
        """:meth:`runs`' answers, by its arguments."""
        return {}

    @cached_property
    def _keys(self) -> set[str]:
        return {spec.key for spec in self.study.specs(self.protocol)}

    @cached_property
    def records(self) -> list[RunRecord]:
        """Done runs of this protocol's current specs (every candidate)."""
        return [r for r in self.store.runs(study=self.study.name) if r.key in self._keys]

    @cached_property
    def failures(self) -> list[RunRecord]:
        return [r for r in self.store.failures(self.study.name) if r.key in self._keys]

    @cached_property
    def selected(self) -> list[RunRecord]:
        """One run per (dataset, method, regime, seed): the candidate selected on validation
        by the study's criterion (a method with one candidate: that run)."""
        single = _single_candidates(self.records)
        tuned = [r for r in self.records if r.key not in single]
        return [r for r in self.records if r.key in single] + select_runs(
            tuned, self.study.criterion
        )

    @cached_property
    def aggregates(self) -> dict[AggregateKey, Aggregate]:
        """Means over seeds of the selected runs, by ``(dataset, method, metric, regime)``."""
        return aggregate_by_key(self.selected)

    def get(
        self, dataset: str, method: str, metric: str, regime_name: str = ""
    ) -> Aggregate | None:
        return self.aggregates.get((dataset, method, metric, regime_name))

    def runs(
        self,
        dataset: str | None = None,
        method: str | None = None,
        regime_name: str | None = None,
        *,
        candidates: bool = False,
    ) -> list[RunRecord]:
        """Selected runs (every candidate with ``candidates=True``) matching the filters,
        in seed order (each filter's answer is remembered: a report asks for the same few
        hundred some 10^5 times)."""
        query = (dataset, method, regime_name, candidates)
        if query not in self._answers:
            pool = self.records if candidates else self.selected
            out = [
                r
                for r in pool
                if (dataset is None or r.spec.dataset == dataset)
                and (method is None or r.spec.method == method)
                and (regime_name is None or regime(r) == regime_name)
            ]
            self._answers[query] = sorted(out, key=lambda r: r.spec.seed)
        return list(self._answers[query])

    def run(self, dataset: str, method: str, seed: int, regime_name: str = "") -> RunRecord | None:
        """The selected run of one seed (``None`` when absent)."""
        return next(
            (r for r in self.runs(dataset, method, regime_name) if r.spec.seed == seed), None
        )

    def artefact(self, record: RunRecord, name: str) -> np.ndarray:
        return self.store.artefact(record.key, name)

    @cached_property
    def regimes(self) -> tuple[str, ...]:
        """The regimes in the protocol's order (``("",)`` for a study without regimes)."""
        return tuple(
            dict.fromkeys(str(s.hparams.get("regime", "")) for s in self.study.specs(self.protocol))
        )

    @property
    def datasets(self) -> tuple[str, ...]:
        """The protocol's datasets, then any other dataset that was run (e.g. local CIFAR)."""
        extra = [
            d
            for d in dict.fromkeys(r.spec.dataset for r in self.records)
            if d not in self.protocol.datasets
        ]
        return tuple(self.protocol.datasets) + tuple(extra)


def _single_candidates(records: Sequence[RunRecord]) -> set[str]:
    """Keys of runs that are their (dataset, method, regime, seed)'s only candidate."""
    from selfcal.experiments.selection import selection_key

    counts: dict[Any, list[str]] = {}
    for r in records:
        counts.setdefault(selection_key(r), []).append(r.key)
    return {keys[0] for keys in counts.values() if len(keys) == 1}
