"""One prediction set of the abstention study's ``sets`` protocol: the set read from
``$SELFCAL_PREDICTIONS`` (:func:`~selfcal.studies._sets.spec_set`), its validation and test
rows pooled, through :func:`~selfcal.studies.abstention.execute.evaluate_rows` (with the
set's own groups where its files carry them: MMLU's subjects)."""

from __future__ import annotations

import numpy as np

from selfcal.experiments import RunResult, RunSpec
from selfcal.studies._sets import READ_FROM, set_artefacts, spec_set
from selfcal.studies.abstention.execute import evaluate_rows
from selfcal.studies.abstention.protocol import AbstentionSetsProtocol


def evaluate_set(protocol: AbstentionSetsProtocol, spec: RunSpec) -> RunResult:
    data = spec_set(spec)
    scores = np.concatenate([np.asarray(data.val), np.asarray(data.test)])
    labels = np.concatenate([data.val_labels, data.test_labels]).astype(np.int64)
    groups = None
    if data.val_groups is not None and data.test_groups is not None:
        groups = np.concatenate([np.asarray(data.val_groups), np.asarray(data.test_groups)])
    metrics, artefacts = evaluate_rows(protocol, scores, data.kind, labels, groups, spec.seed)
    linked = set_artefacts(data, {}).get(READ_FROM)
    if linked is not None:
        artefacts[READ_FROM] = linked
    return RunResult(metrics, artefacts)
