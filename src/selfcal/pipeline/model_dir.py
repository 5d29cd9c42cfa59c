"""The folder ``selfcal train`` writes and ``selfcal predict`` reads. Nothing is pickled.

=====================  ==================================================================
``model.safetensors``  the network's parameters (float32, safetensors)
``config.json``        format and versions (selfcal, torch), the architecture, method,
                       selected hyperparameters and criterion, recipe, seed, feature columns
                       with the standardisation (mean, std), label column and classes,
                       and the abstention guarantee kept by ``--target-risk``
                       (:mod:`selfcal.pipeline.guarantee`)
``calibrator.json``    the post-hoc calibrator fitted on VAL (the :mod:`selfcal.posthoc` JSON
                       format); absent with ``--calibrator none``
``selective.json``     the abstention thresholds chosen on VAL for the default targets
``validation.npz``     VAL's calibrated confidences and correctness (arrays ``confidence``,
                       ``correct``), from which a threshold for any other target is chosen
``conformal.npz``      with ``--conformal-split``: the held-out validation rows' calibrated
                       probabilities and labels, for conformal prediction sets
                       (:mod:`selfcal.pipeline.conformal`)
``report.md/.json``    the calibration report (:mod:`selfcal.pipeline.report`)
=====================  ==================================================================

A folder is read only if its ``config.json`` says ``format: selfcal-model`` with a
``format_version`` of :data:`READS`: a folder of another layout version is refused with a
message naming both versions (the selfcal and torch versions that wrote it are recorded, not
checked). A folder is untrusted input: it reads only its own regular files (:func:`member`),
and from version 2 ``config.json`` carries the SHA-256 of the files ``predict`` reads and of
itself (:func:`seal`), so a folder edited or damaged after training is refused, naming the
file; every field and tensor it holds is checked as it is read
(:mod:`selfcal.pipeline.folder_schema`), so a re-sealed edit is refused as well. Predictions
are computed on the CPU: standardise in float64, cast to float32, the network's logits, in
float64 the calibrator's probabilities -- the same code path at training time (for the
validation confidences, the threshold and the report) as in ``selfcal predict``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from selfcal.estimator import persistence
from selfcal.methods import network_logits
from selfcal.pipeline.folder_schema import (
    folder_parts,
    load_network,
    read_thresholds,
    read_validation,
)
from selfcal.pipeline.prepare import LabelMap, Standardizer, aligned_features
from selfcal.pipeline.selective import Threshold, choose_threshold
from selfcal.pipeline.tables import FeatureTable
from selfcal.posthoc import Calibrator
from selfcal.predictions import Predictions

FORMAT = "selfcal-model"
FORMAT_VERSION = 2
READS = (1, 2)
"""The layout versions read: 2 adds the checksums (``config.json``'s ``checksums`` of the files
``predict`` reads, and ``checksum`` of the configuration itself); 1 has none."""
CHECKED = (
    "model.safetensors",
    "calibrator.json",
    "selective.json",
    "validation.npz",
    "conformal.npz",
)
"""The files whose SHA-256 ``config.json`` records."""
WEIGHTS = "model.safetensors"
CONFIG = "config.json"
CALIBRATOR = "calibrator.json"
SELECTIVE = "selective.json"
VALIDATION = "validation.npz"
REPORT_MD = "report.md"
REPORT_JSON = "report.json"
CONFORMAL = "conformal.npz"
FILES = (WEIGHTS, CONFIG, CALIBRATOR, SELECTIVE, VALIDATION, CONFORMAL, REPORT_MD, REPORT_JSON)
"""Every file a model folder may hold."""
MAX_JSON_BYTES = 1 << 30
"""The largest JSON file of a model folder read (a 1,000-class matrix calibrator is ~25 MB)."""


def member(folder: str | Path, name: str) -> Path | None:
    """The file ``name`` of a model folder (``None`` when absent). A model folder is untrusted
    input and reads only its own files: a name that is not one of :data:`FILES` (``../x``, an
    absolute path), a symbolic link, or something other than a regular file (``/dev/zero``, a
    folder) is a one-line error naming it."""
    if name not in FILES:
        raise ValueError(
            f"{Path(folder) / CONFIG} names the file {name!r}; a model folder reads only its own "
            f"files ({', '.join(FILES)})"
        )
    path = Path(folder) / name
    if path.is_symlink():
        raise ValueError(f"{path}: a symbolic link; a model folder reads only its own files")
    if not path.exists():
        return None
    if not path.is_file():
        raise ValueError(f"{path}: not a regular file")
    return path


def read_json(path: Path) -> Any:
    """A model folder's JSON file, read as untrusted input
    (:func:`selfcal.estimator.persistence.read_json`, capped at :data:`MAX_JSON_BYTES`)."""
    return persistence.read_json(path, "a selfcal model folder's file", MAX_JSON_BYTES)


def _safetensors() -> Any:
    """``safetensors.torch``, imported on first use (not at ``selfcal`` start-up)."""
    import safetensors.torch as st

    return st


def write_json(path: Path, doc: Any) -> None:
    """JSON with floats written by ``repr`` (exact round trip); NaN and infinity refused."""
    path.write_text(json.dumps(doc, indent=1, allow_nan=False, ensure_ascii=False) + "\n")


def save_weights(folder: Path, state: dict[str, torch.Tensor]) -> None:
    """The network's parameters as ``model.safetensors``."""
    tensors = {k: v.detach().cpu().contiguous() for k, v in state.items()}
    _safetensors().save_file(tensors, str(folder / WEIGHTS))


def read_config(folder: str | Path) -> dict[str, Any]:
    """``config.json`` of a model folder, checked for format and version."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such model folder")
    path = member(folder, CONFIG)
    if path is None:
        raise ValueError(f"{folder}: not a selfcal model folder (no {CONFIG})")
    doc = read_json(path)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{path}: not a selfcal model configuration")
    if doc.get("format_version") not in READS:
        raise ValueError(
            f"{folder} was written by selfcal {doc.get('selfcal_version', '?')} in model format "
            f"version {doc.get('format_version')!r}; this selfcal reads versions "
            f"{', '.join(map(str, READS))}: train it again"
        )
    if doc["format_version"] >= 2 and doc.get("checksum") != config_checksum(doc):
        raise ValueError(f"{path}: {EDITED}")
    return doc


EDITED = (
    "its content does not match the checksum selfcal train wrote, so it was edited or damaged "
    "after training; train the model again"
)
MISSING = (
    "missing, though selfcal train wrote it (config.json records its checksum): the folder is "
    "incomplete; copy the whole folder, or train the model again"
)


def sha256(path: Path) -> str:
    """SHA-256 (hex) of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def config_checksum(config: dict[str, Any]) -> str:
    """SHA-256 of the configuration's canonical JSON without its own ``checksum``."""
    body = {k: v for k, v in config.items() if k != "checksum"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def seal(folder: Path, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the checksums of the folder's files :data:`CHECKED` and its own, as
    the last step of writing a folder."""
    sums = {name: sha256(folder / name) for name in CHECKED if (folder / name).is_file()}
    sealed = {**config, "checksums": sums}
    return {**sealed, "checksum": config_checksum(sealed)}


def check_files(folder: Path, config: dict[str, Any]) -> None:
    """Each file ``config`` has a checksum for must still match it (layout version 2)."""
    if config.get("format_version", 1) < 2:
        return
    sums = config.get("checksums")
    if not isinstance(sums, dict):
        raise ValueError(f"{folder / CONFIG}: no checksums of the folder's files")
    for name, expected in sums.items():
        path = member(folder, str(name))
        if path is None:
            raise ValueError(f"{Path(folder) / str(name)}: {MISSING}")
        if sha256(path) != expected:
            raise ValueError(f"{path}: {EDITED}")


@dataclass(eq=False)
class TrainedModel:
    """A trained model as ``selfcal predict`` uses it: the network (CPU, float32), the
    feature columns and their standardisation, the label mapping and the calibrator (or
    ``None``), with the folder's ``config``."""

    config: dict[str, Any]
    network: nn.Module
    columns: tuple[str, ...]
    standardizer: Standardizer
    labels: LabelMap
    calibrator: Calibrator | None

    @property
    def label_column(self) -> str:
        return str(self.config["labels"]["column"])

    @classmethod
    def load(cls, folder: str | Path) -> TrainedModel:
        """Read a model folder written by :func:`selfcal.pipeline.train`."""
        folder = Path(folder)
        config = read_config(folder)
        check_files(folder, config)
        model = cls.without_calibrator(folder, config)
        spec = config.get("calibrator")
        if spec is None and member(folder, CALIBRATOR) is not None:
            raise ValueError(
                f"{folder / CONFIG} names no calibrator, but the folder holds {CALIBRATOR}"
            )
        if spec is not None:
            name = spec.get("file") if isinstance(spec, dict) else None
            if name != CALIBRATOR:
                member(folder, str(name))  # outside the folder's files: that error
                raise ValueError(f"{folder / CONFIG}: the calibrator's file must be {CALIBRATOR}")
            path = member(folder, CALIBRATOR)
            if path is None:
                raise ValueError(f"{folder}: {CALIBRATOR} is missing (config.json names one)")
            model.calibrator = Calibrator.load(path)
        return model

    @classmethod
    def without_calibrator(cls, folder: Path, config: dict[str, Any]) -> TrainedModel:
        """The folder's network, features and labels (``calibrator`` ``None``), every field
        and tensor checked (:mod:`selfcal.pipeline.folder_schema`)."""
        parts = folder_parts(folder / CONFIG, config)
        weights = member(folder, WEIGHTS)
        if weights is None:
            raise ValueError(f"{folder}: {WEIGHTS} is missing")
        network = load_network(weights, parts, _safetensors().load_file)
        network.eval()
        return cls(config, network, parts.columns, parts.standardizer, parts.labels, None)

    # ----------------------------------------------------------------- predictions
    def features(self, table: FeatureTable) -> np.ndarray:
        """``table``'s features in the trained order, checked (columns, finiteness, and
        within the range the standardisation can represent)."""
        x = aligned_features(table, self.columns)
        self.standardizer.check(x, self.columns, table.name)
        return x

    def logits(self, x_raw: np.ndarray) -> torch.Tensor:
        """``(N, C)`` float64 logits of raw (un-standardised) features, on the CPU."""
        return network_logits(self.network, self.standardizer.transform(x_raw))

    def calibrate(self, logits: torch.Tensor) -> torch.Tensor:
        """``(N, C)`` float64 probabilities: the calibrator's, or the softmax without one."""
        if self.calibrator is None:
            return torch.softmax(logits.double(), dim=1)
        probs: torch.Tensor = self.calibrator.predict_proba(logits=logits)
        return probs.double()

    def predict_proba(self, x_raw: np.ndarray) -> np.ndarray:
        """Calibrated ``(N, C)`` float64 probabilities of raw features."""
        return self.calibrate(self.logits(x_raw)).numpy()


def confidence_and_prediction(probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(max_k p_k, argmax_k p_k)`` of each row (first index on ties), float64 and int64."""
    pred = Predictions.from_probs(torch.from_numpy(np.asarray(probs, dtype=np.float64)))
    return pred.confidence.numpy(), pred.predicted.numpy()


# ----------------------------------------------------------------------------- thresholds
def save_selective(
    folder: Path,
    confidence: np.ndarray,
    correct: np.ndarray,
    defaults: list[Threshold],
    default: Threshold,
) -> None:
    """``validation.npz`` and ``selective.json`` (the default targets' thresholds)."""
    np.savez(
        folder / VALIDATION,
        confidence=np.asarray(confidence, dtype=np.float64),
        correct=np.asarray(correct, dtype=bool),
    )
    write_json(
        folder / SELECTIVE,
        {
            "default": {"kind": default.kind, "target": default.target},
            "thresholds": [t.to_json() for t in defaults],
        },
    )


def stored_thresholds(folder: str | Path) -> tuple[list[Threshold], tuple[str, float]]:
    """The thresholds stored at training time and the default ``(kind, target)``."""
    path = member(folder, SELECTIVE)
    if path is None:
        raise ValueError(f"{folder}: {SELECTIVE} is missing")
    return read_thresholds(path, read_json(path))


def threshold_for(
    folder: str | Path, kind: str | None = None, target: float | None = None
) -> Threshold:
    """The abstention threshold for ``(kind, target)`` (default: the folder's default
    target): the stored one when training chose it, else chosen now from the stored
    validation confidences by the same rule
    (:func:`selfcal.pipeline.selective.choose_threshold`)."""
    stored, (default_kind, default_target) = stored_thresholds(folder)
    if kind is None:
        kind, target = default_kind, default_target
    if target is None:
        raise ValueError("a target needs a value")
    for t in stored:
        if (t.kind, t.target) == (kind, float(target)):
            return t
    path = member(folder, VALIDATION)
    if path is None:
        raise ValueError(f"{folder}: {VALIDATION} is missing")
    confidence, correct = read_validation(path)
    return choose_threshold(confidence, correct, kind=kind, target=float(target))
