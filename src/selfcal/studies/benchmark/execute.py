"""One training run of the benchmark gives the three regimes' records: a method candidate
trained once from its seed's initialisation on the seed's data, then evaluated at the last
iterate (``memorise``), at the checkpoint with the lowest validation NLL (``early-stop``) and at
the checkpoint with the lowest validation refinement loss -- the validation NLL after a
temperature fitted on the same predictions, computed after every epoch (``refine-stop``;
Berta et al., 2025).

Every method trains on the same reduced training set: the loader's training split less a
stratified, seeded 1/9 held out as the meta-validation set that CE-DECE, FLγ-SECE and BO4SC
learn from (the meta-learning papers' 8:1:1; :func:`selfcal.studies._images.load_splits`).
The validation split picks the checkpoint, selects the candidates, and fits the post-hoc
calibrators; the test split is scored once per record and read by nothing else.

Each regime's model is scored raw, after temperature scaling (a single ``T`` fitted by
validation NLL, Guo et al.'s, ``*_ts``; the predicted class is unchanged), after structured
matrix scaling (Berta et al.'s SMS, ``*_sms``; it can change the class), after the calibrator
that :class:`~selfcal.posthoc.AutoCalibration` chooses by 5-fold cross-validation on the
validation split (``*_auto``), and after top-label isotonic regression mixed with the uniform
distribution (``*_iso``: the top-label confidence is remapped, the class unchanged, so only
top-label metrics exist), each fitted on validation. The validation and test logits and labels
are stored with every record (``val_logits``, ``test_logits``, ``val_labels``,
``test_labels``), so the post-hoc leaderboard (``selfcal reproduce posthoc``) reads them
instead of retraining. ``train_seconds`` is the training time (the per-epoch validation pass
of the checkpointing included, the same for every method).

Under shift: every regime's model is also scored on the dataset's shifted test sets
(:mod:`selfcal.data.shift`: each corruption at severities 1-5, fixed by seed) raw and after the
same TS, SMS and ``auto`` maps fitted on the clean validation split -- ECE, NLL and accuracy,
``shift.<corruption>.<severity>.<metric><suffix>`` (inference only, no extra training).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import torch

import selfcal.metrics as M
from selfcal import Predictions
from selfcal.data.shift import shifted_test_sets
from selfcal.experiments import RunResult, RunSpec
from selfcal.methods import build_network, train_method
from selfcal.metrics.binning import top_label_bins
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
    checkpoint = BestCheckpoint(
        data.val.x.to(device), data.val.y.to(device), criteria=("nll", "refinement")
    )
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
    shifted = shifted_test_sets(data)
    out = {"memorise": with_metrics(evaluate(protocol, model, data, shifted), extra, recipe.epochs)}
    for regime, criterion in (("early-stop", "nll"), ("refine-stop", "refinement")):
        checkpoint.restore(model, criterion)
        epochs = checkpoint.kept[criterion].epoch + 1
        out[regime] = with_metrics(evaluate(protocol, model, data, shifted), extra, epochs)
    return out


def with_metrics(result: RunResult, extra: dict[str, float], epochs: int) -> RunResult:
    """``result`` with the training's ``extra`` metrics and the epochs it trained."""
    metrics = {**result.metrics, **extra, "hp.epochs": float(epochs)}
    return dataclasses.replace(result, metrics=metrics)


# ----------------------------------------------------------------------------- evaluation
def evaluate(
    protocol: BenchmarkProtocol,
    model: torch.nn.Module,
    data: Any,
    shifted: dict[tuple[str, int], Any],
) -> RunResult:
    """Validation scores (selection), the training error, and the test scores raw, after
    temperature scaling, SMS, ``auto`` and isotonic regression, with their reliability bins;
    the same maps' scores on every ``shifted`` test set; the validation and test predictions
    as artefacts."""
    z_val, z = _images.logits(model, data.val.x), _images.logits(model, data.test.x)
    val = Predictions.from_logits(z_val, data.val.y)
    with recorded_degenerate_fits() as degenerate:  # counted per run, not printed
        temperature = float(TemperatureScaling().fit(logits=z_val, labels=data.val.y).temperature_)
        iso = IsotonicCalibration().fit(logits=z_val, labels=data.val.y)
    with recorded_degenerate_fits():  # SMS and auto warn in the same cases, counted above
        sms = StructuredMatrixScaling().fit(logits=z_val, labels=data.val.y)
        auto = AutoCalibration().fit(logits=z_val, labels=data.val.y)
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
        "val_refinement": float(M.nll(Predictions.from_logits(z_val / temperature, data.val.y))),
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
    metrics.update(shift_scores(model, shifted, temperature, sms, auto, bins))
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


def shift_scores(
    model: torch.nn.Module,
    shifted: dict[tuple[str, int], Any],
    temperature: float,
    sms: StructuredMatrixScaling,
    auto: AutoCalibration,
    n_bins: int,
) -> dict[str, float]:
    """ECE, NLL and accuracy on every shifted test set, raw and after the clean-validation
    TS, SMS and ``auto`` maps: ``shift.<corruption>.<severity>.<metric><suffix>``."""
    out = {}
    for (corruption, severity), split in shifted.items():
        z = _images.logits(model, split.x)
        preds = {
            "": Predictions.from_logits(z, split.y),
            "_ts": Predictions.from_logits(z / temperature, split.y),
            "_sms": Predictions.from_probs(sms.predict_proba(logits=z), split.y),
            "_auto": Predictions.from_probs(auto.predict_proba(logits=z), split.y),
        }
        key = f"shift.{corruption}.{severity}."
        for suffix, pred in preds.items():
            out[f"{key}ece{suffix}"] = float(M.ece(pred, n_bins=n_bins))
            out[f"{key}nll{suffix}"] = float(M.nll(pred))
            out[f"{key}accuracy{suffix}"] = float(M.accuracy(pred))
    return out


def bin_sums(pred: Any, n_bins: int) -> np.ndarray:
    """``[3, n_bins]``: per equal-width bin, the count and the sums of top-label confidence
    and correctness (what a pooled reliability diagram needs)."""
    stats = top_label_bins(pred, n_bins, "uniform")
    return torch.stack([stats.count, stats.confidence_sum, stats.accuracy_sum]).double().numpy()
