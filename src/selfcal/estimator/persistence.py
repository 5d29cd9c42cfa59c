"""The calibrator file: JSON with the class name, the hyperparameters and the fitted values.

``Calibrator.save`` writes, and ``Calibrator.load`` reads, ``{"format", "format_version",
"selfcal_version", "class", "params", "fitted", "checksum"}``: floats written with ``repr``
(which round-trips exactly; a non-finite one as the string ``"inf"``, ``"-inf"`` or
``"nan"``), arrays as dtype, shape and flat data, a nested calibrator as its own document.
Nothing is pickled.

A file is untrusted input. ``checksum`` is the SHA-256 of the document's canonical JSON
(:func:`checksum`): a file edited by hand or damaged on disk is refused, saying so. Files of
format version 1 (selfcal 0.1, no checksum) are still read, but only as what version 1 is
(:func:`check_version_1`). Values are decoded strictly (:func:`decode`: the forms
:func:`encode` writes and nothing else; arrays of the dtypes :data:`DTYPES`), and every
file's values are then checked against the estimator's schema
(:mod:`selfcal.estimator.loading`).
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
FIELDS = ("format", "format_version", "selfcal_version", *BODY, "checksum")
"""The keys of a calibrator file (version 1: without ``checksum``)."""
VERSION_1_WRITER = "0.1.0"
"""The only selfcal release that wrote format version 1: 0.2.0, the next, writes version 2,
with its checksum."""
DTYPES = ("float64", "int64")
"""The dtypes of the arrays a file holds: what the fits write (float64 values, int64 counts).
Anything else -- strings, ``int8`` weights, objects -- is refused, not converted."""
NON_FINITE = ("inf", "-inf", "nan")
"""How a non-finite float is written (JSON has no such numbers)."""


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
        return json.loads(Path(path).read_text(encoding="utf-8"), parse_constant=_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not {what} (not JSON: {exc})") from None
    except RecursionError:
        raise ValueError(f"{path}: nested too deeply to be {what}") from None
    except ValueError as exc:  # from _constant
        raise ValueError(f"{path} is not {what}: {exc}") from None


def _constant(name: str) -> Any:
    """Refuse ``NaN``, ``Infinity`` and ``-Infinity``: not JSON, though Python reads them;
    selfcal writes with ``allow_nan=False`` (a non-finite float as a string), so a file
    holding one was written by other code or edited."""
    raise ValueError(f"it holds {name}, which selfcal never writes (JSON has no such number)")


def read_document(path: str | Path) -> dict[str, Any]:
    """The document of a file written by :func:`write_document`; one-line ``ValueError``
    naming the file when it is not a calibrator file, has another format version or a key
    none has, is too large or too deeply nested, its checksum does not match its content, or
    it claims version 1 without being what version 1 is (:func:`check_version_1`)."""
    doc = read_json(path, "a calibrator file")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{path} is not a selfcal calibrator file")
    version = doc.get("format_version")
    if type(version) is not int or version not in READS:  # not true, not 1.0
        raise ValueError(
            f"{path} has calibrator format version {version!r}; "
            f"this selfcal reads versions {', '.join(map(str, READS))}"
        )
    unknown = sorted(set(doc) - set(FIELDS))
    if unknown:
        raise ValueError(
            f"{path}: no calibrator file holds {unknown[0]!r} (its fields: {', '.join(FIELDS)})"
        )
    if not isinstance(doc.get("selfcal_version"), str):
        raise ValueError(f"{path}: selfcal_version must be the version that wrote it (a string)")
    if version == 1:
        check_version_1(doc, path)
    elif doc.get("checksum") != _checksum_of(doc, path):
        raise ValueError(
            f"{path}: its content does not match the checksum selfcal wrote, so it was edited "
            "or damaged after saving; fit and save the calibrator again"
        )
    return doc


def check_version_1(doc: dict[str, Any], path: str | Path) -> None:
    """A file claiming format version 1 is read without a checksum, so it must be what
    version 1 is: written by selfcal :data:`VERSION_1_WRITER` (the only release that wrote
    it) and without a ``checksum`` (which version 2 added). Nothing else tells the versions
    apart -- every class, hyperparameter and fitted value version 1 wrote, version 2 writes
    too (each calibrator and the conformal predictor fitted and saved at each of the 87
    commits that changed them) -- so a version-2 file downgraded by hand, its checksum
    dropped and its writer set to 0.1.0, reads as version 1: its values are then checked
    against the schema, as every file's are."""
    if "checksum" in doc:
        raise ValueError(
            f"{path} claims calibrator format version 1 but carries a checksum, which only "
            "version 2 writes: it was edited after saving; fit and save the calibrator again"
        )
    if doc["selfcal_version"] != VERSION_1_WRITER:
        raise ValueError(
            f"{path} claims calibrator format version 1, which only selfcal "
            f"{VERSION_1_WRITER} wrote, but names selfcal {doc['selfcal_version']!r} (which "
            "writes version 2, with a checksum): it was edited after saving; fit and save "
            "the calibrator again"
        )


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


def decode(
    value: Any, path: str | Path, calibrator_type: type[ScoreEstimator], version: int
) -> Any:
    """The inverse of :func:`encode` (``calibrator_type`` as there; ``version``: the file's
    format version, for a nested calibrator), strict: a JSON object must be exactly one of
    the forms :func:`encode` writes -- ``{"calibrator"}``, ``{"mapping"}``, ``{"float"}``
    holding ``"inf"``, ``"-inf"`` or ``"nan"``, or ``{"dtype", "shape", "data"}``
    (:func:`decode_array`) -- else ``ValueError``."""
    if isinstance(value, list):
        return [decode(v, path, calibrator_type, version) for v in value]
    if not isinstance(value, dict):
        return value
    keys = sorted(value)
    if keys == ["calibrator"]:
        nested = value["calibrator"]
        if not isinstance(nested, dict) or sorted(nested) != sorted(BODY):
            raise ValueError(f"a calibrator held must be an object of exactly {', '.join(BODY)}")
        return calibrator_type._from_document(nested, path, version)
    if keys == ["mapping"] and isinstance(value["mapping"], dict):
        return {k: decode(v, path, calibrator_type, version) for k, v in value["mapping"].items()}
    if keys == ["float"] and value["float"] in NON_FINITE:
        return float(value["float"])
    if keys == ["data", "dtype", "shape"]:
        return decode_array(value)
    raise ValueError(f"an object selfcal never writes (keys {', '.join(keys) or 'none'})")


def decode_array(value: dict[str, Any]) -> np.ndarray:
    """``{"dtype", "shape", "data"}`` as an array, strict: ``dtype`` one of :data:`DTYPES`,
    ``shape`` a list of non-negative integers, ``data`` exactly as many elements, each a JSON
    number (not ``true``/``false``) -- for float64 also ``"inf"``, ``"-inf"`` or ``"nan"``;
    for int64 an integer. A wrong element is refused, never converted."""
    dtype, shape, data = value["dtype"], value["shape"], value["data"]
    if dtype not in DTYPES:
        raise ValueError(f"array dtype {dtype!r:.40}; a file holds {' or '.join(DTYPES)} arrays")
    if not (isinstance(shape, list) and all(_is_size(n) for n in shape)):
        raise ValueError(f"array shape {shape!r:.40} is not a list of non-negative integers")
    if not isinstance(data, list) or len(data) != math.prod(shape):
        raise ValueError(f"array data must be a list of {math.prod(shape)} values (shape {shape})")
    allowed = (int,) if dtype == "int64" else (int, float, str)
    kinds = {type(x) for x in data}
    if not kinds <= set(allowed) or (str in kinds and not _non_finite_only(data)):
        wrong = next(x for x in data if not _element_ok(x, allowed))
        what = "integers" if dtype == "int64" else 'numbers (or "inf", "-inf", "nan")'
        raise ValueError(f"{dtype} array data must be {what}, got {wrong!r:.40}")
    floats = [float(x) if isinstance(x, str) else x for x in data] if str in kinds else data
    return np.asarray(floats, dtype=dtype).reshape(shape)


def _element_ok(x: Any, allowed: tuple[type, ...]) -> bool:
    return type(x) in allowed and (not isinstance(x, str) or x in NON_FINITE)


def _is_size(n: Any) -> bool:
    return type(n) is int and n >= 0


def _non_finite_only(data: list[Any]) -> bool:
    """Every string among ``data`` is a non-finite float as :func:`encode` writes it."""
    return all(x in NON_FINITE for x in data if isinstance(x, str))


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
