"""``selfcal evaluate --conformal ALPHA``: split-conformal prediction sets scored on a file's
rows (:class:`selfcal.conformal.SplitConformal`, :func:`selfcal.metrics.conformal_summary`).

Which rows calibrate and which are scored is stated, never guessed: the rows of
``--conformal-calibration FILE2`` calibrate and every row of FILE is scored; without it, a
random half of FILE's rows (``floor(N / 2)``, drawn with ``--seed``) calibrates and the other
rows are scored. Rows that calibrate are never scored, so the reported coverage estimates the
guarantee's ``1 - ALPHA`` without optimism.

Where the file has groups, each group's coverage and mean set size of these *marginal* sets
are reported too (the marginal guarantee holds on average over groups, not in each one), and
beside them those of *group-conditional* sets fitted on the same rows (``--conformal-groups``,
:data:`CONFORMAL_GROUPS`): ``mondrian`` (``SplitConformal(mondrian="group")``, one threshold per
group: coverage ``>= 1 - ALPHA`` in each group; one group a row), ``conditional``
(:class:`selfcal.conformal.ConditionalConformal`: coverage ``>= 1 - ALPHA`` in each of possibly
overlapping groups) or ``none``. The default, ``auto``, is ``mondrian`` for one group a row,
``conditional`` for overlapping groups (membership columns, e.g. several ``--groups``), and
nothing without groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only
    from rich.console import Group as RenderGroup
    from rich.table import Table

    from selfcal.metrics.bootstrap import Interval
    from selfcal.predictions import Predictions

CONFORMAL_SCORES = ("lac", "aps", "raps", "saps")
"""``--conformal-score``'s choices: :data:`selfcal.conformal.SCORES`, as a constant."""
CONFORMAL_SCORE = "aps"
"""``--conformal-score``'s default: ``SplitConformal``'s own."""
CONFORMAL_GROUPS = ("auto", "mondrian", "conditional", "none")
"""``--conformal-groups``'s choices (module doc); ``auto`` is the default."""


@dataclass(frozen=True)
class GroupSets:
    """The group-conditional sets beside the marginal ones: ``method`` (``"mondrian"`` or
    ``"conditional"``), ``conformal_summary``'s intervals of those sets on the scored rows,
    and each group's ``name``, ``size``, ``coverage`` and ``set_size``."""

    method: str
    metrics: dict[str, Interval]
    groups: list[dict[str, Any]]


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
    by_group: GroupSets | None = None
    """The group-conditional sets (``--conformal-groups``), ``None`` when none were fitted."""


def group_method(choice: str, scored: Predictions, calibration: Predictions) -> str | None:
    """The group-conditional method ``--conformal-groups CHOICE`` means for these rows
    (module doc), ``None`` for none; a choice the rows cannot take is one ``ValueError``."""
    if choice == "none":
        return None
    if scored.groups is None or calibration.groups is None:
        if choice == "auto":
            return None
        where = "the scored rows" if scored.groups is None else "--conformal-calibration"
        raise ValueError(
            f"--conformal-groups {choice} needs each row's groups; {where} have none (a .npz's "
            "'groups' array, or --groups COLUMN for a table)"
        )
    overlapping = scored.groups.overlapping or calibration.groups.overlapping
    if choice == "auto":
        return "conditional" if overlapping else "mondrian"
    if choice == "mondrian" and overlapping:
        raise ValueError(
            "--conformal-groups mondrian needs one group a row; these groups overlap "
            "(membership columns): use --conformal-groups conditional"
        )
    return choice


def group_sets(
    method: str, alpha: float, score: str, seed: int, cal: Predictions, scored: Predictions
) -> Any:
    """The ``(N, C)`` sets of the scored rows by ``SplitConformal(mondrian="group")`` or
    ``ConditionalConformal`` fitted on the calibration rows with their groups."""
    from selfcal.conformal import ConditionalConformal, SplitConformal

    model = (
        SplitConformal(alpha=alpha, nonconformity=score, mondrian="group", seed=seed)
        if method == "mondrian"
        else ConditionalConformal(alpha=alpha, nonconformity=score, seed=seed)
    )
    model.fit(probs=cal.probs, labels=cal.require_labels(), groups=cal.groups)
    return model.predict_set(probs=scored.probs, groups=scored.groups)


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
    groups: str = "auto",
) -> ConformalScores:
    """Fit ``SplitConformal(alpha, score)`` on the calibration rows (module doc) and score
    the sets of the others; with groups, the group-conditional sets of ``groups``
    (``--conformal-groups``) too."""
    import numpy as np

    from selfcal.cli._abstention import split_rows
    from selfcal.conformal import SplitConformal
    from selfcal.evaluation import default_resamples
    from selfcal.metrics import conformal_summary
    from selfcal.pipeline.conformal import check_alpha

    labels = pred.require_labels()
    if calibration is None:
        cal, scored, words = split_rows(pred, seed, name)
    else:
        if calibration.n_classes != pred.n_classes:
            raise ValueError(
                f"--conformal-calibration has {calibration.n_classes} classes, {name} has "
                f"{pred.n_classes}"
            )
        cal, scored, words = calibration, pred, f"the {calibration.n_samples} rows of the file"
    check_alpha(alpha, cal.n_samples)
    method = group_method(groups, scored, cal)
    predictor = SplitConformal(alpha=alpha, nonconformity=score, seed=seed)
    predictor.fit(probs=cal.probs, labels=cal.require_labels())
    sets = predictor.predict_set(probs=scored.probs)
    labels = scored.require_labels()
    n_res = resamples or default_resamples(scored.n_samples)
    metrics = conformal_summary(sets, labels, n_resamples=n_res, seed=seed)
    threshold = predictor.threshold_
    by_group = None
    if method is not None:
        found = group_sets(method, alpha, score, seed, cal, scored)
        summary = conformal_summary(found, labels, n_resamples=n_res, seed=seed)
        per_group = group_coverage(found, labels, scored)
        assert per_group is not None
        by_group = GroupSets(method, dict(summary), per_group)
    return ConformalScores(
        alpha,
        score,
        words,
        cal.n_samples,
        scored.n_samples,
        float(threshold) if np.ndim(threshold) == 0 else float("nan"),
        dict(metrics),
        group_coverage(sets, labels, scored),
        by_group,
    )


def conformal_table(scored: ConformalScores) -> Table:
    """The sets' metrics with their intervals, and those of the group-conditional sets beside
    them where they were fitted; the title says which rows calibrated."""
    from rich.table import Table

    from selfcal.cli._common import fmt

    table = Table(
        title=f"conformal sets, alpha {scored.alpha:g}, score {scored.score} (95% bootstrap CI)",
        caption=f"calibrated on {scored.calibration}; {scored.n_scored} other rows scored",
    )
    extra = scored.by_group
    table.add_column("metric")
    table.add_column("value" if extra is None else "marginal", justify="right")
    table.add_column("95% CI", justify="right")
    if extra is not None:
        table.add_column(extra.method, justify="right")
        table.add_column("95% CI", justify="right")
    for key, iv in scored.metrics.items():
        cells = [fmt(iv.value), f"[{fmt(iv.low)}, {fmt(iv.high)}]"]
        if extra is not None:
            other = extra.metrics[key]
            cells += [fmt(other.value), f"[{fmt(other.low)}, {fmt(other.high)}]"]
        table.add_row(key, *cells)
    return table


def conformal_groups_table(
    scored: ConformalScores, shown: int, in_json: bool = True
) -> Table | None:
    """The ``shown`` groups least covered by the marginal sets: their coverage and mean set
    size, and beside them those of the group-conditional sets where they were fitted
    (``None`` without groups); the caption says how many groups there are and that every
    one is in ``--json`` (``in_json``: the command has one)."""
    from rich.table import Table

    from selfcal.cli._common import fmt

    if scored.groups is None:
        return None
    extra = scored.by_group
    other = {} if extra is None else {g["name"]: g for g in extra.groups}
    present = [g for g in scored.groups if g["size"]]
    worst = sorted(present, key=lambda g: g["coverage"])[: max(shown, 0)]
    sets = "marginal sets" if extra is None else f"marginal and {extra.method} sets"
    keys = "conformal.groups" + ("" if extra is None else ", conformal.group_conditional")
    table = Table(
        title=f"conformal coverage per group, alpha {scored.alpha:g} ({sets})",
        caption=f"the {len(worst)} least covered of {len(present)} groups (by the marginal "
        f"sets)" + (f"; every group in --json ({keys})" if in_json else ""),
    )
    columns = ["group", "rows", "coverage", "mean set size"]
    if extra is not None:
        columns = [*columns[:2], "marginal coverage", "marginal set size"]
        columns += [f"{extra.method} coverage", f"{extra.method} set size"]
    for column in columns:
        table.add_column(column, justify="left" if column == "group" else "right")
    for g in worst:
        cells = [g["name"], str(g["size"]), fmt(g["coverage"]), fmt(g["set_size"])]
        if extra is not None:
            cells += [fmt(other[g["name"]]["coverage"]), fmt(other[g["name"]]["set_size"])]
        table.add_row(*cells)
    return table


def check_conformal_options(alpha: float, score: str, groups: str) -> None:
    """``--conformal``'s level, ``--conformal-score`` and ``--conformal-groups``, checked."""
    from selfcal._validation import check_choice, check_real

    check_real("--conformal", alpha, 0.0, 1.0, low_open=True, high_open=True)
    check_choice("--conformal-score", score, CONFORMAL_SCORES)
    check_choice("--conformal-groups", groups, CONFORMAL_GROUPS)


def calibrated_sets_view(
    after: Predictions,
    groups: Predictions,
    alpha: float,
    score: str,
    choice: str,
    seed: int,
    name: str,
    shown: int = 5,
) -> RenderGroup:
    """``selfcal calibrate --conformal ALPHA``: sets of the calibrated ``--apply`` rows
    (``after``, with the groups of ``groups``), a random half calibrating and the other half
    scored (as ``selfcal evaluate`` without ``--conformal-calibration``; the rows that fitted
    the calibrator never calibrate the sets), with the group-conditional sets of ``choice``
    beside them."""
    from rich.console import Group as RenderGroup

    rows = after if groups.groups is None else after.with_groups(groups.groups)
    scored = conformal_scores(rows, alpha, score, None, seed, None, name, choice)
    per_group = conformal_groups_table(scored, shown, in_json=False)
    return RenderGroup(conformal_table(scored), *([] if per_group is None else [per_group]))
