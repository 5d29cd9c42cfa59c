"""``selfcal predict`` as a function: :func:`predict` applies a model folder to a file and
writes, per row, the calibrated probability of each class, the predicted label, the
confidence and whether to abstain.

Output by suffix: ``.csv`` / ``.parquet`` -- columns ``prob_<class>`` (one per class, named by
the label mapping), ``predicted`` (the class value), ``confidence`` (``max_k p_k`` of the
calibrated probabilities), ``abstain`` (``confidence < threshold``), and the input's label
column when it has one; ``.npz`` -- arrays ``probs`` ``(N, C)``, ``classes`` ``(C,)``,
``predicted``, ``confidence``, ``abstain`` and ``labels`` when the input has them. The
predicted label is the argmax of the calibrated probabilities (the first class on ties), so
that it, the confidence and the probability columns always agree; temperature scaling never
changes it, top-label isotonic regression can (:class:`selfcal.posthoc.IsotonicCalibration`).

With ``conformal=ALPHA`` (a folder trained with ``--conformal-split``), two more: ``set`` --
the labels of the row's conformal prediction set joined by ``|`` in class order (``.npz``: an
``(N, C)`` boolean array) -- and ``set_size`` (:mod:`selfcal.pipeline.conformal`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from selfcal.io import write_table
from selfcal.pipeline import model_dir as md
from selfcal.pipeline.conformal import DEFAULT_SCORE, ConformalSets, conformal_sets
from selfcal.pipeline.selective import Threshold
from selfcal.pipeline.tables import FeatureTable, read_table

OUTPUT_FORMATS = (".csv", ".parquet", ".pq", ".npz")


@dataclass(frozen=True, eq=False)
class PredictResult:
    """What :func:`predict` computed: ``probs`` ``(N, C)``, ``predicted`` (class values),
    ``confidence``, ``abstain`` and the threshold used, and where it wrote them;
    ``accepted_accuracy``: when the rows have labels, the accuracy of the rows not abstained
    on (``None`` without labels or when every row is abstained on); ``conformal``: the
    prediction sets when asked for, with ``set_coverage`` (the share of labelled rows whose
    label is in their set) when the rows have labels."""

    path: Path
    probs: np.ndarray
    predicted: np.ndarray
    confidence: np.ndarray
    abstain: np.ndarray
    threshold: Threshold
    accepted_accuracy: float | None = None
    conformal: ConformalSets | None = None
    set_coverage: float | None = None


def predict(
    folder: str | Path,
    data: str | Path | FeatureTable,
    out: str | Path,
    *,
    target_accuracy: float | None = None,
    target_coverage: float | None = None,
    conformal: float | None = None,
    conformal_score: str = DEFAULT_SCORE,
) -> PredictResult:
    """Apply the model in ``folder`` to ``data`` and write ``out`` (module doc). The
    abstention threshold is the one chosen on validation for ``target_accuracy`` or
    ``target_coverage`` (at most one; neither: the folder's default, accuracy 0.95).
    ``conformal``: also a prediction set per row at this level, with ``conformal_score``."""
    out = Path(out)
    if out.suffix.lower() not in OUTPUT_FORMATS:
        raise ValueError(f"{out}: unknown output type {out.suffix!r}; use .csv, .parquet or .npz")
    if target_accuracy is not None and target_coverage is not None:
        raise ValueError("give --target-accuracy or --target-coverage, not both")
    model = md.TrainedModel.load(folder)
    if target_accuracy is not None:
        threshold = md.threshold_for(folder, "accuracy", target_accuracy)
    elif target_coverage is not None:
        threshold = md.threshold_for(folder, "coverage", target_coverage)
    else:
        threshold = md.threshold_for(folder)
    table = (
        data
        if isinstance(data, FeatureTable)
        else read_table(data, label_column=model.label_column, require_labels=False)
    )
    truth = None if table.labels is None else model.labels.encode(table.labels, table.name)
    probs = model.predict_proba(model.features(table))
    confidence, index = md.confidence_and_prediction(probs)
    predicted = model.labels.decode(index)
    abstain = threshold.abstain(confidence)
    sets = None if conformal is None else conformal_sets(folder, probs, conformal, conformal_score)
    _write(out, model, table, probs, predicted, confidence, abstain, sets)
    accuracy = None
    if truth is not None and not abstain.all():
        accuracy = float((truth == index)[~abstain].mean())
    covered = None if sets is None or truth is None else sets.coverage(truth)
    return PredictResult(
        out, probs, predicted, confidence, abstain, threshold, accuracy, sets, covered
    )


def probability_columns(model: md.TrainedModel) -> list[str]:
    """``prob_<class>`` for each class, in class order."""
    return [f"prob_{c}" for c in model.labels.classes]


def _write(
    out: Path,
    model: md.TrainedModel,
    table: FeatureTable,
    probs: np.ndarray,
    predicted: np.ndarray,
    confidence: np.ndarray,
    abstain: np.ndarray,
    sets: ConformalSets | None = None,
) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    classes = model.labels.decode(np.arange(model.labels.n_classes))
    if out.suffix.lower() == ".npz":
        arrays: dict[str, Any] = {
            "probs": probs,
            "classes": classes,
            "predicted": predicted,
            "confidence": confidence,
            "abstain": abstain,
        }
        if sets is not None:
            arrays.update({"set": sets.sets, "set_size": sets.sizes})
        if table.labels is not None:
            arrays["labels"] = table.labels
        np.savez(out, **arrays)
        return
    names = probability_columns(model)
    reserved = {"predicted", "confidence", "abstain", "set", "set_size", model.label_column}
    if len(set(names)) != len(names) or reserved & set(names):
        raise ValueError("the class names give clashing column names; write .npz instead")
    columns = {name: probs[:, k] for k, name in enumerate(names)}
    columns.update({"predicted": predicted, "confidence": confidence, "abstain": abstain})
    if sets is not None:
        columns.update({"set": set_labels(sets.sets, classes), "set_size": sets.sizes})
    if table.labels is not None:
        columns[model.label_column] = table.labels
    write_table(out, columns)


SET_SEPARATOR = "|"
"""Joins the labels of a prediction set in a table column."""


def set_labels(sets: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Each row's set as its labels joined by :data:`SET_SEPARATOR`, in class order (an
    empty set: the empty string); a class name holding the separator is an error."""
    names = [str(c) for c in classes]
    if any(SET_SEPARATOR in n for n in names):
        raise ValueError(
            f"a class name contains {SET_SEPARATOR!r}, which joins a set's labels; write .npz"
        )
    return np.array([SET_SEPARATOR.join(n for n, m in zip(names, row) if m) for row in sets])
