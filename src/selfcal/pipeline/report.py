"""The calibration report of a trained model: ``report.json`` and ``report.md``.

For the validation set and, when given, the test set: accuracy, NLL, ECE, AdaECE (both 15
bins) and the Brier score, each with a 95% bootstrap interval (centred), before post-hoc
calibration (the network's softmax) and after it. Both columns of a split read the same
resamples (:class:`selfcal.metrics.bootstrap.Resamples`, drawn once from the seed), as
:func:`selfcal.evaluation.evaluate` does; the number of resamples is
:func:`selfcal.evaluation.default_resamples` unless given. The calibrator is fitted on the
validation set, so its validation numbers after calibration are in-sample: the test set is
where calibration is judged. Also: every candidate's validation scores and which was
selected, the abstention thresholds, and where the data came from. Non-finite numbers are
written as ``null`` in JSON.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from selfcal.evaluation import evaluate, format_number
from selfcal.pipeline.fitting import STOP_WORDS, Selection, describe
from selfcal.pipeline.selective import Threshold
from selfcal.predictions import Predictions

REPORT_KEYS = ("accuracy", "nll", "ece", "adaece", "brier")
"""The report's metrics, keys of :data:`selfcal.evaluation.METRICS`."""
N_BINS = 15
CONFIDENCE = 0.95
COLUMN_TITLES = {"raw": "before calibration", "calibrated": "after calibration"}


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def metrics_with_intervals(
    preds: Mapping[str, Predictions], *, n_resamples: int | None, seed: int
) -> dict[str, dict[str, dict[str, Any]]]:
    """``{column: {metric: {"value": v, "ci": [lo, hi]}}}`` for the predictions of one split
    (``column``: ``"raw"``, ``"calibrated"``) by :func:`selfcal.evaluation.evaluate`: every
    metric and column on the same resamples, drawn from ``seed``."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for column, pred in preds.items():
        intervals = evaluate(
            pred,
            keys=REPORT_KEYS,
            n_bins=N_BINS,
            n_resamples=n_resamples,
            confidence=CONFIDENCE,
            seed=seed,
        )
        out[column] = {
            key: {"value": _finite(iv.value), "ci": [_finite(iv.low), _finite(iv.high)]}
            for key, iv in intervals.items()
        }
    return out


def split_predictions(
    logits: torch.Tensor, probs: torch.Tensor, labels: torch.Tensor, calibrated: bool
) -> dict[str, Predictions]:
    """The split's predictions before (``raw``) and, with a calibrator, after calibration."""
    out = {"raw": Predictions.from_logits(logits, labels)}
    if calibrated:
        out["calibrated"] = Predictions.from_probs(probs, labels)
    return out


def candidates_json(selection: Selection) -> list[dict[str, Any]]:
    """Every candidate: hyperparameters, status, validation scores, checkpoint, seconds."""
    rows = []
    for i, c in enumerate(selection.candidates):
        rows.append(
            {
                "hyperparameters": c.hyperparameters,
                "status": c.status,
                "reason": c.reason,
                "selected": i == selection.selected,
                "criterion": _finite(c.metrics.get(selection.criterion.metric, math.nan)),
                "validation": {k: _finite(v) for k, v in c.metrics.items()},
                "checkpoint_epoch": c.best_epoch if c.status == "done" else None,
                "epochs_trained": c.epochs_trained,
                "seconds": c.seconds,
            }
        )
    return rows


def stopping(model: dict[str, Any]) -> str:
    """How the selected candidate's training ended: ``"53 of 400 epochs trained, patience
    50"``, or ``"400 epochs trained"``."""
    epochs, trained = model["recipe"]["epochs"], model.get("epochs_trained")
    patience = model.get("patience")
    if patience is None or trained is None:  # every epoch (folders before the keys: too)
        return f"{epochs} epochs trained"
    return f"{trained} of {epochs} epochs trained, patience {patience}"


# ----------------------------------------------------------------------------- Markdown
def _fmt(x: float | None, digits: int = 4) -> str:
    return format_number(x, digits)


def _cell(entry: Mapping[str, Any]) -> str:
    lo, hi = entry["ci"]
    return f"{_fmt(entry['value'])} [{_fmt(lo)}, {_fmt(hi)}]"


def markdown(report: Mapping[str, Any]) -> str:
    """``report.md`` from the report's JSON document."""
    model, data = report["model"], report["data"]
    lines = [
        f"# selfcal train: {model['method']}",
        "",
        f"Trained by `{report['command']}` with selfcal {report['selfcal_version']} "
        f"(torch {report['torch_version']}).",
        "",
        "## Model",
        "",
        f"* method: **{model['method']}**, selected hyperparameters: "
        f"{describe(model['hyperparameters'])} (by {model['criterion']}; checkpoint: epoch "
        f"{model['checkpoint_epoch']}, {STOP_WORDS[model.get('stop_by', 'nll')]}; "
        f"{stopping(model)})",
        f"* network: MLP {model['hidden']} on {len(data['columns'])} standardised features, "
        f"{len(data['classes'])} classes; Adam lr {model['recipe']['lr']:g}, "
        f"{model['recipe']['epochs']} epochs, "
        + (
            "full batch"
            if model["recipe"]["batch_size"] is None
            else f"batches of {model['recipe']['batch_size']}"
        )
        + f", seed {model['seed']}",
        f"* post-hoc calibration: {model['calibrator'] or 'none'} (fitted on the validation set)",
        "* rows: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in data["rows"].items()),
        "",
        "## Candidates",
        "",
        f"Each trained from seed {model['seed']}; selected by {model['criterion']}.",
        "",
        "| hyperparameters | status | val ECE | val NLL | val accuracy | checkpoint epoch | s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for c in report["candidates"]:
        v = c["validation"]
        mark = " **(selected)**" if c["selected"] else ""
        status = c["status"] if c["status"] == "done" else f"failed: {c['reason']}"
        lines.append(
            f"| {describe(c['hyperparameters'])}{mark} | {status} | {_fmt(v.get('val_ece'))} | "
            f"{_fmt(v.get('val_nll'))} | {_fmt(v.get('val_accuracy'))} | "
            f"{c['checkpoint_epoch'] if c['checkpoint_epoch'] is not None else 'n/a'} | "
            f"{c['seconds']:.1f} |"
        )
    lines += _metric_sections(report)
    lines += ["", "## Abstention", ""]
    lines += [f"* {Threshold.from_json(t).describe()}" for t in report["selective"]]
    lines += [
        "",
        "`selfcal predict` abstains when the calibrated confidence is below the threshold "
        "(other targets: `--target-accuracy A` or `--target-coverage C`, chosen on the same "
        "validation confidences).",
        "",
    ]
    kept = report.get("abstention")
    if kept is not None:
        lines += [
            f"With a guarantee ({kept['rule']} at target risk {kept['target_risk']:g}, kept in "
            f"the folder and applied by `selfcal predict` when given no target): "
            f"{kept['promise']}",
            "",
        ]
    return "\n".join(lines)


def _metric_sections(report: Mapping[str, Any]) -> list[str]:
    boot = report["bootstrap"]
    lines = [
        "",
        "## Calibration",
        "",
        "Value [95% bootstrap interval, centred on the value]; ECE and AdaECE with "
        f"{N_BINS} bins. The calibrator was fitted on the validation set: its validation "
        "numbers after calibration are in-sample.",
    ]
    for split, columns in report["metrics"].items():
        names = list(columns)
        lines += [
            "",
            f"### {split} ({boot['n_resamples'][split]} resamples)",
            "",
            "| metric | " + " | ".join(COLUMN_TITLES.get(c, c) for c in names) + " |",
            "|---|" + "---:|" * len(names),
        ]
        for key in REPORT_KEYS:
            lines.append(f"| {key} | " + " | ".join(_cell(columns[c][key]) for c in names) + " |")
    return lines
