"""The calibrator file: JSON with the class name, the hyperparameters and the fitted values.

``Calibrator.save`` writes, and ``Calibrator.load`` reads, ``{"format", "format_version",
"selfcal_version", "class", "params", "fitted", "checksum"}``: floats written with ``repr``
(which round-trips exactly; a non-finite one as the string ``"inf"``, ``"-inf"`` or
``"nan"``), arrays as dtype, shape and flat data, a nested calibrator as its own document.
Nothing is pickled.

A file is untrusted input. ``checksum`` is the SHA-256 of the document's canonical JSON
(:func:`checksum`): a file edited by hand or damaged on disk is refused, saying so. Files of
format version 1 (selfcal 0.1, no checksum) are still read; every file's values are then
checked against the estimator's schema (:mod:`selfcal.estimator.loading`).
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from selfcal.estimator import ScoreEstimator

FORMAT = "selfcal-calibrator"
FORMAT_VERSION = 2
READS = (1, 2)
"""The format versions :func:`read_document` reads (1: before the checksum)."""
MAX_BYTES = 1 << 30
"""The largest calibrator file read (a 1,000-class matrix calibrator is ~25 MB)."""
BODY = ("class", "params", "fitted")
"""The keys the checksum covers."""


def write_document(path: str | Path, document: dict[str, Any]) -> None:
    """Write a calibrator's ``{"class", "params", "fitted"}`` document to ``path``, after the
    file's format, its version and the selfcal version."""
    doc = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "selfcal_version": _version(),
        **document,
        "checksum": checksum(document),
    }
    Path(path).write_text(json.dumps(doc, indent=1, allow_nan=False))


def checksum(document: dict[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of the document's ``class``, ``params`` and
    ``fitted`` (sorted keys, no spaces): the same text whether computed before writing or
    after reading, since floats round-trip through ``repr``."""
    body = {key: document.get(key) for key in BODY}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_json(path: str | Path, what: str, max_bytes: int | None = None) -> Any:
    """The JSON of a file selfcal wrote (a calibrator file, a model folder's files), read as
    untrusted input: at most ``max_bytes`` (default :data:`MAX_BYTES`), valid UTF-8 JSON, not
    nested past what Python parses; each failure one ``ValueError`` line naming the file and
    ``what`` it should be."""
    size = Path(path).stat().st_size
    if size > (MAX_BYTES if max_bytes is None else max_bytes):
        raise ValueError(f"{path}: {size:,} bytes, more than {what} holds")
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not {what} (not JSON: {exc})") from None
    except RecursionError:
        raise ValueError(f"{path}: nested too deeply to be {what}") from None


def read_document(path: str | Path) -> dict[str, Any]:
    """The document of a file written by :func:`write_document`; one-line ``ValueError``
    naming the file when it is not a calibrator file, has another format version, is too
    large or too deeply nested, or its checksum does not match its content."""
    doc = read_json(path, "a calibrator file")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{path} is not a selfcal calibrator file")
    if doc.get("format_version") not in READS:
        raise ValueError(
            f"{path} has calibrator format version {doc.get('format_version')!r}; "
            f"this selfcal reads versions {', '.join(map(str, READS))}"
        )
    if doc["format_version"] >= 2 and doc.get("checksum") != _checksum_of(doc, path):
        raise ValueError(
            f"{path}: its content does not match the checksum selfcal wrote, so it was edited "
            "or damaged after saving; fit and save the calibrator again"
        )
    return doc


def _checksum_of(doc: dict[str, Any], path: str | Path) -> str:
    try:
        return checksum(doc)
    except (TypeError, ValueError):  # NaN or an object JSON cannot write: not what was saved
        raise ValueError(f"{path}: holds values selfcal never writes") from None


def _version() -> str:
    from selfcal import __version__

    return __version__


def encode(value: Any, calibrator_type: type[ScoreEstimator]) -> Any:
    """Fitted value or hyperparameter -> JSON-able: arrays as dtype/shape/flat data, a
    calibrator as its own document (``{"calibrator": {class, params, fitted}}``), mappings
    as ``{"mapping": ...}``, sequences as lists. ``calibrator_type`` is
    the family's base class, e.g. :class:`~selfcal.posthoc.Calibrator` (passed in: this
    module does not import it)."""
    if isinstance(value, np.ndarray):
        data = (
            [_float(float(x)) for x in value.reshape(-1)]
            if value.dtype.kind == "f"
            else [int(x) for x in value.reshape(-1)]
        )
        return {"dtype": str(value.dtype), "shape": list(value.shape), "data": data}
    if isinstance(value, calibrator_type):
        return {"calibrator": value._document()}
    if isinstance(value, dict):
        return {"mapping": {str(k): encode(v, calibrator_type) for k, v in value.items()}}
    if isinstance(value, (list, tuple)):
        return [encode(v, calibrator_type) for v in value]
    if isinstance(value, (bool, str)) or value is None:
        return value
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        x = _float(float(value))
        return x if isinstance(x, float) else {"float": x}
    raise TypeError(f"cannot serialise fitted value of type {type(value).__name__}")


def decode(value: Any, path: str | Path, calibrator_type: type[ScoreEstimator]) -> Any:
    """The inverse of :func:`encode` (``calibrator_type`` as there)."""
    if isinstance(value, list):
        return [decode(v, path, calibrator_type) for v in value]
    if not isinstance(value, dict):
        return value
    if "calibrator" in value:
        return calibrator_type._from_document(value["calibrator"], path)
    if "mapping" in value:
        return {k: decode(v, path, calibrator_type) for k, v in value["mapping"].items()}
    if "float" in value:
        return float(value["float"])
    data = [float(x) if isinstance(x, str) else x for x in value["data"]]
    return np.asarray(data, dtype=value["dtype"]).reshape(value["shape"])


def _float(x: float) -> float | str:
    """A float as JSON holds it: itself when finite, else ``"inf"``, ``"-inf"`` or ``"nan"``
    (JSON has no non-finite numbers; a conformal threshold can be ``+inf``)."""
    return x if math.isfinite(x) else repr(x)


def subclasses(cls: type[ScoreEstimator]) -> list[type[ScoreEstimator]]:
    """Every subclass of ``cls``, depth first (the classes a file may name)."""
    out: list[type[ScoreEstimator]] = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(subclasses(sub))
    return out
