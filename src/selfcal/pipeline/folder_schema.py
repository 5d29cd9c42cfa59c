"""What a model folder's files must hold to be read: every field of ``config.json``, the
tensors of ``model.safetensors``, the thresholds of ``selective.json`` and the arrays of
``validation.npz`` and ``conformal.npz``, checked when ``selfcal predict`` reads them.

A model folder is untrusted input (:mod:`selfcal.pipeline.model_dir`): its checksums catch a
file changed by accident, and these checks catch a file that is consistent with its checksum
but not with what ``selfcal train`` writes (an edited and re-sealed folder, or one written by
other code). A failure is one line naming the file and the field; nothing is allocated from an
unchecked size (the network is first built on PyTorch's ``meta`` device, which holds shapes
only, and its shapes compared with the weights file's header).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from selfcal.io import read_npz_required
from selfcal.models import build_model
from selfcal.pipeline.prepare import LabelMap, Standardizer
from selfcal.pipeline.selective import Threshold
from selfcal.predictions import Predictions

BUILT = {"name": "mlp", "activation": "relu", "dropout": 0.0}
"""The architecture ``selfcal train`` builds and ``selfcal predict`` rebuilds (a folder that
names another is refused rather than silently predicted with this one)."""


@dataclass(frozen=True)
class FolderParts:
    """The checked contents of ``config.json``: feature columns, their standardisation, the
    label mapping and the hidden widths."""

    columns: tuple[str, ...]
    standardizer: Standardizer
    labels: LabelMap
    hidden: tuple[int, ...]


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _numbers(
    path: Path, field: str, value: Any, n: int, ok: Callable[[float], bool], what: str
) -> np.ndarray:
    """A list of ``n`` numbers each satisfying ``ok``, as float64."""
    if not (isinstance(value, list) and len(value) == n and all(_is_number(v) for v in value)):
        raise ValueError(f"{path}: {field} must be a list of {n} numbers (one per feature column)")
    array = np.asarray(value, dtype=np.float64)
    bad = [i for i, v in enumerate(array) if not ok(float(v))]
    if bad:
        raise ValueError(f"{path}: {field}[{bad[0]}] is {array[bad[0]]!r}; it must be {what}")
    return array


def _section(path: Path, config: dict[str, Any], key: str) -> dict[str, Any]:
    section = config.get(key)
    if not isinstance(section, dict):
        raise ValueError(f"{path}: {key} must be an object, got {section!r:.60}")
    return section


def _distinct(path: Path, field: str, values: Any, kinds: tuple[type, ...], least: int) -> list:
    """A list of at least ``least`` distinct values, all of one of ``kinds`` (bool excluded)."""
    ok = isinstance(values, list) and len(values) >= least
    ok = ok and any(all(type(v) is kind for v in values) for kind in kinds)
    if not ok or len({str(v) for v in values}) != len(values):
        names = " or ".join(kind.__name__ for kind in kinds)
        raise ValueError(
            f"{path}: {field} must be a list of at least {least} distinct {names} values, "
            f"got {values!r:.60}"
        )
    return values


def folder_parts(path: Path, config: dict[str, Any]) -> FolderParts:
    """``config.json``'s features, labels and architecture, every field checked (one line
    naming ``path`` and the field); the architecture must be :data:`BUILT`."""
    features, labels = _section(path, config, "features"), _section(path, config, "labels")
    arch = _section(path, config, "architecture")
    columns = tuple(_distinct(path, "features.columns", features.get("columns"), (str,), 1))
    n = len(columns)
    mean = _numbers(path, "features.mean", features.get("mean"), n, math.isfinite, "finite")
    std = _numbers(
        path, "features.std", features.get("std"), n, lambda s: math.isfinite(s) and s > 0, "> 0"
    )
    column = labels.get("column")
    if not isinstance(column, str) or column in columns:
        raise ValueError(f"{path}: labels.column must be the name of a column that is no feature")
    classes = _distinct(path, "labels.classes", labels.get("classes"), (int, str), 2)
    built = {key: arch.get(key, BUILT[key] if key != "dropout" else None) for key in BUILT}
    if built != BUILT:
        raise ValueError(
            f"{path}: architecture {built['name']!r} with activation {built['activation']!r} "
            f"and dropout {built['dropout']!r}; selfcal predicts with the MLP selfcal train "
            f"builds {tuple(BUILT.values())!r}"
        )
    hidden = arch.get("hidden")
    if not (isinstance(hidden, list) and all(_is_count(h) for h in hidden)):
        raise ValueError(f"{path}: architecture.hidden must be a list of positive integers")
    if (arch.get("n_features"), arch.get("n_classes")) != (n, len(classes)):
        raise ValueError(
            f"{path}: architecture.n_features and n_classes must be the numbers of feature "
            f"columns and classes ({n}, {len(classes)})"
        )
    return FolderParts(columns, Standardizer(mean, std), LabelMap(tuple(classes)), tuple(hidden))


def load_network(path: Path, parts: FolderParts, load_file: Callable[[str], Any]) -> nn.Module:
    """The MLP of ``parts`` with the float32 weights of the safetensors file ``path``: its
    tensor names, shapes and dtype are compared with the network's before anything of the
    network's size is allocated, and every weight must be finite."""
    shape = {"n_features": len(parts.columns), "n_classes": parts.labels.n_classes}
    with torch.device("meta"):
        expected = build_model("mlp", hidden=parts.hidden, **shape).state_dict()
    header = _header(path)
    for name, tensor in expected.items():
        found = header.get(name)
        if found != ("F32", list(tensor.shape)):
            got = "no such tensor" if found is None else f"{found[0]} {found[1]}"
            raise ValueError(
                f"{path} does not fit the network of config.json: {name} must be F32 "
                f"{list(tensor.shape)}, the file has {got}"
            )
    if extra := sorted(set(header) - set(expected)):
        raise ValueError(f"{path} holds tensors the network does not have: {', '.join(extra)}")
    state = load_file(str(path))
    for name, tensor in state.items():
        if not bool(torch.isfinite(tensor).all()):
            raise ValueError(f"{path}: the weights {name} hold NaN or infinite values")
    network = build_model("mlp", hidden=parts.hidden, **shape)
    network.load_state_dict(state, strict=True)
    return network


def _header(path: Path) -> dict[str, tuple[str, list[int]]]:
    """``name -> (dtype, shape)`` of a safetensors file, read from its header only."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            slices = {name: handle.get_slice(name) for name in handle.keys()}
            return {name: (s.get_dtype(), list(s.get_shape())) for name, s in slices.items()}
    except (SafetensorError, OSError) as exc:
        raise ValueError(f"{path}: not a safetensors file ({exc})") from None


def read_validation(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``validation.npz``'s ``(confidence, correct)``: two arrays of one length, confidences
    in [0, 1] and correctness boolean, read by the one reader of untrusted array files
    (:func:`selfcal.io.read_npz_required`: a regular file, sizes bounded before any data)."""
    arrays = read_npz_required(
        path, ("confidence", "correct"), "the validation confidences selfcal train writes"
    )
    confidence, correct = arrays["confidence"], arrays["correct"]
    if (
        confidence.ndim != 1
        or confidence.size == 0
        or confidence.shape != correct.shape
        or confidence.dtype.kind != "f"
        or correct.dtype != np.bool_
        or not np.all((confidence >= 0) & (confidence <= 1))
    ):
        raise ValueError(
            f"{path}: confidence must be a non-empty float array in [0, 1] and correct a "
            "boolean array of the same length"
        )
    return confidence, correct


def read_conformal(path: Path, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """``conformal.npz``'s ``(probs, labels)`` as ``selfcal train --conformal-split`` writes
    them: ``probs`` ``(n, n_classes)`` float probabilities (each row in [0, 1], summing to 1)
    and ``labels`` ``(n,)`` integer classes in ``[0, n_classes)``, ``n >= 1``; read by the one
    reader of untrusted array files, checked here so that a wrong file is one line naming it
    rather than an error of the conformal fit."""
    arrays = read_npz_required(
        path, ("probs", "labels"), "the conformal calibration rows selfcal train writes"
    )
    probs, labels = arrays["probs"], arrays["labels"]
    if probs.ndim != 2 or probs.shape[1] != n_classes or probs.shape[0] == 0:
        raise ValueError(
            f"{path}: probs must be (n, {n_classes}), one column per class of the model, got "
            f"shape {probs.shape}"
        )
    if probs.dtype.kind != "f" or labels.dtype.kind not in "iu":
        raise ValueError(
            f"{path}: probs must be floats and labels integers, got {probs.dtype} and "
            f"{labels.dtype}"
        )
    try:
        Predictions.from_probs(probs, labels)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return probs, labels


THRESHOLD_FIELDS = ("kind", "target", "threshold", "coverage", "accuracy")
"""The fields of each threshold of ``selective.json`` (:meth:`Threshold.to_json`)."""


def read_thresholds(path: Path, doc: Any) -> tuple[list[Threshold], tuple[str, float]]:
    """``selective.json``'s thresholds and its default ``(kind, target)``, every field checked:
    an object of exactly ``default`` (``{"kind", "target"}``) and ``thresholds`` (a non-empty
    list of objects of exactly :data:`THRESHOLD_FIELDS`, each checked by
    :meth:`Threshold.from_json`) -- what ``selfcal train`` writes, nothing else, so that a
    wrong type is one line naming the field rather than an error from inside."""
    _exact_keys(path, "selective.json", doc, ("default", "thresholds"))
    _exact_keys(path, "default", doc["default"], ("kind", "target"))
    default = _threshold(path, "default", {**doc["default"], "coverage": 0})
    listed = doc["thresholds"]
    if not isinstance(listed, list) or not listed:
        raise ValueError(f"{path}: thresholds must be a non-empty list, got {listed!r:.60}")
    thresholds = []
    for i, entry in enumerate(listed):
        _exact_keys(path, f"thresholds[{i}]", entry, THRESHOLD_FIELDS)
        thresholds.append(_threshold(path, f"thresholds[{i}]", entry))
    return thresholds, (default.kind, default.target)


def _exact_keys(path: Path, field: str, value: Any, keys: tuple[str, ...]) -> None:
    """``value`` must be an object with exactly ``keys``."""
    if not isinstance(value, dict) or set(value) != set(keys):
        got = sorted(value) if isinstance(value, dict) else type(value).__name__
        raise ValueError(
            f"{path}: {field} must be an object of exactly {', '.join(keys)}; got {got}"
        )


def _threshold(path: Path, field: str, entry: dict[str, Any]) -> Threshold:
    try:
        return Threshold.from_json(entry)
    except ValueError as exc:
        raise ValueError(f"{path}: {field}.{exc}") from None
