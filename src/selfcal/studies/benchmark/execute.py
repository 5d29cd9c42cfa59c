"""One training run of the benchmark gives both regimes' records: a method candidate trained
once from its seed's initialisation on the seed's data, then evaluated at the last iterate
(``memorise``) and at the checkpoint with the lowest validation NLL (``early-stop``).

Every method trains on the same reduced training set: the loader's training split less a
stratified, seeded 1/9 held out as the meta-validation set that CE-DECE, FLγ-SECE and BO4SC
learn from (the meta-learning papers' 8:1:1; :func:`selfcal.studies._images.load_splits`).
The validation split picks the checkpoint, selects the candidates, and fits the post-hoc
calibrators; the test split is scored once per record and read by nothing else.

Each regime's model is scored raw, after temperature scaling (a single ``T`` fitted by
validation NLL, Guo et al.'s, ``*_ts``; the predicted class is unchanged), after structured
matrix scaling (Berta et al.'s SMS, ``*_sms``; it can change the class), after the calibrator
that :class:`~selfcal.posthoc.AutoCalibration` chooses by 5-fold cross-validation on the
validation split (``*_auto``; the candidates in this version's order, :data:`VERSION_3_AUTO`),
and after top-label isotonic regression mixed with the uniform
distribution (``*_iso``: the top-label confidence is remapped, the class unchanged, so only
top-label metrics exist), each fitted on validation. The validation and test logits and labels
are stored with every record (``val_logits``, ``test_logits``, ``val_labels``,
``test_labels``), so the post-hoc leaderboard (``selfcal reproduce posthoc``) reads them
instead of retraining. ``train_seconds`` is the training time (the per-epoch validation pass
of the checkpointing included, the same for every method).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import torch

import selfcal.metrics as M
from selfcal import Predictions
from selfcal.experiments import RunResult, RunSpec
from selfcal.metrics.binning import top_label_bins
from selfcal.pipeline.fitting import train_method
from selfcal.pipeline.recipe import build_network
from selfcal.posthoc import (
    AutoCalibration,
    IsotonicCalibration,
    StructuredMatrixScaling,
    TemperatureScaling,
    recorded_degenerate_fits,
)
from selfcal.studies import _images
from selfcal.studies.benchmark.protocol import METHODS, BenchmarkProtocol
from selfcal.training import BestCheckpoint

VERSION_3_AUTO = {
    False: ("ts", "ts-mix", "svs", "sms", "ets", "isotonic", "none"),
    True: ("ts", "ts-mix", "platt", "beta", "quadratic", "svs", "sms", "ets", "isotonic", "none"),
}
"""``auto``'s candidates (multiclass, binary) in the order this study version ran them:
temperature scaling first, the default before :data:`selfcal.posthoc.auto.CANDIDATES` put
structured matrix scaling first. Kept so that ``results/benchmark`` reproduces until the
benchmark is regenerated with the new default."""

# Everything is imported at the top, so no training clock pays an import (a worker's first run
# would, and its time relative to CE would be off).


def execute(protocol: BenchmarkProtocol, group: list[RunSpec]) -> list[RunResult]:
    """``group``: the regimes of one (dataset, method, candidate, seed), trained once."""
    results = train_and_evaluate(protocol, group[0])
    return [results[str(spec.hparams["regime"])] for spec in group]


def train_and_evaluate(protocol: BenchmarkProtocol, spec: RunSpec) -> dict[str, RunResult]:
    recipe = protocol.recipe(spec.dataset)
    data, train, meta_val = _images.load_splits(protocol, spec.dataset, spec.seed)
    model = build_network(recipe, data.n_classes, spec.seed, data.n_features)
    device = _images.device_for(spec.dataset)
    model.to(device)
    checkpoint = BestCheckpoint(data.val.x.to(device), data.val.y.to(device))
    options = {k[3:]: v for k, v in spec.hparams.items() if k.startswith("hp.")}
    transform = _images.augmentation(data, spec.dataset)
    start = time.perf_counter()
    extra = train_method(
        METHODS[spec.method],
        options,
        recipe,
        model,
        train,
        meta_val,
        checkpoint,
        seed=spec.seed,
        device=device,
        transform=transform,
        val_batch_size=protocol.val_batch_size,
    )
    extra["train_seconds"] = time.perf_counter() - start
    last = with_metrics(evaluate(protocol, model, data), extra, float(recipe.epochs))
    checkpoint.restore(model)
    best = with_metrics(evaluate(protocol, model, data), extra, float(checkpoint.epoch + 1))
    return {"memorise": last, "early-stop": best}


def with_metrics(result: RunResult, extra: dict[str, float], epochs: float) -> RunResult:
    """``result`` with the training's ``extra`` metrics and the epochs it trained."""
    return dataclasses.replace(result, metrics={**result.metrics, **extra, "hp.epochs": epochs})


# ----------------------------------------------------------------------------- evaluation
def evaluate(protocol: BenchmarkProtocol, model: torch.nn.Module, data: Any) -> RunResult:
    """Validation scores (selection), the training error, and the test scores raw, after
    temperature scaling, SMS, ``auto`` and isotonic regression, with their reliability bins;
    the validation and test predictions as artefacts."""
    z_val, z = _images.logits(model, data.val.x), _images.logits(model, data.test.x)
    val = Predictions.from_logits(z_val, data.val.y)
    with recorded_degenerate_fits() as degenerate:  # counted per run, not printed
        temperature = float(TemperatureScaling().fit(logits=z_val, labels=data.val.y).temperature_)
        iso = IsotonicCalibration().fit(logits=z_val, labels=data.val.y)
    with recorded_degenerate_fits():  # SMS and auto warn in the same cases, counted above
        sms = StructuredMatrixScaling().fit(logits=z_val, labels=data.val.y)
        auto = AutoCalibration(candidates=VERSION_3_AUTO[data.n_classes == 2]).fit(
            logits=z_val, labels=data.val.y
        )
    raw = Predictions.from_logits(z, data.test.y)
    calibrated = {
        "": raw,
        "_ts": Predictions.from_logits(z / temperature, data.test.y),
        "_iso": raw.with_confidence(iso.predict_confidence(logits=z)),
    }
    structured = {
        "_sms": Predictions.from_probs(sms.predict_proba(logits=z), data.test.y),
        "_auto": Predictions.from_probs(auto.predict_proba(logits=z), data.test.y),
    }
    bins = protocol.n_bins
    metrics = {
        "val_nll": float(M.nll(val)),
        "val_ece": float(M.ece(val, n_bins=bins)),
        "val_accuracy": float(M.accuracy(val)),
        "temperature": temperature,
        "degenerate_fits": float(len(degenerate)),
        "train_error": float(
            M.error(logits=_images.logits(model, data.train.x), labels=data.train.y)
        ),
        "accuracy": float(M.accuracy(raw)),
        "aurc": float(M.aurc(raw)),
    }
    metrics.update(_images.scores(raw, bins))
    for suffix, pred in {"_ts": calibrated["_ts"], **structured}.items():
        metrics.update({f"{k}{suffix}": v for k, v in _images.scores(pred, bins).items()})
    metrics.update(
        {
            "ece_iso": float(M.ece(calibrated["_iso"], n_bins=bins)),
            "adaece_iso": float(M.adaece(calibrated["_iso"], n_bins=bins)),
            "mce_iso": float(M.mce(calibrated["_iso"], n_bins=bins)),
        }
    )
    predictions = {
        "val_logits": z_val.float().numpy(),
        "val_labels": data.val.y.numpy(),
        "test_logits": z.float().numpy(),
        "test_labels": data.test.y.numpy(),
    }
    return RunResult(
        metrics=metrics,
        artefacts={
            **{f"bins{suffix or '_raw'}": bin_sums(p, bins) for suffix, p in calibrated.items()},
            **predictions,
        },
    )


def bin_sums(pred: Any, n_bins: int) -> np.ndarray:
    """``[3, n_bins]``: per equal-width bin, the count and the sums of top-label confidence
    and correctness (what a pooled reliability diagram needs)."""
    stats = top_label_bins(pred, n_bins, "uniform")
    return torch.stack([stats.count, stats.confidence_sum, stats.accuracy_sum]).double().numpy()
