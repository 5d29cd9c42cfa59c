"""Guaranteed abstention for a model folder: ``selfcal predict --target-risk EPS --delta D``
certifies the abstention threshold (:func:`selfcal.abstention.certify_threshold`) on the
validation rows that ``selfcal train --conformal-split F`` held out **before anything else saw
them** (:mod:`selfcal.pipeline.conformal`).

Why those rows: the network's hyperparameters and checkpoint are selected and the post-hoc
calibrator is fitted on the *other* validation rows, so given everything fitted, the held-out
rows' calibrated confidences are exchangeable with new rows from the validation distribution
-- the assumption of Learn-then-Test and of conformal risk control. Rows the calibrator was
fitted on would weaken the promise (its fit depends on their labels), so a guaranteed rule on a
folder without held-out rows is a one-line error saying how to get them. The folder keeps those
rows' calibrated probabilities and labels (``conformal.npz``), so one trained folder serves
every target risk, ``delta`` and rule; the certificate is a deterministic function of them.

The empirical rule (``rule="empirical"``, no promise) is chosen on the validation rows the
calibrator was fitted on, as ``--target-accuracy 1-EPS`` is: that is today's rule, named as
such.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from selfcal._validation import check_choice, check_real
from selfcal.abstention import RULES, Certificate, certify_threshold
from selfcal.pipeline import model_dir as md
from selfcal.pipeline.conformal import load_calibration
from selfcal.pipeline.folder_schema import read_validation

DEFAULT_DELTA = 0.05
"""``--delta``'s default: the promise fails with probability at most 5% over the held-out
rows' draw."""
DEFAULT_RULE = "ltt"


def certificate_for(
    folder: str | Path,
    n_classes: int,
    target_risk: float,
    *,
    delta: float = DEFAULT_DELTA,
    rule: str = DEFAULT_RULE,
) -> Certificate:
    """The abstention certificate of ``folder`` at ``target_risk`` (module doc): ``"ltt"``
    and ``"crc"`` on the held-out rows, ``"empirical"`` on the validation rows."""
    if rule == "empirical":
        path = md.member(folder, md.VALIDATION)
        if path is None:
            raise ValueError(f"{folder}: {md.VALIDATION} is missing")
        confidence, correct = read_validation(path)
        return certify_threshold(confidence, correct, target_risk=target_risk, rule=rule)
    try:
        probs, labels = load_calibration(folder, n_classes)
    except ValueError as err:
        if "no conformal calibration rows" not in str(err):
            raise
        raise ValueError(
            f"{folder}: no held-out rows to certify --target-risk on; train it again with "
            "--conformal-split (e.g. 0.3) so that rows the calibrator never saw certify the "
            "threshold, or use --rule empirical (no guarantee)"
        ) from None
    confidence, predicted = md.confidence_and_prediction(probs)
    return certify_threshold(
        confidence,
        predicted == labels,
        target_risk=target_risk,
        delta=delta,
        rule=rule,
    )


def check_guarantee(
    target_risk: float | None, delta: float, rule: str, held_out: float | None
) -> None:
    """The guarantee ``selfcal train --target-risk`` keeps, checked: ``target_risk`` and
    ``delta`` in (0, 1), a known rule, and held-out rows for a guaranteed rule."""
    if target_risk is None:
        return
    check_real("--target-risk", target_risk, 0.0, 1.0, low_open=True, high_open=True)
    check_real("--delta", delta, 0.0, 1.0, low_open=True, high_open=True)
    check_choice("--rule", rule, RULES)
    if held_out is None and rule != "empirical":
        raise ValueError(
            "--target-risk needs --conformal-split (e.g. 0.3): rows the calibrator never sees "
            "certify the threshold (or --rule empirical, which promises nothing)"
        )


def stored_guarantee(config: dict[str, Any]) -> tuple[float, float, str] | None:
    """``(target_risk, delta, rule)`` a folder's ``config.json`` keeps (``None``: none),
    checked as :func:`check_guarantee` checks them."""
    kept = config.get("abstention")
    if kept is None:
        return None
    if not isinstance(kept, dict) or set(kept) != {"target_risk", "delta", "rule"}:
        raise ValueError("config.json: abstention must hold exactly target_risk, delta, rule")
    risk, delta, rule = kept["target_risk"], kept["delta"], kept["rule"]
    check_guarantee(risk, delta, rule, None if rule == "empirical" else 1.0)
    return float(risk), float(delta), str(rule)


def stored_certificate(
    folder: str | Path, n_classes: int, config: dict[str, Any]
) -> dict[str, Any] | None:
    """The certificate of the guarantee ``config`` keeps, as the report holds it (its fields
    and the promise in words), or ``None``."""
    kept = stored_guarantee(config)
    if kept is None:
        return None
    risk, delta, rule = kept
    cert = certificate_for(folder, n_classes, risk, delta=delta, rule=rule)
    return {**cert.to_json(), "promise": cert.describe()}
