""":class:`GuaranteedAbstention`: a selective predictor on calibrated probabilities, with one
certificate overall or one per group of rows (Mondrian)."""

from __future__ import annotations

from typing import Any

import numpy as np

from selfcal._inputs import Groups
from selfcal._validation import check_choice, check_flag, check_real
from selfcal._warnings import warn_unseen_groups
from selfcal.abstention.certificate import RULES, Certificate, certify_threshold
from selfcal.exceptions import not_fitted
from selfcal.predictions import ArrayLike, Predictions, as_predictions

OVERLAPPING = "GuaranteedAbstention needs one group per row, not overlapping membership columns"


class GuaranteedAbstention:
    """A selective predictor on calibrated probabilities: fit on certifying rows, abstain on
    new rows.

    ``fit(probs, labels)`` certifies a threshold on the top-label confidence ``c = max_k p_k``
    by ``rule`` (:func:`~selfcal.abstention.certify_threshold`; the promises are stated in
    :mod:`selfcal.abstention`); ``predict(probs)`` flags the rows to abstain on (``c <
    threshold``). With ``groups``, one certificate per group from that group's rows only
    (Mondrian): each group's promise holds at ``delta``; ``simultaneous=True`` (``"ltt"`` only)
    certifies each group at ``delta / G`` (Bonferroni over the ``G`` groups), so that all the
    groups' promises hold at once with probability at least ``1 - delta``. A row of a group not
    seen at fit time is abstained on, with a ``UserWarning``.

    The probabilities must not have been fitted on the certifying rows: the promise needs the
    scores to be a fixed function of each row (calibrate on one split, certify on another).
    """

    def __init__(
        self,
        target_risk: float = 0.05,
        delta: float = 0.05,
        rule: str = "ltt",
        *,
        simultaneous: bool = False,
    ) -> None:
        self.target_risk = check_real(
            "target_risk", target_risk, 0, 1, low_open=True, high_open=True
        )
        self.delta = check_real("delta", delta, 0, 1, low_open=True, high_open=True)
        self.rule = check_choice("rule", rule, RULES)
        check_flag("simultaneous", simultaneous)
        if simultaneous and self.rule != "ltt":
            raise ValueError(
                "simultaneous=True divides delta over the groups: it needs rule 'ltt', "
                f"not {self.rule!r}"
            )
        self.simultaneous = bool(simultaneous)

    def __repr__(self) -> str:
        return (
            f"GuaranteedAbstention(target_risk={self.target_risk!r}, delta={self.delta!r}, "
            f"rule={self.rule!r}, simultaneous={self.simultaneous!r})"
        )

    # --------------------------------------------------------------------------------- fit
    def fit(
        self, probs: ArrayLike, labels: ArrayLike | None = None, groups: ArrayLike | None = None
    ) -> GuaranteedAbstention:
        """Certify the threshold(s) on ``probs`` ``(N, C)`` calibrated probabilities and their
        ``labels`` (or a :class:`~selfcal.predictions.Predictions` holding both); ``groups``
        (one per row, read by :func:`selfcal._inputs.as_groups`, or the groups of the
        :class:`~selfcal.predictions.Predictions`) for one certificate per group."""
        pred = _predictions(probs, labels, groups, True)
        confidence = pred.confidence.detach().cpu().numpy()
        correct = pred.correct.detach().cpu().numpy() > 0.5
        if pred.groups is None:
            if self.simultaneous:
                raise ValueError("simultaneous=True needs groups=")
            self.certificates_: dict[str | None, Certificate] = {
                None: certify_threshold(
                    confidence,
                    correct,
                    target_risk=self.target_risk,
                    delta=self.delta,
                    rule=self.rule,
                )
            }
            return self
        groups_ = _partition(pred.groups)
        sizes = groups_.sizes().tolist()
        seen = [
            (name, rows) for name, rows, size in zip(groups_.names, groups_.rows(), sizes) if size
        ]
        delta = self.delta / len(seen) if self.simultaneous else self.delta
        certificates: dict[str | None, Certificate] = {}
        for name, rows in seen:
            index = rows.cpu().numpy()
            cert = certify_threshold(
                confidence[index],
                correct[index],
                target_risk=self.target_risk,
                delta=delta,
                rule=self.rule,
            )
            certificates[name] = Certificate(**{**cert.to_json(), "group": name})
        self.certificates_ = certificates
        return self

    # ----------------------------------------------------------------------------- predict
    def predict(self, probs: ArrayLike, groups: ArrayLike | None = None) -> np.ndarray:
        """Bool ``(N,)``: True where the row is abstained on (its confidence is below its
        threshold, its group's threshold is ``None``, or its group was not seen at fit)."""
        certificates = self._fitted()
        pred = _predictions(probs, None, groups, False)
        confidence = pred.confidence.detach().cpu().numpy()
        if None in certificates:
            if pred.groups is not None:
                raise ValueError(
                    "this GuaranteedAbstention was fitted without groups; do not pass groups="
                )
            return certificates[None].abstain(confidence)
        if pred.groups is None:
            raise ValueError("this GuaranteedAbstention was fitted per group: pass groups=")
        groups_ = _partition(pred.groups)
        names = [str(k) for k in certificates]
        warn_unseen_groups(
            "GuaranteedAbstention",
            groups_.unseen(names),
            "their rows are abstained on (no threshold was certified for them)",
        )
        table = np.array(
            [np.inf if c.threshold is None else c.threshold for c in certificates.values()]
            + [np.inf]
        )
        codes = groups_.codes_in(names).cpu().numpy()
        thresholds = table[np.where(codes < 0, table.shape[0] - 1, codes)]
        return confidence < thresholds

    # ------------------------------------------------------------------------------ report
    def describe(self) -> str:
        """Each certificate's promise in words, one line each."""
        return "\n".join(c.describe() for c in self._fitted().values())

    def to_json(self) -> dict[str, Any]:
        return {
            "target_risk": self.target_risk,
            "delta": self.delta,
            "rule": self.rule,
            "simultaneous": self.simultaneous,
            "certificates": [c.to_json() for c in self._fitted().values()],
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> GuaranteedAbstention:
        """The predictor :meth:`to_json` wrote, every field checked (each certificate by
        :meth:`Certificate.from_json`, and agreeing with the predictor's rule and target)."""
        if not isinstance(doc, dict):
            raise ValueError(
                f"GuaranteedAbstention JSON must be an object, got {type(doc).__name__}"
            )
        unknown = set(doc) - {"target_risk", "delta", "rule", "simultaneous", "certificates"}
        if unknown:
            raise ValueError(f"GuaranteedAbstention JSON has unknown field(s) {sorted(unknown)}")
        # each value is checked by __init__ (a missing one is None, refused there)
        values: dict[str, Any] = doc
        out = cls(
            values.get("target_risk"),  # type: ignore[arg-type]
            values.get("delta"),  # type: ignore[arg-type]
            values.get("rule"),  # type: ignore[arg-type]
            simultaneous=values.get("simultaneous"),  # type: ignore[arg-type]
        )
        listed = doc.get("certificates")
        if not isinstance(listed, list) or not listed:
            raise ValueError("GuaranteedAbstention JSON must list at least one certificate")
        certificates = [Certificate.from_json(c) for c in listed]
        groups = [c.group for c in certificates]
        if (None in groups and len(groups) > 1) or len(set(groups)) != len(groups):
            raise ValueError(
                "GuaranteedAbstention JSON: certificates must be one without a group or one "
                "per distinct group"
            )
        for c in certificates:
            if c.rule != out.rule or c.target_risk != out.target_risk:
                raise ValueError(
                    f"certificate of group {c.group!r} has rule {c.rule!r} and target "
                    f"{c.target_risk!r}, not the predictor's {out.rule!r} and {out.target_risk!r}"
                )
        out.certificates_ = {c.group: c for c in certificates}
        return out

    def _fitted(self) -> dict[str | None, Certificate]:
        if not hasattr(self, "certificates_"):
            raise not_fitted(
                "this GuaranteedAbstention is not fitted yet: call fit(probs, labels) first"
            )
        return self.certificates_


def _predictions(
    probs: ArrayLike, labels: ArrayLike | None, groups: ArrayLike | None, need: bool
) -> Predictions:
    """``probs`` (or a :class:`Predictions`) through the input contract, with ``groups``
    (labels required when ``need``: at fit)."""
    if isinstance(probs, Predictions):
        return as_predictions(probs, labels=labels, groups=groups, need_labels=need)
    return as_predictions(probs=probs, labels=labels, groups=groups, need_labels=need)


def _partition(groups: Groups) -> Groups:
    if groups.overlapping:
        raise ValueError(OVERLAPPING)
    return groups
