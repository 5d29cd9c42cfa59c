"""``selfcal predict`` as a function: :func:`predict` applies a model folder to a file and
writes, per row, the calibrated probability of each class, the predicted label, the
confidence and whether to abstain.

Output by suffix: ``.csv`` / ``.parquet`` -- columns ``prob_<class>`` (one per class, named by
the label mapping), ``predicted`` (the class value), ``confidence`` (``max_k p_k`` of the
calibrated probabilities), ``abstain`` (``confidence < threshold``; only when a target
risk, accuracy or coverage is given: by default nothing is abstained on), and the input's label
column when it has one; ``.npz`` -- arrays ``probs`` ``(N, C)``, ``classes`` ``(C,)``,
``predicted``, ``confidence``, ``abstain`` (as above) and ``labels`` when the input has them.
Labels the training data did not have are kept in the output and warned about
(:class:`~selfcal.exceptions.UnseenLabels`): those rows are predicted but not scored. The
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

from selfcal._warnings import warn_user
from selfcal.abstention import Certificate
from selfcal.exceptions import UnseenLabels
from selfcal.io import write_table
from selfcal.pipeline import model_dir as md
from selfcal.pipeline.conformal import DEFAULT_SCORE, ConformalSets, conformal_sets
from selfcal.pipeline.guarantee import (
    DEFAULT_DELTA,
    DEFAULT_RULE,
    certificate_for,
    stored_guarantee,
)
from selfcal.pipeline.selective import Threshold
from selfcal.pipeline.tables import FeatureTable, read_table

OUTPUT_FORMATS = (".csv", ".parquet", ".pq", ".npz")


@dataclass(frozen=True, eq=False)
class PredictResult:
    """What :func:`predict` computed: ``probs`` ``(N, C)``, ``predicted`` (class values),
    ``confidence``, ``abstain`` and the threshold used (``None`` for both without a target:
    nothing abstained on), and where it wrote them; ``accepted_accuracy``: when the rows
    have labels, the accuracy of the rows not abstained on (``None`` without labels or when
    every row is abstained on); ``conformal``: the prediction sets when asked for, with
    ``set_coverage`` (the share of labelled rows whose label is in their set) when the rows
    have labels; ``unseen_labels``: the rows whose label the training data did not have
    (left out of both scores); ``certificate``: with a target risk, the certified threshold
    and its promise (:mod:`selfcal.pipeline.guarantee`; ``threshold`` is then ``None``)."""

    path: Path
    probs: np.ndarray
    predicted: np.ndarray
    confidence: np.ndarray
    abstain: np.ndarray | None
    threshold: Threshold | None
    accepted_accuracy: float | None = None
    conformal: ConformalSets | None = None
    set_coverage: float | None = None
    unseen_labels: int = 0
    certificate: Certificate | None = None


def predict(
    folder: str | Path,
    data: str | Path | FeatureTable,
    out: str | Path,
    *,
    target_accuracy: float | None = None,
    target_coverage: float | None = None,
    conformal: float | None = None,
    conformal_score: str = DEFAULT_SCORE,
    target_risk: float | None = None,
    delta: float = DEFAULT_DELTA,
    rule: str = DEFAULT_RULE,
) -> PredictResult:
    """Apply the model in ``folder`` to ``data`` and write ``out`` (module doc). With
    ``target_accuracy`` or ``target_coverage`` (at most one), rows below the threshold chosen
    on validation for it are abstained on (the empirical rule: no promise); with
    ``target_risk`` (instead of both), rows below the threshold certified by ``rule`` at
    ``delta`` on the held-out rows (:mod:`selfcal.pipeline.guarantee`); with none of them, the
    guarantee the folder keeps (``selfcal train --target-risk``), or else none is (no
    ``abstain`` column). ``conformal``: also a prediction set per row at this level,
    with ``conformal_score``."""
    out = Path(out)
    if out.suffix.lower() not in OUTPUT_FORMATS:
        raise ValueError(f"{out}: unknown output type {out.suffix!r}; use .csv, .parquet or .npz")
    given = [target_accuracy, target_coverage, target_risk]
    if sum(t is not None for t in given) > 1:
        raise ValueError("give one of --target-risk, --target-accuracy, --target-coverage")
    model = md.TrainedModel.load(folder)
    certificate = None
    kept = stored_guarantee(model.config)
    if kept is not None and not any(t is not None for t in given):
        target_risk, delta, rule = kept  # the guarantee the folder keeps
    if target_risk is not None:
        n_classes = model.labels.n_classes
        certificate = certificate_for(folder, n_classes, target_risk, delta=delta, rule=rule)
    threshold = None
    if target_accuracy is not None:
        threshold = md.threshold_for(folder, "accuracy", target_accuracy)
    elif target_coverage is not None:
        threshold = md.threshold_for(folder, "coverage", target_coverage)
    table = (
        data
        if isinstance(data, FeatureTable)
        else read_table(data, label_column=model.label_column, require_labels=False)
    )
    probs = model.predict_proba(model.features(table))
    confidence, index = md.confidence_and_prediction(probs)
    predicted = model.labels.decode(index)
    abstain = None if threshold is None else threshold.abstain(confidence)
    if certificate is not None:
        abstain = certificate.abstain(confidence)
    sets = None if conformal is None else conformal_sets(folder, probs, conformal, conformal_score)
    _write(out, model, table, probs, predicted, confidence, abstain, sets)
    if table.labels is None:
        return PredictResult(
            out, probs, predicted, confidence, abstain, threshold, None, sets, None, 0, certificate
        )
    truth, known = model.labels.encode_known(table.labels)
    unseen = int((~known).sum())
    if unseen:
        _warn_unseen(table, known)
    scored = known if abstain is None else known & ~abstain
    accuracy = float((truth == index)[scored].mean()) if scored.any() else None
    covered = None
    if sets is not None and known.any():
        covered = float(sets.sets[np.flatnonzero(known), truth[known]].mean())
    return PredictResult(
        out,
        probs,
        predicted,
        confidence,
        abstain,
        threshold,
        accuracy,
        sets,
        covered,
        unseen,
        certificate,
    )


def _warn_unseen(table: FeatureTable, known: np.ndarray) -> None:
    unseen = np.unique(table.labels[~known].astype(str))  # type: ignore[index]
    shown = ", ".join(f"'{v}'" for v in unseen[:3]) + (", ..." if len(unseen) > 3 else "")
    warn_user(
        f"{table.name}: {int((~known).sum())} of {len(known)} rows have labels the model was "
        f"not trained on ({shown}); predicted, but left out of the scores",
        UnseenLabels,
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
    abstain: np.ndarray | None,
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
        }
        if abstain is not None:
            arrays["abstain"] = abstain
        if sets is not None:
            arrays.update({"set": sets.sets, "set_size": sets.sizes})
        if table.labels is not None:
            arrays["labels"] = table.labels
        with open(out, "wb") as fh:  # np.savez would append .npz to a name ending .NPZ
            np.savez(fh, **arrays)
        return
    names = probability_columns(model)
    reserved = {"predicted", "confidence", "abstain", "set", "set_size", model.label_column}
    if len(set(names)) != len(names) or reserved & set(names):
        raise ValueError("the class names give clashing column names; write .npz instead")
    columns = {name: probs[:, k] for k, name in enumerate(names)}
    columns.update({"predicted": predicted, "confidence": confidence})
    if abstain is not None:
        columns["abstain"] = abstain
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
