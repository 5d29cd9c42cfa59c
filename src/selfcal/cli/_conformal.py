"""``selfcal evaluate --conformal ALPHA``: split-conformal prediction sets scored on a file's
rows (:class:`selfcal.conformal.SplitConformal`, :func:`selfcal.metrics.conformal_summary`).

Which rows calibrate and which are scored is stated, never guessed: the rows of
``--conformal-calibration FILE2`` calibrate and every row of FILE is scored; without it, a
random half of FILE's rows (``floor(N / 2)``, drawn with ``--seed``) calibrates and the other
rows are scored. Rows that calibrate are never scored, so the reported coverage estimates the
guarantee's ``1 - ALPHA`` without optimism.

Where the file has groups, each group's coverage and mean set size of these *marginal* sets
are reported too (the marginal guarantee holds on average over groups, not in each one; a
group covered well below ``1 - ALPHA`` is what ``SplitConformal(mondrian="group")`` fixes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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
    groups: list[dict[str, Any]] | None = None
    """Per group of the scored rows (with groups): ``name``, ``size`` (scored rows),
    ``coverage`` and ``set_size`` (mean) of the marginal sets; ``None`` without groups."""


def group_coverage(sets: Any, labels: Any, scored: Predictions) -> list[dict[str, Any]] | None:
    """Each group's scored rows, coverage and mean set size (``None`` where the rows have no
    groups; a group without scored rows has ``null`` coverage and set size)."""
    if scored.groups is None:
        return None
    hit = sets.gather(1, labels.unsqueeze(1)).squeeze(1).double().cpu()
    size = sets.sum(1).double().cpu()
    out = []
    for name, rows in zip(scored.groups.names, scored.groups.rows(), strict=True):
        rows = rows.cpu()
        n = int(rows.numel())
        out.append(
            {
                "name": name,
                "size": n,
                "coverage": float(hit[rows].mean()) if n else None,
                "set_size": float(size[rows].mean()) if n else None,
            }
        )
    return out


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
        group_coverage(sets, labels, scored),
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


def conformal_groups_table(scored: ConformalScores, shown: int) -> Table | None:
    """The ``shown`` least-covered groups' coverage and mean set size (``None`` without
    groups); the caption says how many groups there are and that every one is in ``--json``."""
    from rich.table import Table

    from selfcal.cli._common import fmt

    if scored.groups is None:
        return None
    present = [g for g in scored.groups if g["size"]]
    worst = sorted(present, key=lambda g: g["coverage"])[: max(shown, 0)]
    table = Table(
        title=f"conformal coverage per group, alpha {scored.alpha:g} (marginal sets)",
        caption=f"the {len(worst)} least covered of {len(present)} groups; every group in "
        "--json (conformal.groups)",
    )
    for column in ("group", "rows", "coverage", "mean set size"):
        table.add_column(column, justify="left" if column == "group" else "right")
    for g in worst:
        table.add_row(g["name"], str(g["size"]), fmt(g["coverage"]), fmt(g["set_size"]))
    return table
