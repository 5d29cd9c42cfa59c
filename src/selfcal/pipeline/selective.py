"""The abstention threshold, chosen on the validation set.

A prediction is accepted when its calibrated confidence ``c = max_k p_k`` is at least the
threshold ``t`` and abstained on when ``c < t`` -- the convention of
:func:`selfcal.metrics.risk_coverage_curve` ("accept ``conf >= t``"). On validation, the
candidate thresholds are the distinct confidences (:func:`selfcal.metrics.selective.tie_groups`:
rows with equal confidence are accepted or refused together, so no tie is broken):

* ``target_accuracy = a``: the empirical rule of :mod:`selfcal.abstention`
  (:func:`selfcal.abstention.certificate.empirical_threshold`, one implementation; no promise
  for new rows -- ``target_risk`` with rule ``"ltt"`` gives one): the **smallest** threshold
  whose selective accuracy (the accuracy of the accepted rows) is at least ``a`` -- the
  largest validation coverage that keeps the accuracy target. Selective accuracy need not
  fall monotonically as ``t`` falls, so every threshold is scanned. When no threshold
  reaches ``a`` (even the most confident rows miss it), the threshold is ``None``: abstain
  on every row.
* ``target_coverage = q``: the **largest** threshold accepting at least ``ceil(q N)`` of the
  ``N`` validation rows (:func:`selfcal.metrics.accuracy_at_coverage`'s count); with distinct
  confidences exactly that many are accepted, with ties at the threshold a few more.

Each choice records the threshold with its validation coverage and selective accuracy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np
import torch

from selfcal._validation import check_choice, check_fraction
from selfcal.abstention.certificate import empirical_threshold
from selfcal.metrics.selective import tie_groups

TargetKind = Literal["accuracy", "coverage"]
TARGET_KINDS: tuple[str, ...] = ("accuracy", "coverage")
DEFAULT_TARGET_ACCURACY = 0.95
DEFAULT_TARGET_COVERAGE = 0.8


@dataclass(frozen=True)
class Threshold:
    """A chosen threshold (``None``: abstain on everything) with the validation coverage and
    selective accuracy it gives (``accuracy`` is ``None`` when nothing is accepted)."""

    kind: TargetKind
    target: float
    threshold: float | None
    coverage: float
    accuracy: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.target,
            "threshold": self.threshold,
            "coverage": self.coverage,
            "accuracy": self.accuracy,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Threshold:
        """The threshold :meth:`to_json` wrote, every field checked: a known kind, a target
        in (0, 1], a threshold, coverage and accuracy in [0, 1] (``None`` where allowed)."""
        kind = target_kind(doc.get("kind"))
        threshold, accuracy = doc.get("threshold"), doc.get("accuracy")
        return cls(
            kind,
            check_fraction(f"target {kind}", doc.get("target")),
            None if threshold is None else _unit("threshold", threshold),
            _unit("coverage", doc.get("coverage")),
            None if accuracy is None else _unit("accuracy", accuracy),
        )

    def abstain(self, confidence: np.ndarray) -> np.ndarray:
        """The abstain flags of ``confidence``: ``c < threshold`` (every row without one)."""
        if self.threshold is None:
            return np.ones(confidence.shape, dtype=bool)
        return np.asarray(confidence < self.threshold)

    def describe(self) -> str:
        t = "none (abstain on every row)" if self.threshold is None else f"{self.threshold:.6g}"
        acc = "n/a" if self.accuracy is None else f"{self.accuracy:.4f}"
        return (
            f"target {self.kind} {self.target:g}: threshold {t}, validation coverage "
            f"{self.coverage:.4f}, selective accuracy {acc}"
        )


def _unit(name: str, value: object) -> float:
    """``value`` checked to be a number in [0, 1]."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= 1:
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r:.40}")
    return float(value)


def target_kind(value: object) -> TargetKind:
    """``value`` checked to be ``"accuracy"`` or ``"coverage"``."""
    return cast(TargetKind, check_choice("kind", value, TARGET_KINDS))


def choose_threshold(confidence: Any, correct: Any, *, kind: str, target: float) -> Threshold:
    """The threshold meeting ``target`` on validation (module doc). ``confidence``: ``(N,)``
    calibrated top-label confidences; ``correct``: ``(N,)`` 0/1 (or booleans) saying whether
    each prediction is right."""
    which = target_kind(kind)
    target = check_fraction(f"target {kind}", target)
    conf = torch.as_tensor(np.asarray(confidence, dtype=np.float64))
    right = torch.as_tensor(np.asarray(correct, dtype=np.float64))
    if conf.ndim != 1 or conf.shape != right.shape or conf.shape[0] == 0:
        raise ValueError("confidence and correct must be non-empty (N,) arrays of one length")
    n = conf.shape[0]
    if which == "accuracy":  # the empirical rule of selfcal.abstention: one implementation
        threshold, answered, errors, _ = empirical_threshold(conf.numpy(), right.numpy(), target)
        if threshold is None:
            return Threshold("accuracy", target, None, 0.0, None)
        return Threshold("accuracy", target, threshold, answered / n, 1 - errors / answered)
    thresholds, size, errs = tie_groups(conf, right)
    accepted = size.cumsum(0)
    accuracy = 1 - errs.cumsum(0) / accepted
    needed = math.ceil(target * n - 1e-9)
    g = int(torch.searchsorted(accepted, torch.tensor([float(needed)], dtype=torch.float64)))
    return _at(which, target, thresholds, accepted, accuracy, min(g, len(accepted) - 1), n)


def _at(
    kind: TargetKind,
    target: float,
    thresholds: torch.Tensor,
    accepted: torch.Tensor,
    accuracy: torch.Tensor,
    g: int,
    n: int,
) -> Threshold:
    return Threshold(
        kind,
        target,
        float(thresholds[g]),
        float(accepted[g]) / n,
        float(accuracy[g]),
    )
