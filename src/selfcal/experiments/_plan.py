"""What a sweep runs (:mod:`selfcal.experiments.runner`): each spec once, those not stored yet,
in groups."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable

from selfcal.experiments._groups import Group
from selfcal.experiments.spec import RunSpec
from selfcal.experiments.store import ResultsStore


def unique(specs: Iterable[RunSpec]) -> list[RunSpec]:
    """Specs in first-appearance order, each key once."""
    seen: dict[str, RunSpec] = {}
    for spec in specs:
        if not isinstance(spec, RunSpec):
            raise ValueError(f"run_sweep needs RunSpec objects, got {type(spec).__name__}")
        seen.setdefault(spec.key, spec)
    return list(seen.values())


def pending_of(specs: list[RunSpec], store: ResultsStore, retry_failed: bool) -> list[RunSpec]:
    """Specs whose key is not stored (stored as failed counts as not stored when
    ``retry_failed``, and so does a run changed after it was stored:
    :meth:`ResultsStore.fail_changed`)."""
    stored: set[str] = set()
    for study in {spec.study for spec in specs}:
        if retry_failed:
            store.fail_changed(study)
        stored |= store.keys(study, "done" if retry_failed else None)
    return [spec for spec in specs if spec.key not in stored]


def groups_of(specs: list[RunSpec], batch_by: Callable[[RunSpec], Hashable] | None) -> list[Group]:
    """Groups in order of first appearance; one spec per group without ``batch_by``."""
    if batch_by is None:
        return [[spec] for spec in specs]
    groups: dict[Hashable, Group] = {}
    for spec in specs:
        groups.setdefault(batch_by(spec), []).append(spec)
    return list(groups.values())
