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

from selfcal.abstention import Certificate, certify_threshold
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
