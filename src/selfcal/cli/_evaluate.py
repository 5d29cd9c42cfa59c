"""``selfcal evaluate``: every calibration metric of a file with bootstrap confidence intervals,
as a table or one JSON object, optionally with the standard diagrams."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from selfcal.cli._abstention import RULES as ABSTENTION_RULES
from selfcal.cli._abstention import AbstentionScores, abstention_scores, abstention_table
from selfcal.cli._common import (
    BinsOpt,
    GroupsOpt,
    KindOpt,
    LabelOpt,
    check_kind,
    fmt,
    print_drawn,
    read,
    rich_bar,
    stderr,
    stdout,
)
from selfcal.cli._conformal import (
    CONFORMAL_GROUPS,
    CONFORMAL_SCORE,
    CONFORMAL_SCORES,
    ConformalScores,
    conformal_groups_table,
    conformal_scores,
    conformal_table,
)
from selfcal.cli._errors import errors, source
from selfcal.cli._groups import GROUPS_SHOWN, groups_json, groups_view

if TYPE_CHECKING:  # pragma: no cover - typing only
    from rich.table import Table

    from selfcal.metrics.bootstrap import Interval

PROGRESS_MIN_ROWS = 100_000
"""Show the evaluation progress bar from this many rows on (always when stderr is a TTY)."""
INTERVALS = ("centred", "percentile", "basic")
"""``--interval``'s choices: :data:`selfcal.metrics.bootstrap.INTERVAL_METHODS`, as a constant."""


def check_plot_folder(plot: Path) -> None:
    """Refuse a ``--plot`` folder that is a file, or diagrams without matplotlib."""
    import importlib.util

    if plot.exists() and not plot.is_dir():
        raise ValueError(f"--plot {plot}: is a file; --plot takes a folder for the PNG diagrams")
    if importlib.util.find_spec("matplotlib") is None:
        raise ImportError("--plot needs matplotlib: pip install 'selfcal[full]' (or matplotlib)")


def _finite(x: float) -> float | None:
    """JSON has no NaN/inf: non-finite numbers become ``null``."""
    return x if math.isfinite(x) else None


@contextmanager
def _progress(enabled: bool, total: int) -> Iterator[Callable[[str], None] | None]:
    """A rich progress bar on stderr advancing once per metric, or a no-op callback."""
    if not enabled:
        yield None
        return
    with rich_bar() as bar:
        task = bar.add_task("metrics", total=total)
        yield lambda key: bar.update(task, advance=1, description=f"metrics ({key} done)")


def _evaluate_table(
    results: dict[str, Interval], confidence: float, n: int, n_resamples: int, interval: str
) -> Table:
    from rich.table import Table

    pct = round(100 * confidence)
    table = Table(title=f"{n} samples, {pct}% {interval} bootstrap CI ({n_resamples} resamples)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column(f"{pct}% CI", justify="right")
    for key, iv in results.items():
        table.add_row(key, fmt(iv.value), f"[{fmt(iv.low)}, {fmt(iv.high)}]")
    return table


def _interval_json(iv: Interval) -> dict[str, Any]:
    return {"value": _finite(iv.value), "ci": [_finite(iv.low), _finite(iv.high)]}


def _json_line(
    results: dict[str, Interval],
    scored: ConformalScores | None = None,
    groups: dict[str, Any] | None = None,
    abstention: AbstentionScores | None = None,
) -> str:
    """One JSON object: metric -> ``{"value": v, "ci": [low, high]}`` (non-finite -> null);
    with ``--conformal``, key ``conformal`` holds the sets' settings, the rows that calibrated
    and were scored, and their metrics in the same form; with groups, key ``groups`` every
    group's numbers and the worst group's (:func:`selfcal.cli._groups.groups_json`)."""
    payload: dict[str, Any] = {k: _interval_json(iv) for k, iv in results.items()}
    if abstention is not None:
        payload["abstention"] = abstention.to_json()
    if groups is not None:
        payload["groups"] = groups
    if scored is not None:
        payload["conformal"] = {
            "alpha": scored.alpha,
            "score": scored.score,
            "calibration": scored.calibration,
            "n_calibration": scored.n_calibration,
            "n_scored": scored.n_scored,
            "threshold": scored.threshold,
            "metrics": {k: _interval_json(iv) for k, iv in scored.metrics.items()},
        }
        if scored.groups is not None:
            payload["conformal"]["groups"] = scored.groups
        if scored.by_group is not None:
            payload["conformal"]["group_conditional"] = {
                "method": scored.by_group.method,
                "metrics": {k: _interval_json(iv) for k, iv in scored.by_group.metrics.items()},
                "groups": scored.by_group.groups,
            }
    return json.dumps(payload) + "\n"


def evaluate(
    file: Annotated[
        str, typer.Argument(help="Predictions file with integer labels, or example:NAME.")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    bins: BinsOpt = 15,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write PNG diagrams to this folder.")
    ] = None,
    resamples: Annotated[
        int | None,
        typer.Option(
            "--resamples",
            min=1,
            help="Bootstrap resamples (default: 5e6 // (rows + 2e4), between 10 and 1000).",
        ),
    ] = None,
    confidence: Annotated[float, typer.Option("--confidence", help="CI level.")] = 0.95,
    seed: Annotated[int, typer.Option("--seed", help="Bootstrap seed.")] = 0,
    interval: Annotated[
        str,
        typer.Option(
            "--interval",
            help="Bootstrap interval: 'centred' (always contains the value), 'percentile' or "
            "'basic' (bias-reflected); see selfcal.metrics.bootstrap.",
        ),
    ] = "centred",
    kind: KindOpt = None,
    label_column: LabelOpt = "label",
    groups: GroupsOpt = None,
    groups_shown: Annotated[
        int,
        typer.Option(
            "--groups-shown",
            min=1,
            help="With groups: how many of the worst groups the terminal report lists (--json "
            "holds every group).",
        ),
    ] = GROUPS_SHOWN,
    conformal: Annotated[
        float | None,
        typer.Option(
            "--conformal",
            help="Also score split-conformal prediction sets at this level ALPHA: coverage, "
            "average set size, worst-class coverage and singleton rate, with intervals. "
            "Calibrated on --conformal-calibration's rows (every row of FILE scored), else on a "
            "random half of FILE's rows (seeded by --seed), the other half scored.",
        ),
    ] = None,
    conformal_score: Annotated[
        str,
        typer.Option("--conformal-score", help="Conformity score: lac, aps, raps or saps."),
    ] = CONFORMAL_SCORE,
    conformal_calibration: Annotated[
        str | None,
        typer.Option(
            "--conformal-calibration",
            help="Predictions file whose rows calibrate --conformal (same model, held-out "
            "rows not in FILE).",
        ),
    ] = None,
    conformal_groups: Annotated[
        str,
        typer.Option(
            "--conformal-groups",
            help="With --conformal and groups, also group-conditional sets, scored beside the "
            "marginal ones: 'mondrian' (one threshold per group, coverage >= 1 - ALPHA in each; "
            "one group a row), 'conditional' (conditional conformal over the group indicators: "
            "coverage >= 1 - ALPHA in each of overlapping groups) or 'none'. Default 'auto': "
            "mondrian for one group a row, conditional for overlapping groups.",
        ),
    ] = "auto",
    target_risk: Annotated[
        float | None,
        typer.Option(
            "--target-risk",
            help="Also certify an abstention threshold on a random half of FILE's rows "
            "(seeded by --seed) and score it on the other half: the share answered and the "
            "error rate of the answered rows (per group with groups).",
        ),
    ] = None,
    delta: Annotated[
        float, typer.Option("--delta", help="--target-risk's failure probability (ltt).")
    ] = 0.05,
    rule: Annotated[
        str,
        typer.Option(
            "--rule", help="--target-risk's rule: ltt (Learn-then-Test), crc or empirical."
        ),
    ] = "ltt",
) -> None:
    """Every calibration metric of FILE, with bootstrap confidence intervals.

    With --conformal, also conformal prediction sets; with --target-risk, abstention with a
    certified threshold (selfcal.abstention).

    FILE: .npz
    (arrays logits or probs, and labels), NAME.logits.npy + NAME.labels.npy, .csv or .parquet
    (columns logit_0.. or prob_0.., and label). Labels are integer class indices -- the score
    columns have no names, so class names cannot be matched to them (selfcal train and
    predict take class names).

    With groups (a .npz's 'groups' array, or --groups COLUMN for a table), also each group's
    size, accuracy, NLL and ECE beside what a perfectly calibrated model shows at that size,
    the worst group with an interval, and the multicalibration error; with --conformal, each
    group's coverage and mean set size of the marginal conformal sets and, beside them, of
    group-conditional sets (--conformal-groups)."""
    with errors():
        from selfcal._validation import check_choice, check_real

        check_kind(kind)
        check_real("--confidence", confidence, 0.0, 1.0, low_open=True, high_open=True)
        check_choice("--interval", interval, INTERVALS)
        if conformal is not None:
            check_real("--conformal", conformal, 0.0, 1.0, low_open=True, high_open=True)
            check_choice("--conformal-score", conformal_score, CONFORMAL_SCORES)
            check_choice("--conformal-groups", conformal_groups, CONFORMAL_GROUPS)
        elif conformal_calibration is not None:
            raise ValueError("--conformal-calibration needs --conformal ALPHA")
        elif conformal_groups != "auto":
            raise ValueError("--conformal-groups needs --conformal ALPHA")
        if target_risk is None and (delta != 0.05 or rule != "ltt"):
            raise ValueError("--delta and --rule need --target-risk")
        check_choice("--rule", rule, ABSTENTION_RULES)
        if plot is not None:
            check_plot_folder(plot)  # before the bootstrap, which may take long
        from selfcal.evaluation import METRICS, default_resamples
        from selfcal.evaluation import evaluate as run

        columns = tuple(groups or ())
        pred = read(file, kind, label_column, group_columns=columns)
        scored = None
        if conformal is not None:
            calibration = (
                None
                if conformal_calibration is None
                else read(conformal_calibration, kind, label_column, group_columns=columns)
            )
            scored = conformal_scores(
                pred,
                conformal,
                conformal_score,
                calibration,
                seed,
                resamples,
                file,
                conformal_groups,
            )
        abstention = None
        if target_risk is not None:
            abstention = abstention_scores(pred, target_risk, delta, rule, seed, file)
        n_res = resamples or default_resamples(pred.n_samples)
        show = pred.n_samples >= PROGRESS_MIN_ROWS or sys.stderr.isatty()
        bootstrap: dict[str, Any] = {"n_resamples": n_res, "confidence": confidence, "seed": seed}
        with _progress(show, len(METRICS)) as advance, source(file):
            results = run(pred, n_bins=bins, interval=interval, progress=advance, **bootstrap)
        by_group = None
        if pred.groups is not None:  # never left out where the file has groups
            from selfcal.evaluation import evaluate_groups

            with source(file):
                by_group = evaluate_groups(pred, n_bins=bins, interval=interval, **bootstrap)
        if plot is not None:
            from selfcal.plots import save_figures

            written = save_figures(pred, plot, n_bins=bins)
            stderr().print(f"wrote {len(written)} figure(s) to {plot}")
        if as_json:
            grouped = None if by_group is None else groups_json(by_group)
            sys.stdout.write(_json_line(results, scored, grouped, abstention))
        else:
            stdout().print(_evaluate_table(results, confidence, pred.n_samples, n_res, interval))
            if scored is not None:
                stdout().print(conformal_table(scored))
                per_group = conformal_groups_table(scored, groups_shown)
                if per_group is not None:
                    stdout().print(per_group)
            if abstention is not None:
                stdout().print(abstention_table(abstention))
            if by_group is not None:
                view = groups_view(by_group, groups_shown, confidence)
                print_drawn(lambda console: console.print(view))
