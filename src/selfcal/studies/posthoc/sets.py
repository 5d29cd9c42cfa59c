"""One prediction set of the ``sets`` protocol, every calibrator: each is fitted on the set's
validation split and scored on its test split, with paired intervals against temperature
scaling over its test rows (:func:`selfcal.posthoc.compare.compare`), and probmetrics' SMS
beside them where it is installed. The resampled scores are stored as the ``replicates``
artefact (``(calibrators, 3, R)``, in the order of the ``replicate.<name>`` metrics), from
which the report draws its intervals over a family of sets: every set of a size is resampled
with the same draws."""

from __future__ import annotations

import numpy as np
import torch

from selfcal.experiments import RunResult, RunSpec
from selfcal.metrics.bootstrap import Resamples
from selfcal.posthoc.compare import (
    BASELINE,
    SCORES,
    Row,
    against_baseline,
    compare,
    resampled_scores,
    test_scores,
)
from selfcal.studies._sets import spec_set
from selfcal.studies.posthoc.execute import AUTO_NAMES, probmetrics_fit_predict
from selfcal.studies.posthoc.protocol import BINARY_ONLY, REFERENCE, PosthocSetsProtocol

__all__ = ["BASELINE", "SCORES", "evaluate_set"]


def evaluate_set(protocol: PosthocSetsProtocol, spec: RunSpec) -> RunResult:
    data = spec_set(spec)
    names = [n for n in protocol.calibrators if data.n_classes == 2 or n not in BINARY_ONLY]
    rows = compare(data, names, n_bins=protocol.n_bins, resamples=protocol.resamples)
    reference = probmetrics_fit_predict(data) if protocol.reference else None
    if reference is not None:
        probs, seconds = reference
        draws = Resamples(len(data.test_labels), protocol.resamples, 0)
        labels = torch.as_tensor(data.test_labels)
        scores = test_scores(probs, data.test_labels, protocol.n_bins)
        resampled = resampled_scores(probs, labels, protocol.n_bins, draws)
        rows.append(Row(REFERENCE, scores, resampled, seconds=seconds))
        against_baseline(rows)
    metrics: dict[str, float] = {
        "n_val": float(len(data.val_labels)),
        "n_test": float(len(data.test_labels)),
        "n_classes": float(data.n_classes),
    }
    kept = [row for row in rows if row.resampled is not None]
    for row in rows:
        metrics.update(row_metrics(row))
    metrics.update({f"replicate.{row.name}": float(i) for i, row in enumerate(kept)})
    stacked = np.stack([row.resampled for row in kept if row.resampled is not None])
    return RunResult(metrics=metrics, artefacts={"replicates": stacked})


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
