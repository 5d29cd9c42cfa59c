"""Calibrators compared on one prediction set: each fitted on the set's validation split and
scored on its test split -- NLL, Brier score, 15-bin ECE, error, fit time -- with a paired
95% bootstrap interval of each score's difference from temperature scaling's over the test
rows (the same resamples for every calibrator). What ``selfcal compare`` prints and the
post-hoc leaderboard on prediction sets stores (``selfcal reproduce posthoc --sets DIR``)."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

import selfcal.metrics as M
from selfcal.io import PredictionSet
from selfcal.metrics.bootstrap import Resamples, interval_bounds, resampled_values
from selfcal.metrics.scores import brier_terms, nll_terms
from selfcal.posthoc._base import Calibrator
from selfcal.posthoc.auto import AutoCalibration, default_candidates, prepare_fits
from selfcal.posthoc.registry import build_calibrator
from selfcal.predictions import Predictions

SCORES = ("nll", "brier", "ece")
"""The scores compared, in the order of :attr:`Row.resampled`'s first axis."""
BASELINE = "ts"
"""What every calibrator is compared with: temperature scaling."""
RESAMPLES = 1000
"""Bootstrap resamples of the test rows."""


@dataclass
class Row:
    """One calibrator on one set: its test ``scores`` (``nll``, ``brier``, ``ece``,
    ``error``), their ``resampled`` values ``(3, R)``, each score's ``difference`` from TS's
    with its paired interval (``low`` / ``high``), the fit's ``seconds`` and ``warnings``,
    ``auto``'s ``chosen`` candidate, and -- where it could not be fitted -- the one-line
    ``error``."""

    name: str
    scores: dict[str, float] = field(default_factory=dict)
    resampled: np.ndarray | None = None
    difference: dict[str, float] = field(default_factory=dict)
    low: dict[str, float] = field(default_factory=dict)
    high: dict[str, float] = field(default_factory=dict)
    seconds: float = float("nan")
    warnings: int = 0
    chosen: str | None = None
    error: str = ""
    probs: torch.Tensor | None = field(default=None, repr=False)


def default_methods(data: PredictionSet) -> list[str]:
    """``auto``'s default candidates for the set's validation split (less those its size leaves
    out), then ``auto`` itself."""
    names, left_out = default_candidates(data.predictions("val"))
    return [n for n in names if n not in left_out] + ["auto"]


@dataclass(frozen=True)
class Fitted:
    """A calibrator fitted on a set's validation split: its test probabilities, the fit's
    seconds and warnings and the calibrator; or (``probs`` ``None``) why it could not be
    fitted."""

    probs: torch.Tensor | None
    seconds: float = float("nan")
    warnings: int = 0
    calibrator: Calibrator | None = None
    error: str = ""


def fit_predict(name: str, data: PredictionSet) -> Fitted:
    """Calibrator ``name`` fitted on ``data``'s validation split (timed, its warnings counted,
    not shown) and predicting its test split; a ``ValueError`` (e.g. a binary calibrator on
    more classes) is recorded as the reason."""
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            cal = build_calibrator(name, kind=data.kind).fit(data.val, data.val_labels)
            seconds = time.perf_counter() - start
            probs = cal.predict_proba(data.test)
        except ValueError as error:
            return Fitted(None, error=str(error).splitlines()[0])
    return Fitted(torch.as_tensor(probs), seconds, len(caught), cal)


def resampled_scores(
    probs: torch.Tensor, labels: torch.Tensor, n_bins: int, resamples: Resamples
) -> np.ndarray:
    """``(3, R)`` NLL, Brier score and ECE of ``probs`` on each resample of the test rows."""
    pred = Predictions.from_probs(probs.double(), labels)
    nll, brier = nll_terms(pred), brier_terms(pred)
    out = []
    for weights in resamples.chunks():
        total = weights.sum(1)
        out.append(torch.stack([weights @ nll / total, weights @ brier / total]))
    ece = resampled_values(
        lambda w: M.ece.core(pred, weights=w, n_bins=n_bins),
        pred.n_samples,
        resamples.n_resamples,
        0,
        pred.device,
        resamples,
    )
    return torch.cat([torch.cat(out, 1), ece.reshape(1, -1)]).numpy()


def test_scores(probs: torch.Tensor, labels: np.ndarray, n_bins: int) -> dict[str, float]:
    """NLL, Brier score, ``n_bins``-bin ECE and error of test probabilities ``probs``."""
    pred = Predictions.from_probs(probs.double(), torch.as_tensor(labels))
    return {
        "nll": float(M.nll(pred)),
        "brier": float(M.brier(pred)),
        "ece": float(M.ece(pred, n_bins=n_bins)),
        "error": float(M.error(pred)),
    }


def against_baseline(rows: list[Row]) -> None:
    """Fill each row's ``difference``, ``low`` / ``high``: its score minus TS's with the
    centred 95% interval, paired over the resamples (nothing without a TS row)."""
    base = next((r for r in rows if r.name == BASELINE and r.resampled is not None), None)
    if base is None or base.resampled is None:
        return
    for row in rows:
        if row.resampled is None:
            continue
        for j, score in enumerate(SCORES):
            point = row.scores[score] - base.scores[score]
            low, high = interval_bounds(
                torch.from_numpy(row.resampled[j] - base.resampled[j]), torch.tensor(point), 0.95
            )
            row.difference[score] = point
            row.low[score], row.high[score] = float(low), float(high)


def compare(
    data: PredictionSet,
    methods: list[str] | None = None,
    *,
    n_bins: int = 15,
    resamples: int = RESAMPLES,
    keep_probs: bool = False,
) -> list[Row]:
    """Every calibrator of ``methods`` (default :func:`default_methods`; TS is added when
    missing, as the reference) fitted on ``data``'s validation split and scored on its test
    split, with paired intervals against TS (module docstring). ``keep_probs``: keep each
    row's test probabilities (for figures)."""
    methods = list(methods or default_methods(data))
    if BASELINE not in methods:
        methods.insert(0, BASELINE)
    labels = torch.as_tensor(data.test_labels)
    draws = Resamples(len(labels), resamples, 0)
    prepare_fits([m for m in methods if m != "auto"])
    rows = []
    for name in methods:
        fitted = fit_predict(name, data)
        if fitted.probs is None:
            rows.append(Row(name, error=fitted.error))
            continue
        auto = fitted.calibrator if isinstance(fitted.calibrator, AutoCalibration) else None
        rows.append(
            Row(
                name,
                test_scores(fitted.probs, data.test_labels, n_bins),
                resampled_scores(fitted.probs, labels, n_bins, draws),
                seconds=fitted.seconds,
                warnings=fitted.warnings,
                chosen=None if auto is None else auto.chosen_,
                probs=fitted.probs if keep_probs else None,
            )
        )
    against_baseline(rows)
    return rows
