"""One re-split of one prediction set of the groups study's ``sets`` protocol: the set read
from ``$SELFCAL_PREDICTIONS`` (:func:`~selfcal.studies._sets.spec_set`), its groups
(:func:`~selfcal.studies.groups.data.set_groups`), its validation and test rows pooled and
re-split (:func:`~selfcal.studies.groups.execute.evaluate_split`). An MMLU set is measured a
second time on the same split without the subjects MMLU-Redux flags (metrics prefixed
``clean.``): a subject can look miscalibrated because its labels are wrong."""

from __future__ import annotations

import numpy as np

from selfcal._inputs import as_groups
from selfcal.experiments import RunResult, RunSpec
from selfcal.studies._sets import READ_FROM, set_artefacts, spec_set
from selfcal.studies.groups.data import (
    FAMILIES,
    cifar10_table,
    cifar100_table,
    flagged_subjects,
    set_groups,
    within_group_errors,
)
from selfcal.studies.groups.execute import evaluate_split, result
from selfcal.studies.groups.protocol import GroupsSetsProtocol

CLEAN = "clean."
"""The prefix of an MMLU set's numbers without MMLU-Redux's flagged subjects."""


def evaluate_set(protocol: GroupsSetsProtocol, spec: RunSpec) -> RunResult:
    data = spec_set(spec)
    found = set_groups(spec.dataset, data)
    scores = np.concatenate([np.asarray(data.val), np.asarray(data.test)])
    labels = np.concatenate([data.val_labels, data.test_labels]).astype(np.int64)
    labels_of_rows = np.concatenate([found.val, found.test])
    groups = as_groups(labels_of_rows, len(labels))
    measured = evaluate_split(protocol, scores, data.kind, labels, groups, spec.seed)
    metrics = {
        "family": float(FAMILIES.index(found.family)),
        "n_rows": float(len(labels)),
        "n_classes": float(data.n_classes),
        "n_groups": float(groups.n_groups),
    }
    table = {"cifar100": cifar100_table, "cifar10": cifar10_table}.get(found.family)
    if table is not None:
        observed, chance = within_group_errors(scores, labels, table())
        metrics["errors_within_group"], metrics["chance_within_group"] = observed, chance
    if found.family == "mmlu":
        keep = ~np.isin(labels_of_rows, flagged_subjects())
        clean = evaluate_split(
            protocol, scores, data.kind, labels, groups, spec.seed, keep=keep, prefix=CLEAN
        )
        measured.metrics.update(clean.metrics)
        measured.artefacts.update(clean.artefacts)
        measured.reasons.update(clean.reasons)
    linked = set_artefacts(data, {}).get(READ_FROM)
    if linked is not None:
        measured.artefacts[READ_FROM] = linked
    return result(measured, metrics, groups.names)
