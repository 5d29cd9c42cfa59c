"""Conformal prediction sets for a model folder: ``selfcal train --conformal-split F`` holds
out a seeded random share ``F`` of the validation rows **before anything else sees them**, and
``selfcal predict --conformal ALPHA`` turns the model's calibrated probabilities into a set of
labels per row with split conformal prediction (:class:`selfcal.conformal.SplitConformal`).

Why those rows keep the guarantee: the network's hyperparameters and checkpoint are selected,
the post-hoc calibrator is fitted and the abstention thresholds are chosen on the *other*
validation rows; the held-out rows are used for nothing but conformal calibration. Given
everything fitted, they are exchangeable with new rows from the validation distribution, so a
set computed at level ``ALPHA`` contains the true label with probability at least
``1 - ALPHA`` (marginally, over the held-out rows and the new row). Rows the calibrator was
fitted on would not do: its fit depends on them, so their scores are not exchangeable with a
new row's.

The folder stores those rows' calibrated probabilities and labels (``conformal.npz``: arrays
``probs`` ``(n, C)`` float64 and ``labels`` ``(n,)`` int64), and predict fits the conformal
predictor at the requested ``ALPHA`` and score there, so one trained folder serves every
level. ``ALPHA`` must be at least ``1 / (n + 1)``: with fewer rows no finite threshold has the
coverage, which is a one-line error rather than sets of every label.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from selfcal.pipeline.folder_schema import read_conformal
from selfcal.pipeline.model_dir import CONFORMAL, member
from selfcal.pipeline.tables import FeatureTable

SPLIT_SALT = 0x5E7C0F
"""Mixed into the split's seed so the held-out rows do not track the training seed's draws."""
SCORES = ("lac", "aps", "raps", "saps")
"""The conformity scores ``--conformal-score`` takes: :data:`selfcal.conformal.SCORES`."""
DEFAULT_SCORE = "aps"
"""The score used without ``--conformal-score``: ``SplitConformal``'s default."""


def split_validation(
    table: FeatureTable, fraction: float, seed: int
) -> tuple[FeatureTable, FeatureTable]:
    """``(rest, held_out)``: a seeded random ``round(fraction * N)`` of ``table``'s rows held
    out for conformal calibration (module doc), both parts in file order."""
    if not 0.0 < fraction < 1.0 or not math.isfinite(fraction):
        raise ValueError(f"--conformal-split must be in (0, 1), got {fraction!r}")
    n = table.n_rows
    k = round(fraction * n)
    if k < 1 or n - k < 2:
        raise ValueError(
            f"{table.name}: {n} validation rows cannot spare {fraction:g} of them for conformal "
            "calibration (each part needs rows); give more validation rows or another share"
        )
    order = np.random.default_rng([seed, SPLIT_SALT]).permutation(n)
    held = np.sort(order[:k])
    rest = np.sort(order[k:])
    return _rows(table, rest, ""), _rows(table, held, " (conformal rows)")


def _rows(table: FeatureTable, index: np.ndarray, suffix: str) -> FeatureTable:
    labels = None if table.labels is None else table.labels[index]
    return FeatureTable(table.name + suffix, table.columns, table.x[index], labels)


def save_calibration(folder: Path, probs: np.ndarray, labels: np.ndarray) -> None:
    """``conformal.npz``: the held-out rows' calibrated probabilities and encoded labels."""
    np.savez(
        folder / CONFORMAL,
        probs=np.asarray(probs, dtype=np.float64),
        labels=np.asarray(labels, dtype=np.int64),
    )


def load_calibration(folder: str | Path, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """The stored ``(probs, labels)`` of a model of ``n_classes`` classes, checked
    (:func:`selfcal.pipeline.folder_schema.read_conformal`); a folder trained without
    ``--conformal-split`` is a one-line error saying how to get one."""
    path = member(folder, CONFORMAL)
    if path is None:
        raise ValueError(
            f"{folder}: no conformal calibration rows; train it again with --conformal-split "
            "(e.g. 0.3) to hold out validation rows for --conformal"
        )
    return read_conformal(path, n_classes)


@dataclass(frozen=True, eq=False)
class ConformalSets:
    """Prediction sets of some rows: ``sets`` ``(N, C)`` bool, at level ``alpha`` with
    ``score``, calibrated on ``n_calibration`` held-out rows (threshold ``threshold``)."""

    sets: np.ndarray
    alpha: float
    score: str
    n_calibration: int
    threshold: float

    @property
    def sizes(self) -> np.ndarray:
        return self.sets.sum(axis=1).astype(np.int64)

    def coverage(self, labels: np.ndarray) -> float:
        """Share of rows whose label (encoded) is in their set."""
        return float(self.sets[np.arange(len(labels)), labels].mean())

    def describe(self) -> str:
        return (
            f"conformal sets at alpha {self.alpha:g} (score {self.score}): calibrated on the "
            f"{self.n_calibration} validation rows held out at training (used for nothing "
            f"else), threshold {self.threshold:.4g}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "alpha": self.alpha,
            "score": self.score,
            "n_calibration": self.n_calibration,
            "threshold": self.threshold,
            "average_size": float(self.sizes.mean()),
        }


def check_alpha(alpha: float, n: int, where: str = "--conformal") -> None:
    """``alpha`` in (0, 1) and at least ``1 / (n + 1)`` (module doc)."""
    if not 0.0 < alpha < 1.0 or not math.isfinite(alpha):
        raise ValueError(f"{where} must be in (0, 1), got {alpha!r}")
    if alpha < 1.0 / (n + 1):
        raise ValueError(
            f"{where} {alpha:g} needs at least {math.ceil(1 / alpha) - 1} calibration rows, "
            f"there are {n}: the smallest level they support is 1/(n+1) = {1 / (n + 1):.3g}"
        )


def conformal_sets(
    folder: str | Path, probs: np.ndarray, alpha: float, score: str = DEFAULT_SCORE
) -> ConformalSets:
    """Sets for ``probs`` (the model's calibrated probabilities of new rows) from the folder's
    held-out rows, fitted now at ``alpha`` with ``score``."""
    from selfcal._validation import check_choice
    from selfcal.conformal import SplitConformal

    check_choice("--conformal-score", score, SCORES)
    cal_probs, cal_labels = load_calibration(folder, probs.shape[1])
    check_alpha(alpha, len(cal_labels))
    predictor = SplitConformal(alpha=alpha, nonconformity=score).fit(
        probs=cal_probs, labels=cal_labels
    )
    sets = np.asarray(predictor.predict_set(probs=np.asarray(probs, dtype=np.float64)))
    return ConformalSets(
        sets.astype(bool), alpha, score, int(predictor.n_calibration_), float(predictor.threshold_)
    )
