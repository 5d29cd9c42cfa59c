"""What one run is (:class:`RunSpec`) and what it produced (:class:`RunResult`).

A run is identified by its content: :attr:`RunSpec.key` is the first 16 hex digits of the
SHA-256 of the spec's canonical JSON (keys sorted, no whitespace, ASCII, floats written with
``repr`` which round-trips exactly). Equal specs have equal keys on every machine and Python
version, so a results store can tell which runs of a sweep are already done.

Choices:

* ``hparams`` holds JSON scalars only (``str``, ``int``, ``float``, ``bool``, ``None``): they
  become table columns. ``model`` may nest (objects with string keys, lists, scalars), e.g.
  ``{"name": "mlp", "hidden": [64, 64]}``.
* numpy scalars are converted to the Python scalar of the same kind (``np.int64(3)`` -> ``3``),
  so sweeps built with ``np.arange`` / ``np.linspace`` work; anything else that JSON cannot
  hold exactly (NaN, inf, sets, arrays, objects) is rejected with a ``ValueError``.
* ``1`` and ``1.0`` are *different* values (JSON keeps the type and an executor may care:
  ``range(10.0)`` fails), so they give different keys; equality and hashing follow the key.
* ``study`` is part of the key: the same configuration in two studies is two runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import numpy as np

from selfcal._validation import check_int

JSONScalar = str | int | float | bool | None
Status = Literal["done", "failed"]
STATUSES: tuple[str, ...] = ("done", "failed")
KEY_LENGTH = 16


# ----------------------------------------------------------------------------- JSON values
def _scalar(value: Any, where: str) -> JSONScalar:
    """A JSON scalar in canonical Python form; numpy scalars become Python scalars."""
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        value = value.item()
    if value is None or type(value) in (str, bool, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where} = {value!r}: NaN and infinity are not valid JSON values")
        return float(value)
    raise ValueError(
        f"{where} has type {type(value).__name__}; expected a JSON scalar "
        "(str, int, float, bool or None)"
    )


def _freeze(value: Any, where: str) -> Any:
    """Validate a nested JSON value; objects become read-only mappings and lists tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType(
            {_key(k, where): _freeze(v, f"{where}[{k!r}]") for k, v in value.items()}
        )
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v, f"{where}[{i}]") for i, v in enumerate(value))
    return _scalar(value, where)


def _key(name: Any, where: str) -> str:
    if not isinstance(name, str):
        raise ValueError(f"{where}: keys must be strings, got {name!r}")
    return name


def thaw(value: Any) -> Any:
    """Inverse of :func:`_freeze`: plain dicts and lists (for JSON and for users)."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


def canonical_json(value: Any) -> str:
    """Canonical JSON text: sorted keys, no whitespace, ASCII only, NaN/inf refused."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )


# ----------------------------------------------------------------------------- RunSpec
@dataclass(frozen=True, eq=False, repr=False)
class RunSpec:
    """One run: ``study`` (name of the sweep it belongs to), ``dataset``, ``method``, ``seed``,
    hyperparameters (JSON scalars) and model configuration (nested JSON).

    Hashable and immutable; ``hparams`` and ``model`` are stored as read-only mappings.
    """

    study: str
    dataset: str
    method: str
    seed: int
    hparams: Mapping[str, JSONScalar] = field(default_factory=dict)
    model: Mapping[str, Any] = field(default_factory=dict)
    _canonical: str = field(default="", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("study", "dataset", "method"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"RunSpec.{name} must be a non-empty string, got {value!r}")
        seed = self.seed.item() if isinstance(self.seed, np.integer) else self.seed
        check_int("RunSpec.seed", seed, minimum=0)
        if not isinstance(self.hparams, Mapping) or not isinstance(self.model, Mapping):
            raise ValueError("RunSpec.hparams and RunSpec.model must be mappings")
        hparams = {
            _key(k, "hparams"): _scalar(v, f"hparams[{k!r}]") for k, v in self.hparams.items()
        }
        object.__setattr__(self, "seed", seed)
        object.__setattr__(self, "hparams", MappingProxyType(hparams))
        object.__setattr__(self, "model", _freeze(self.model, "model"))
        object.__setattr__(self, "_canonical", canonical_json(self.to_dict()))

    def to_dict(self) -> dict[str, Any]:
        """Plain (mutable, JSON-able) dict of the spec."""
        return {
            "study": self.study,
            "dataset": self.dataset,
            "method": self.method,
            "seed": self.seed,
            "hparams": thaw(self.hparams),
            "model": thaw(self.model),
        }

    def to_json(self) -> str:
        """Canonical JSON text (the text that :attr:`key` hashes)."""
        return self._canonical

    @classmethod
    def from_json(cls, text: str | bytes) -> RunSpec:
        """Inverse of :meth:`to_json`; unknown or missing fields raise ``ValueError``."""
        data = json.loads(text)
        required = {"study", "dataset", "method", "seed"}
        allowed = required | {"hparams", "model"}
        if not isinstance(data, dict) or not required <= data.keys() <= allowed:
            raise ValueError(f"not a RunSpec JSON object (fields {sorted(allowed)}): {text!r}")
        return cls(**data)

    @property
    def key(self) -> str:
        """``sha256(to_json())`` truncated to 16 hex digits (64 bits: a collision among a
        million runs has probability ~3e-8)."""
        return hashlib.sha256(self.to_json().encode("ascii")).hexdigest()[:KEY_LENGTH]

    def replace(self, **changes: Any) -> RunSpec:
        """A copy with some fields changed (``spec.replace(seed=1)``)."""
        return dataclasses.replace(self, **changes)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunSpec) and self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash(self.to_json())

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items())
        return f"RunSpec({fields})"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # MappingProxyType cannot be pickled; a spec travels as its JSON text.
        return (RunSpec.from_json, (self.to_json(),))


# ----------------------------------------------------------------------------- RunResult
@dataclass(frozen=True, eq=False)
class RunResult:
    """What an executor returns for one :class:`RunSpec`.

    ``metrics`` are floats (anything ``float()`` accepts: Python/numpy numbers, 0-d tensors);
    ``artefacts`` are numeric arrays (weight trajectories, confidence maps, per-sample
    confidences; torch tensors are converted with ``np.asarray``; object arrays are refused
    because they would need pickle). ``seconds=None`` lets the runner fill in the measured
    wall time (a group's time shared equally among its runs). A failed run must say why.
    ``warnings`` are the distinct warnings raised while its group ran, one line each with how
    often (:func:`~selfcal.experiments._groups.run_group` fills them in, on the group's first
    result); they are summarised after the sweep, not stored.
    """

    metrics: Mapping[str, float] = field(default_factory=dict)
    artefacts: Mapping[str, np.ndarray] = field(default_factory=dict)
    status: Status = "done"
    reason: str | None = None
    seconds: float | None = None
    warnings: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"RunResult.status must be 'done' or 'failed', got {self.status!r}")
        if self.status == "failed" and not self.reason:
            raise ValueError("a failed RunResult needs a reason")
        if self.status == "done" and self.reason is not None:
            raise ValueError("a done RunResult has no reason (reason is for failures)")
        if self.seconds is not None and not (math.isfinite(self.seconds) and self.seconds >= 0):
            raise ValueError(f"RunResult.seconds must be finite and >= 0, got {self.seconds!r}")
        object.__setattr__(self, "metrics", _float_metrics(self.metrics))
        object.__setattr__(self, "artefacts", _numeric_arrays(self.artefacts))

    @classmethod
    def failure(cls, reason: str, seconds: float | None = None) -> RunResult:
        """A failed result with no metrics (e.g. the executor raised)."""
        return cls(status="failed", reason=reason, seconds=seconds)

    def checked(self) -> RunResult:
        """This result, or -- when a "done" run has a NaN/inf metric -- the same result marked
        failed with a reason naming the metric(s): a diverged run is never stored as done."""
        bad = [f"{k}={v}" for k, v in self.metrics.items() if not math.isfinite(v)]
        if self.status != "done" or not bad:
            return self
        return dataclasses.replace(
            self, status="failed", reason="diverged: non-finite metric " + ", ".join(bad)
        )


def _float_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    if not isinstance(metrics, Mapping):
        raise ValueError(f"RunResult.metrics must be a mapping, got {type(metrics).__name__}")
    out = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"metric names must be non-empty strings, got {name!r}")
        try:
            out[name] = float(value)
        except (TypeError, ValueError) as err:
            raise ValueError(f"metric {name!r} = {value!r} is not a number") from err
    return out


def _numeric_arrays(artefacts: Mapping[str, Any]) -> dict[str, np.ndarray]:
    if not isinstance(artefacts, Mapping):
        raise ValueError(f"RunResult.artefacts must be a mapping, got {type(artefacts).__name__}")
    out = {}
    for name, value in artefacts.items():
        if not isinstance(name, str) or not name or not name.isprintable():
            raise ValueError(f"artefact names must be non-empty printable strings, got {name!r}")
        if hasattr(value, "detach"):  # torch tensor: leave the autograd graph, move to CPU
            value = value.detach().cpu()
        array = np.asarray(value)
        if array.dtype.kind not in "biufc":
            raise ValueError(
                f"artefact {name!r} has dtype {array.dtype}; only numeric arrays "
                "can be stored (no pickle)"
            )
        out[name] = array
    return out
