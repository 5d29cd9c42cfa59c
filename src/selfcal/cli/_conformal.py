"""``selfcal evaluate --conformal ALPHA``: split-conformal prediction sets scored on a file's
rows (:class:`selfcal.conformal.SplitConformal`, :func:`selfcal.metrics.conformal_summary`).

Which rows calibrate and which are scored is stated, never guessed: the rows of
``--conformal-calibration FILE2`` calibrate and every row of FILE is scored; without it, a
random half of FILE's rows (``floor(N / 2)``, drawn with ``--seed``) calibrates and the other
rows are scored. Rows that calibrate are never scored, so the reported coverage estimates the
guarantee's ``1 - ALPHA`` without optimism.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - typing only
    from rich.table import Table

    from selfcal.metrics.bootstrap import Interval
    from selfcal.predictions import Predictions

CONFORMAL_SCORES = ("lac", "aps", "raps", "saps")
"""``--conformal-score``'s choices: :data:`selfcal.conformal.SCORES`, as a constant."""
CONFORMAL_SCORE = "aps"
"""``--conformal-score``'s default: ``SplitConformal``'s own."""


@dataclass(frozen=True)
class ConformalScores:
    """The sets' settings, which rows calibrated (in words, and how many), how many were
    scored, the threshold and ``conformal_summary``'s intervals."""

    alpha: float
    score: str
    calibration: str
    n_calibration: int
    n_scored: int
    threshold: float
    metrics: dict[str, Interval]


def conformal_scores(
    pred: Predictions,
    alpha: float,
    score: str,
    calibration: Predictions | None,
    seed: int,
    resamples: int | None,
    name: str,
) -> ConformalScores:
    """Fit ``SplitConformal(alpha, score)`` on the calibration rows (module doc) and score
    the sets of the others."""
    import numpy as np
    import torch

    from selfcal.conformal import SplitConformal
    from selfcal.evaluation import default_resamples
    from selfcal.metrics import conformal_summary
    from selfcal.pipeline.conformal import check_alpha

    labels = pred.require_labels()
    if calibration is None:
        order = torch.from_numpy(np.random.default_rng(seed).permutation(pred.n_samples))
        half = pred.n_samples // 2
        cal, scored = (
            pred.subset(order[:half].sort().values),
            pred.subset(order[half:].sort().values),
        )
        words = f"a random half of {name}'s rows ({half} of {pred.n_samples}, seed {seed})"
    else:
        if calibration.n_classes != pred.n_classes:
            raise ValueError(
                f"--conformal-calibration has {calibration.n_classes} classes, {name} has "
                f"{pred.n_classes}"
            )
        cal, scored, words = calibration, pred, f"the {calibration.n_samples} rows of the file"
    check_alpha(alpha, cal.n_samples)
    predictor = SplitConformal(alpha=alpha, nonconformity=score, seed=seed)
    predictor.fit(probs=cal.probs, labels=cal.require_labels())
    sets = predictor.predict_set(probs=scored.probs)
    labels = scored.require_labels()
    n_res = resamples or default_resamples(scored.n_samples)
    metrics = conformal_summary(sets, labels, n_resamples=n_res, seed=seed)
    threshold = predictor.threshold_
    return ConformalScores(
        alpha,
        score,
        words,
        cal.n_samples,
        scored.n_samples,
        float(threshold) if np.ndim(threshold) == 0 else float("nan"),
        dict(metrics),
    )


def conformal_table(scored: ConformalScores) -> Table:
    """The sets' metrics with their intervals; the title says which rows calibrated."""
    from rich.table import Table

    from selfcal.cli._common import fmt

    table = Table(
        title=f"conformal sets, alpha {scored.alpha:g}, score {scored.score} (95% bootstrap CI)",
        caption=f"calibrated on {scored.calibration}; {scored.n_scored} other rows scored",
    )
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("95% CI", justify="right")
    for key, iv in scored.metrics.items():
        table.add_row(key, fmt(iv.value), f"[{fmt(iv.low)}, {fmt(iv.high)}]")
    return table
