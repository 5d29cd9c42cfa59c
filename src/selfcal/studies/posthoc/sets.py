"""One prediction set of the ``sets`` protocol, every calibrator: each is fitted on the set's
validation split and scored on its test split, with paired intervals against temperature
scaling over its test rows (:func:`selfcal.posthoc.compare.compare`), and probmetrics' SMS
beside them where it is installed. The resampled scores are stored as the ``replicates``
artefact (``(calibrators, 3, R)``, in the order of the ``replicate.<name>`` metrics), from
which the report draws its intervals over a family of sets: every set of a size is resampled
with the same draws; why a calibrator could not be fitted is its ``reasons`` artefact
(:data:`selfcal.studies._sets.REASONS`). The leaderboard judges the whole test split: a set's
groups (e.g. MMLU subjects) are not used here, and that is said -- a ``note:`` line on stderr
and the report's list of such sets, from the ``n_groups`` metric -- never silently ignored
(``selfcal compare SET`` reports each calibrator per group)."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import torch

from selfcal.exceptions import one_line
from selfcal.experiments import RunResult, RunSpec
from selfcal.io import PredictionSet
from selfcal.metrics.bootstrap import Resamples
from selfcal.posthoc._costs import memory_refusal
from selfcal.posthoc.compare import (
    BASELINE,
    SCORES,
    Row,
    against_baseline,
    compare,
    resampled_scores,
    test_scores,
)
from selfcal.studies._sets import set_artefacts, spec_set
from selfcal.studies.posthoc.execute import AUTO_NAMES, probmetrics_fit_predict
from selfcal.studies.posthoc.protocol import BINARY_ONLY, REFERENCE, PosthocSetsProtocol

__all__ = ["BASELINE", "SCORES", "evaluate_set"]

GROUPS_UNUSED = (
    "{name} holds groups; the post-hoc leaderboard judges the whole test split and does not "
    "use them (selfcal compare {name} reports each calibrator per group)"
)
"""What is said of a set with groups, on stderr as it runs."""


def evaluate_set(protocol: PosthocSetsProtocol, spec: RunSpec) -> RunResult:
    """Every calibrator on the set (:func:`~selfcal.posthoc.compare.compare`; one that cannot
    be fitted is a row with its reason, as ``selfcal compare`` shows it) and probmetrics' SMS
    (:func:`reference_row`). A set on which temperature scaling cannot be fitted is refused:
    every number here is a difference from it."""
    data = spec_set(spec)
    names = [n for n in protocol.calibrators if data.n_classes == 2 or n not in BINARY_ONLY]
    rows = compare(
        data, names, n_bins=protocol.n_bins, resamples=protocol.resamples, by_group=False
    )
    base = next(row for row in rows if row.name == BASELINE)
    if base.error:
        raise ValueError(
            "temperature scaling, which every calibrator is compared with, could not be "
            f"fitted: {base.error}"
        )
    reference = reference_row(data, protocol) if protocol.reference else None
    if reference is not None:
        rows.append(reference)
        against_baseline(rows)
    metrics: dict[str, float] = {
        "n_val": float(len(data.val_labels)),
        "n_test": float(len(data.test_labels)),
        "n_classes": float(data.n_classes),
    }
    if data.test_groups is not None:
        metrics["n_groups"] = float(len(np.unique(data.test_groups)))
        sys.stderr.write(f"note: {GROUPS_UNUSED.format(name=data.name)}\n")
    kept = [row for row in rows if row.resampled is not None]
    for row in rows:
        metrics.update(row_metrics(row))
    metrics.update({f"replicate.{row.name}": float(i) for i, row in enumerate(kept)})
    stacked = np.stack([row.resampled for row in kept if row.resampled is not None])
    reasons = set_artefacts(data, {row.name: row.error for row in rows if row.error})
    return RunResult(metrics=metrics, artefacts={"replicates": stacked, **reasons})


def reference_row(data: PredictionSet, protocol: PosthocSetsProtocol) -> Row | None:
    """probmetrics' SMS on the set as a row (``None`` without probmetrics). Its scores are given
    as float64 where they are integers or float16 (its softmax takes no integers; its check
    calls float16 rows unnormalised); past SMS's rule of memory it is not tried
    (:func:`~selfcal.posthoc._costs.memory_refusal`). Where probmetrics raises anyway, the
    row is a failed fit with probmetrics' one-line reason: the reference is lost, not the
    set."""
    too_large = memory_refusal("sms", data.n_classes)  # it is SMS: the same rule of memory
    if too_large is not None:
        return Row(REFERENCE, error=too_large)
    given = data
    if any(s.dtype not in (np.float32, np.float64) for s in (data.val, data.test)):
        val, test = (np.asarray(s, dtype=np.float64) for s in (data.val, data.test))
        given = dataclasses.replace(data, val=val, test=test)
    try:
        fitted = probmetrics_fit_predict(given)
    except Exception as error:  # probmetrics' own checks and failures, whatever their type
        return Row(REFERENCE, error=f"probmetrics: {one_line(error)}")
    if fitted is None:
        return None
    probs, seconds = fitted
    draws = Resamples(len(data.test_labels), protocol.resamples, 0)
    labels = torch.as_tensor(data.test_labels)
    scores = test_scores(probs, data.test_labels, protocol.n_bins)
    resampled = resampled_scores(probs, labels, protocol.n_bins, draws)
    return Row(REFERENCE, scores, resampled, seconds=seconds)


def row_metrics(row: Row) -> dict[str, float]:
    """One calibrator's stored metrics: ``<score>.<name>``, ``<score>_low.<name>`` /
    ``<score>_high.<name>`` (against TS), ``seconds.<name>``, ``warnings.<name>``,
    ``auto.chosen``; ``failed.<name>`` where it could not be fitted."""
    if row.error:
        return {f"failed.{row.name}": 1.0}
    out = {f"{score}.{row.name}": value for score, value in row.scores.items()}
    for score in SCORES:
        out[f"{score}_low.{row.name}"] = row.low[score]
        out[f"{score}_high.{row.name}"] = row.high[score]
    out[f"seconds.{row.name}"] = row.seconds
    out[f"warnings.{row.name}"] = float(len(row.warnings))
    if row.chosen is not None:
        out["auto.chosen"] = float(AUTO_NAMES.index(row.chosen))
    return out
