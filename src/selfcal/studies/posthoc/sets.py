"""One prediction set of the ``sets`` protocol, every calibrator: each is fitted on the set's
validation split and scored on its test split -- NLL, Brier score, 15-bin ECE, error, fit
time -- as in :mod:`selfcal.studies.posthoc.execute`, and the three scores are recomputed on
seeded bootstrap resamples of the test rows (the same resamples for every calibrator, and for
every set with as many test rows), which give each calibrator's paired interval against
temperature scaling on the set and, stored as the ``replicates`` artefact, the report's
intervals over a family of sets."""

from __future__ import annotations

import numpy as np
import torch

import selfcal.metrics as M
from selfcal import Predictions
from selfcal.experiments import RunResult, RunSpec
from selfcal.metrics.bootstrap import Resamples, interval_bounds, resampled_values
from selfcal.metrics.scores import brier_terms, nll_terms
from selfcal.posthoc.auto import prepare_fits
from selfcal.studies._sets import spec_set
from selfcal.studies.posthoc.execute import fit_predict, probmetrics_fit_predict, scores
from selfcal.studies.posthoc.protocol import BINARY_ONLY, REFERENCE, PosthocSetsProtocol

SCORES = ("nll", "brier", "ece")
"""The scores resampled, in the order of the ``replicates`` artefact's second axis."""
BASELINE = "ts"


def evaluate_set(protocol: PosthocSetsProtocol, spec: RunSpec) -> RunResult:
    data = spec_set(spec)
    labels = torch.as_tensor(data.test_labels)
    resamples = Resamples(len(labels), protocol.resamples, 0)
    metrics: dict[str, float] = {
        "n_val": float(len(data.val_labels)),
        "n_test": float(len(labels)),
        "n_classes": float(data.n_classes),
    }
    replicates: dict[str, np.ndarray] = {}
    names = [n for n in protocol.calibrators if data.n_classes == 2 or n not in BINARY_ONLY]
    prepare_fits(names)  # first-use imports (scikit-learn, scipy) before any clock starts
    for name in names:
        fitted = fit_predict(name, data)
        if fitted is None:
            metrics[f"failed.{name}"] = 1.0
            continue
        probs, extra = fitted
        metrics.update(scores(name, probs, data.test_labels, protocol.n_bins) | extra)
        replicates[name] = resampled_scores(probs, labels, protocol.n_bins, resamples)
    reference = probmetrics_fit_predict(data) if protocol.reference else None
    if reference is not None:
        probs, seconds = reference
        metrics.update(scores(REFERENCE, probs, data.test_labels, protocol.n_bins))
        metrics[f"seconds.{REFERENCE}"] = seconds
        replicates[REFERENCE] = resampled_scores(probs, labels, protocol.n_bins, resamples)
    metrics.update(intervals_against_baseline(metrics, replicates))
    order = list(replicates)
    metrics.update({f"replicate.{name}": float(i) for i, name in enumerate(order)})
    stacked = np.stack([replicates[name] for name in order])
    return RunResult(metrics=metrics, artefacts={"replicates": stacked})


def resampled_scores(
    probs: torch.Tensor, labels: torch.Tensor, n_bins: int, resamples: Resamples
) -> np.ndarray:
    """``(3, R)`` NLL, Brier score and ECE of ``probs`` on each resample of the test rows."""
    pred = Predictions.from_probs(probs.double(), labels)
    nll, brier = nll_terms(pred), brier_terms(pred)
    out = []
    for weights in resamples.chunks():
        total = weights.sum(1)
        out.append(torch.stack([weights @ nll / total, weights @ brier / total]))
    terms = torch.cat(out, 1)
    ece = resampled_values(
        lambda w: M.ece.core(pred, weights=w, n_bins=n_bins),
        pred.n_samples,
        resamples.n_resamples,
        0,
        pred.device,
        resamples,
    )
    return torch.cat([terms, ece.reshape(1, -1)]).numpy()


def intervals_against_baseline(
    metrics: dict[str, float], replicates: dict[str, np.ndarray]
) -> dict[str, float]:
    """``<score>_low.<name>`` / ``<score>_high.<name>``: the centred 95% interval of each
    calibrator's score minus temperature scaling's on this set, paired over the resamples."""
    if BASELINE not in replicates:
        return {}
    base = replicates[BASELINE]
    out = {}
    for name, values in replicates.items():
        for j, score in enumerate(SCORES):
            point = metrics[f"{score}.{name}"] - metrics[f"{score}.{BASELINE}"]
            low, high = interval_bounds(
                torch.from_numpy(values[j] - base[j]), torch.tensor(point), 0.95
            )
            out[f"{score}_low.{name}"] = float(low)
            out[f"{score}_high.{name}"] = float(high)
    return out
