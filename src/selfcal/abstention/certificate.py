"""One certified abstention threshold: :func:`certify_threshold` and the :class:`Certificate`
it returns (the rules and their promises are stated in :mod:`selfcal.abstention`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from selfcal._validation import check_choice, check_real, is_int
from selfcal.abstention import _procedures as proc
from selfcal.predictions import ArrayLike

RULES = ("ltt", "crc", "empirical")
"""The threshold rules: Learn-then-Test (``P(R > eps) <= delta``), conformal risk control
(``E[P(answered and wrong)] <= eps``) and the empirical rule (no promise)."""
ACCURACY_TOLERANCE = 1e-12
"""The empirical rule: a selective accuracy within this of ``1 - eps`` meets it (the tolerance
of :func:`selfcal.pipeline.selective.choose_threshold` and
:func:`selfcal.metrics.coverage_at_accuracy`)."""


@dataclass(frozen=True)
class Certificate:
    """A threshold and what it promises. A row is answered when its confidence ``c >=
    threshold`` (``threshold`` ``None``: abstain on every row).

    ``n_rows`` certifying rows, ``n_answered`` of them answered, ``errors`` wrong among those.
    ``bound``: for ``"ltt"`` the exact ``(1 - delta)`` upper confidence bound (Clopper-Pearson)
    of the selective risk at the threshold, computed from ``(n_answered, errors)`` as for a
    fixed threshold -- at most ``target_risk`` whenever a threshold is certified (the promise
    itself is about ``target_risk``, not this bound); for ``"crc"`` ``(errors + 1) / (n_rows +
    1)``, at most ``target_risk``; ``None`` for ``"empirical"`` and wherever the threshold is
    ``None`` (nothing answered). ``rows_needed``: where the threshold is ``None`` under a
    guaranteed rule, an estimate of the certifying rows that would let the same accuracy be
    certified (``None`` when no confidence level observed is accurate enough)."""

    rule: str
    target_risk: float
    delta: float | None
    threshold: float | None
    n_rows: int
    n_answered: int
    errors: int
    bound: float | None
    rows_needed: int | None
    group: str | None = None

    def abstain(self, confidence: ArrayLike) -> np.ndarray:
        """Bool ``(N,)``: ``c < threshold`` (every row when the threshold is ``None``)."""
        c = _confidences(confidence)
        if self.threshold is None:
            return np.ones(c.shape, dtype=bool)
        return c < self.threshold

    def describe(self) -> str:
        """The promise in words, with the numbers."""
        who = "" if self.group is None else f"group {self.group!r}: "
        eps = f"{self.target_risk:g}"
        if self.threshold is None:
            why = {
                "ltt": f"no threshold can be certified at error rate {eps} with confidence "
                f"{1 - (self.delta or 0):g} from {self.n_rows} rows",
                "crc": f"no threshold keeps the conformal risk bound at {eps} with "
                f"{self.n_rows} rows",
                "empirical": f"no threshold reaches selective error {eps} on the "
                f"{self.n_rows} rows",
            }[self.rule]
            need = (
                ""
                if self.rule == "empirical"
                else " (no confidence level observed is accurate enough for more rows to help)"
                if self.rows_needed is None
                else f" (about {self.rows_needed} rows at this accuracy would be needed)"
            )
            return f"{who}abstain on every row: {why}{need}."
        answered = (
            f"threshold {self.threshold:.6g} answers {self.n_answered} of {self.n_rows} "
            f"certifying rows ({self.errors} wrong)"
        )
        if self.rule == "ltt":
            promise = (
                f"with probability at least {1 - (self.delta or 0):g} over the draw of the "
                f"certifying rows, the error rate of answered new rows is at most {eps} "
                f"(Learn-then-Test; upper bound at the threshold {self.bound:.4g})"
            )
        elif self.rule == "crc":
            promise = (
                f"on average over the draw of the certifying rows, at most a fraction {eps} of "
                f"new rows are answered and wrong (conformal risk control; abstentions count "
                f"as no error, so this is weaker than an error rate among the answered rows)"
            )
        else:
            promise = (
                f"its error rate on these rows is at most {eps}; no promise for new rows "
                f"(empirical rule)"
            )
        return f"{who}{answered}; {promise}."

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "target_risk": self.target_risk,
            "delta": self.delta,
            "threshold": self.threshold,
            "n_rows": self.n_rows,
            "n_answered": self.n_answered,
            "errors": self.errors,
            "bound": self.bound,
            "rows_needed": self.rows_needed,
            "group": self.group,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Certificate:
        """The certificate :meth:`to_json` wrote, every field checked: a known rule, a target
        risk in (0, 1), ``delta`` in (0, 1) for ``"ltt"`` and ``None`` otherwise, a finite
        threshold or ``None``, counts with ``errors <= n_answered <= n_rows``, a bound in
        [0, 1] or ``None``, ``rows_needed`` a positive count or ``None``, a group name or
        ``None``; without a threshold, no row answered, no bound."""
        if not isinstance(doc, dict):
            raise ValueError(f"a certificate must be a JSON object, got {type(doc).__name__}")
        unknown = set(doc) - set(FIELDS)
        if unknown:
            raise ValueError(f"certificate has unknown field(s) {sorted(unknown)}")
        rule = str(check_choice("certificate rule", doc.get("rule"), RULES))
        eps = check_real(
            "certificate target_risk", doc.get("target_risk"), 0, 1, low_open=True, high_open=True
        )
        delta = doc.get("delta")
        if rule == "ltt":
            delta = check_real("certificate delta", delta, 0, 1, low_open=True, high_open=True)
        elif delta is not None:
            raise ValueError(f"certificate delta must be None for rule {rule!r}, got {delta!r}")
        threshold = _optional_real("certificate threshold", doc.get("threshold"))
        n_rows = _count("certificate n_rows", doc.get("n_rows"), 0)
        n_answered = _count("certificate n_answered", doc.get("n_answered"), 0)
        errors = _count("certificate errors", doc.get("errors"), 0)
        if not errors <= n_answered <= n_rows:
            raise ValueError(
                f"certificate counts must satisfy errors <= n_answered <= n_rows, got "
                f"{errors}, {n_answered}, {n_rows}"
            )
        bound = doc.get("bound")
        bound = None if bound is None else check_real("certificate bound", bound, 0, 1)
        rows_needed = doc.get("rows_needed")
        rows_needed = (
            None if rows_needed is None else _count("certificate rows_needed", rows_needed, 1)
        )
        if threshold is None and (n_answered or errors or bound is not None):
            raise ValueError("a certificate without a threshold answers no row and has no bound")
        if threshold is not None and rows_needed is not None:
            raise ValueError("certificate rows_needed is given only without a threshold")
        group = doc.get("group")
        if group is not None and not (isinstance(group, str) and group):
            raise ValueError(f"certificate group must be a non-empty string or None, got {group!r}")
        return cls(
            rule, eps, delta, threshold, n_rows, n_answered, errors, bound, rows_needed, group
        )


FIELDS = tuple(Certificate.__dataclass_fields__)


def _count(name: str, value: object, minimum: int) -> int:
    if not is_int(value) or value < minimum:  # type: ignore[operator]
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)  # type: ignore[call-overload]


def _optional_real(name: str, value: object) -> float | None:
    return None if value is None else check_real(name, value)


def _confidences(confidence: ArrayLike) -> np.ndarray:
    """``confidence`` as a float64 ``(N,)`` array of finite numbers."""
    arr = confidence.detach().cpu().numpy() if hasattr(confidence, "detach") else confidence
    c = np.asarray(arr, dtype=np.float64)
    if c.ndim != 1:
        raise ValueError(f"confidence must be a 1-D (N,) array, got shape {c.shape}")
    if not np.isfinite(c).all():
        raise ValueError("confidence must hold finite numbers (found NaN or infinity)")
    return c


def _correctness(correct: ArrayLike, n: int) -> np.ndarray:
    """``correct`` as a bool ``(N,)`` array: booleans or numbers 0/1."""
    arr = correct.detach().cpu().numpy() if hasattr(correct, "detach") else correct
    y = np.asarray(arr)
    if y.ndim != 1 or y.shape[0] != n:
        raise ValueError(
            f"correct must be a 1-D array of {n} values (one per confidence), got shape {y.shape}"
        )
    if y.dtype != bool:
        if y.dtype.kind not in "iuf" or not np.isin(y, (0, 1)).all():
            raise ValueError("correct must hold booleans or the numbers 0 and 1")
        y = y.astype(bool)
    return y


def certify_threshold(
    confidence: ArrayLike,
    correct: ArrayLike,
    *,
    target_risk: float,
    delta: float = 0.05,
    rule: str = "ltt",
    grid: ArrayLike | None = None,
    fwer: str = "fixed_sequence",
    p_value: str = "binomial",
) -> Certificate:
    """The threshold of ``rule`` on the certifying rows (:mod:`selfcal.abstention` states
    each rule and its promise).

    ``confidence``: ``(N,)`` top-label confidences, ``c = max_k p_k`` of calibrated
    probabilities; ``correct``: ``(N,)`` booleans or 0/1, whether each top-label prediction
    is right. ``target_risk`` ``eps`` in (0, 1): the error rate allowed among the answered
    rows (``"ltt"``, ``"empirical"``) or among all rows counting an abstention as no error
    (``"crc"``); ``delta`` in (0, 1): the allowed probability of failure (``"ltt"`` only;
    ignored by the other rules, whose certificates carry ``delta=None``).

    ``"ltt"`` only: ``grid`` a fixed 1-D array of distinct finite thresholds tested instead of
    every distinct confidence; ``fwer`` the family-wise procedure (``"fixed_sequence"``, the
    default; ``"bonferroni"`` or ``"holm"``, which need ``grid``, as MAPIE's
    ``fwer_method="bonferroni"`` and ``"bonferroni_holm"``); ``p_value`` ``"binomial"`` (exact
    tail) or ``"hoeffding_bentkus"`` (MAPIE's computation). The certified threshold is the
    lowest rejected candidate (the most rows answered). Each bad input is a one-line
    ``ValueError``."""
    rule = check_choice("rule", rule, RULES)
    eps = check_real("target_risk", target_risk, 0, 1, low_open=True, high_open=True)
    delta = check_real("delta", delta, 0, 1, low_open=True, high_open=True)
    fwer = check_choice("fwer", fwer, proc.FWER)
    p_value = check_choice("p_value", p_value, proc.P_VALUES)
    if rule != "ltt" and (grid is not None or fwer != "fixed_sequence" or p_value != "binomial"):
        raise ValueError(f"grid=, fwer= and p_value= are options of rule 'ltt', not {rule!r}")
    if fwer != "fixed_sequence" and grid is None:
        raise ValueError(f"fwer={fwer!r} corrects over a fixed family of thresholds: pass grid=")
    conf = _confidences(confidence)
    right = _correctness(correct, conf.shape[0])
    if conf.shape[0] == 0:
        raise ValueError("confidence and correct must hold at least one row")
    thresholds, n, e = proc.candidates(conf, right, None if grid is None else _grid(grid))
    n_rows = int(conf.shape[0])
    if rule == "empirical":
        ok = meets_accuracy(n, e, 1 - eps)
        return _certificate("empirical", eps, None, thresholds, n, e, ok, n_rows, None, None)
    if rule == "crc":
        ok = (e + 1) / (n_rows + 1) <= eps
        need = proc.rows_needed_crc(n, e, n_rows, eps)
        return _certificate("crc", eps, None, thresholds, n, e, ok, n_rows, need, None)
    p = proc.p_values(n, e, eps, p_value)
    if fwer == "fixed_sequence":
        ok = proc.fixed_sequence(p, n, n_rows, eps, delta)
    else:
        ok = proc.holm(p, delta) if fwer == "holm" else proc.bonferroni(p, delta)
    need = proc.rows_needed_ltt(n, e, n_rows, eps, delta)
    return _certificate("ltt", eps, delta, thresholds, n, e, ok, n_rows, need, delta)


def meets_accuracy(n: np.ndarray, e: np.ndarray, target_accuracy: float) -> np.ndarray:
    """The empirical rule's test at each candidate (``n`` answered rows, ``e`` wrong): some row
    answered and selective accuracy ``1 - e / n >= target_accuracy`` within
    :data:`ACCURACY_TOLERANCE`. The one implementation of the rule: :func:`certify_threshold`
    with ``rule="empirical"`` (``target_accuracy = 1 - eps``) and
    :func:`empirical_threshold` use it."""
    accuracy = 1 - e / np.maximum(n, 1)
    return (n > 0) & (accuracy >= target_accuracy - ACCURACY_TOLERANCE)


def empirical_threshold(
    confidence: ArrayLike, correct: ArrayLike, target_accuracy: float
) -> tuple[float | None, int, int, int]:
    """The empirical rule at a target *accuracy* in (0, 1] (1 allowed: no error among the
    answered rows): the smallest distinct confidence whose selective accuracy on the rows is at
    least ``target_accuracy``, as ``(threshold, n_answered, errors, n_rows)`` (threshold
    ``None`` and no row answered when none reaches it). No promise for new rows. This is what
    :func:`selfcal.pipeline.selective.choose_threshold` with ``kind="accuracy"`` returns."""
    target = check_real("target accuracy", target_accuracy, 0, 1, low_open=True)
    conf = _confidences(confidence)
    right = _correctness(correct, conf.shape[0])
    if conf.shape[0] == 0:
        raise ValueError("confidence and correct must hold at least one row")
    thresholds, n, e = proc.candidates(conf, right, None)
    ok = meets_accuracy(n, e, target)
    if not ok.any():
        return None, 0, 0, int(conf.shape[0])
    g = int(np.flatnonzero(ok)[-1])
    return float(thresholds[g]), int(n[g]), int(e[g]), int(conf.shape[0])


def _grid(grid: ArrayLike) -> np.ndarray:
    arr = grid.detach().cpu().numpy() if hasattr(grid, "detach") else grid
    g = np.asarray(arr, dtype=np.float64)
    if g.ndim != 1 or g.shape[0] == 0 or not np.isfinite(g).all():
        raise ValueError("grid must be a non-empty 1-D array of finite thresholds")
    if np.unique(g).shape[0] != g.shape[0]:
        raise ValueError("grid must hold distinct thresholds (found a repeated value)")
    return g


def _certificate(
    rule: str,
    eps: float,
    delta: float | None,
    thresholds: np.ndarray,
    n: np.ndarray,
    e: np.ndarray,
    ok: np.ndarray,
    n_rows: int,
    rows_needed: int | None,
    bound_delta: float | None,
) -> Certificate:
    """The certificate at the lowest candidate with ``ok`` and at least one answered row."""
    ok = ok & (n > 0)
    if not ok.any():
        return Certificate(rule, eps, delta, None, n_rows, 0, 0, None, rows_needed)
    g = int(np.flatnonzero(ok)[-1])
    answered, errors = int(n[g]), int(e[g])
    if rule == "ltt":
        assert bound_delta is not None
        bound: float | None = proc.clopper_pearson(answered, errors, bound_delta)
    elif rule == "crc":
        bound = (errors + 1) / (n_rows + 1)
    else:
        bound = None
    return Certificate(
        rule, eps, delta, float(thresholds[g]), n_rows, answered, errors, bound, None
    )
