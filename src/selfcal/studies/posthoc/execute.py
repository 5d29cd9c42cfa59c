"""One prediction set, every calibrator: each is fitted on the set's validation scores (with
its default hyperparameters) and scored on the test split -- NLL, Brier score, 15-bin ECE and
error -- with its fit time. Warnings a fit raises (a degenerate fit, no convergence) are
counted, not shown; a calibrator that raises ``ValueError`` on a set scores NaN there (its
one-line reason is counted in ``failed.<name>``)."""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np
import torch

import selfcal.metrics as M
from selfcal import Predictions
from selfcal.experiments import RunResult, RunSpec
from selfcal.io import PredictionSet
from selfcal.posthoc import AutoCalibration
from selfcal.posthoc._compare_fits import Fitted, fit_predict
from selfcal.posthoc.auto import BINARY_CANDIDATES, CANDIDATES
from selfcal.studies.posthoc.protocol import (
    BINARY_ONLY,
    REFERENCE,
    PosthocProtocol,
)
from selfcal.studies.posthoc.sources import prediction_set


def execute(protocol: PosthocProtocol, group: list[RunSpec]) -> list[RunResult]:
    return [evaluate(protocol, spec) for spec in group]


def evaluate(protocol: PosthocProtocol, spec: RunSpec) -> RunResult:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn's convergence warnings
        data = prediction_set(protocol, spec)
    metrics: dict[str, float] = {
        "n_val": float(len(data.val_labels)),
        "n_test": float(len(data.test_labels)),
        "n_classes": float(data.n_classes),
    }
    for name in protocol.calibrators:
        if name in BINARY_ONLY and data.n_classes != 2:
            continue
        metrics.update(calibrate(name, data, protocol.n_bins))
    if protocol.reference and data.n_classes > 1:
        metrics.update(probmetrics_sms(data, protocol.n_bins))
    return RunResult(metrics=metrics)


def calibrate(name: str, data: PredictionSet, n_bins: int) -> dict[str, float]:
    """``{metric.name: value}`` of calibrator ``name`` fitted on ``data``'s validation split."""
    fitted = fit_predict(name, data)
    if fitted.probs is None:
        return {f"failed.{name}": 1.0}
    return {**scores(name, fitted.probs, data.test_labels, n_bins), **fit_record(name, fitted)}


def fit_record(name: str, fitted: Fitted) -> dict[str, float]:
    """``seconds.<name>``, ``warnings.<name>`` and, for ``auto``, ``auto.chosen`` (an index
    into :data:`AUTO_NAMES`)."""
    out = {f"seconds.{name}": fitted.seconds, f"warnings.{name}": float(len(fitted.warnings))}
    if isinstance(fitted.calibrator, AutoCalibration):
        out["auto.chosen"] = float(AUTO_NAMES.index(fitted.calibrator.chosen_))
    return out


AUTO_NAMES = tuple(sorted(CANDIDATES + BINARY_CANDIDATES))
"""``auto.chosen`` is an index into these names (the default candidates, sorted)."""


def scores(name: str, probs: torch.Tensor, labels: np.ndarray, n_bins: int) -> dict[str, float]:
    pred = Predictions.from_probs(probs.double(), torch.as_tensor(labels))
    return {
        f"nll.{name}": float(M.nll(pred)),
        f"brier.{name}": float(M.brier(pred)),
        f"ece.{name}": float(M.ece(pred, n_bins=n_bins)),
        f"error.{name}": float(M.error(pred)),
    }


def probmetrics_sms(data: PredictionSet, n_bins: int) -> dict[str, Any]:
    """probmetrics' SMS on the same set (nothing when probmetrics is not installed)."""
    fitted = probmetrics_fit_predict(data)
    if fitted is None:
        return {}
    probs, seconds = fitted
    out = scores(REFERENCE, probs, data.test_labels, n_bins)
    out[f"seconds.{REFERENCE}"] = seconds
    return out


def probmetrics_fit_predict(data: PredictionSet) -> tuple[torch.Tensor, float] | None:
    """probmetrics' SMS fitted on ``data``'s validation split: its test probabilities
    (renormalised: their float32 rows sum to 1 +- 1e-7) and the fit's seconds; ``None`` when
    probmetrics is not installed. Their calibrators take probabilities, so logits go through
    a softmax first."""
    try:
        with warnings.catch_warnings():
            # importing probmetrics' calibrators imports torchmin, whose functions are
            # decorated with torch.jit.script: torch's deprecation of that is about a third
            # party's code, not ours and nothing about the user's data, so it is not shown
            warnings.filterwarnings(
                "ignore", message=r"`torch\.jit\.script` is deprecated", category=DeprecationWarning
            )
            from probmetrics.calibrators import get_calibrator
    except ImportError:
        return None

    def as_probs(s: np.ndarray) -> np.ndarray:
        return s if data.kind == "probs" else torch.softmax(torch.as_tensor(s), 1).numpy()

    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = get_calibrator("sms").fit(as_probs(data.val), data.val_labels)
        seconds = time.perf_counter() - start
        probs = torch.as_tensor(cal.predict_proba(as_probs(data.test)))
    return probs / probs.sum(1, keepdim=True), seconds
