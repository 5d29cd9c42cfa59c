"""``selfcal calibrate``: fit a calibrator of the registry (:mod:`selfcal.posthoc.registry`)
on one file, apply it to another, write the probabilities and compare the metrics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from selfcal.cli._common import (
    DEFERRED_HELP,
    BinsOpt,
    GroupsOpt,
    KindOpt,
    LabelOpt,
    check_kind,
    deferred_help,
    fmt,
    read,
    stdout,
)
from selfcal.cli._errors import errors, source

if TYPE_CHECKING:  # pragma: no cover - typing only
    from rich.table import Table

    from selfcal.posthoc import Calibrator

CALIBRATE_KEYS = ["ece", "mce", "adaece", "nll", "brier", "accuracy"]
"""The metrics of the before/after table."""


def calibrator_help() -> str:
    """``--calibrator``'s help: every registered calibrator name with its one-line summary,
    one paragraph (shown as one line) each (computed when ``--help`` shows it: the registry
    imports torch)."""
    from selfcal.posthoc import calibrator_names, calibrator_summary

    lines = [f"{name}: {calibrator_summary(name)}" for name in calibrator_names()]
    head = (
        "Calibrator: a short name below, or its class's name in kebab case "
        "(temperature-scaling); --method is the 0.1 spelling of this option."
    )
    return "\n\n".join([head, *lines])


CalibrateCommand = deferred_help(calibrator_name=calibrator_help)
"""``selfcal calibrate``'s command class: ``--calibrator``'s help is :func:`calibrator_help`."""


def _calibrator(name: str, params: list[str], criterion: str | None = None) -> Calibrator:
    """A fresh calibrator registered as ``name`` (see :func:`calibrator_help`), with the
    hyperparameters ``NAME=VALUE`` of ``params`` set (see :func:`parse_param`) and, for
    ``auto``, its ``criterion`` (``--criterion``; a ``--param criterion=`` too is refused)."""
    from selfcal.posthoc import build_calibrator

    given = dict(map(parse_param, params))
    if criterion is not None:
        if name != "auto":
            raise ValueError(f"--criterion is auto's choice rule; {name!r} has none")
        if "criterion" in given:
            raise ValueError("give the criterion once: --criterion or --param criterion=")
        given["criterion"] = criterion
    return build_calibrator(name).set_params(**given)


def parse_param(text: str) -> tuple[str, Any]:
    """``NAME=VALUE`` -> ``(NAME, VALUE)``, the value read as JSON where it is JSON
    (``10``, ``0.5``, ``true``, ``"nll"``) and as the plain string otherwise (``nll``)."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"--param takes NAME=VALUE, got {text!r}")
    try:
        return name.strip(), json.loads(value)
    except json.JSONDecodeError:
        return name.strip(), value


def check_calibrator_output(path: Path) -> None:
    """Refuse, before the fit, a ``--save-calibrator`` path that is not a ``.json`` file
    (:meth:`~selfcal.posthoc.Calibrator.save` writes JSON whatever the name)."""
    if path.is_dir():
        raise ValueError(f"--save-calibrator {path}: is a folder; name a .json file")
    if path.suffix.lower() != ".json":
        suffix = path.suffix or "(no extension)"
        raise ValueError(
            f"--save-calibrator {path}: the calibrator is saved as JSON; name the file "
            f"NAME.json, not {suffix!r}"
        )


def _as_numpy(x: Any) -> Any:
    import numpy as np
    import torch

    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


SHOWN_VALUES = 3
"""Arrays with at most this many values are printed in full by :func:`fitted_line`."""


def _value_text(value: Any) -> str:
    """A fitted value in a few characters: scalars to 4 significant digits; arrays as their
    values (up to :data:`SHOWN_VALUES`) or their shape and range; a calibrator held by its
    class, a mapping or a longer list by its length (a group-wise calibrator's groups)."""
    import numpy as np

    from selfcal.posthoc import Calibrator

    if isinstance(value, Calibrator):
        return type(value).__name__
    if isinstance(value, dict) or (isinstance(value, list) and len(value) > SHOWN_VALUES):
        return f"{len(value)} {'entries' if isinstance(value, dict) else 'values'}"
    arr = np.asarray(_as_numpy(value))
    if arr.dtype.kind not in "biuf":
        return repr(value)
    if arr.ndim == 0:
        return str(int(arr)) if arr.dtype.kind in "biu" else f"{float(arr):.4g}"
    if arr.size <= SHOWN_VALUES:
        return "[" + ", ".join(f"{float(v):.4g}" for v in arr.reshape(-1)) + "]"
    what = f"{arr.size} values" if arr.ndim == 1 else "x".join(map(str, arr.shape)) + " array"
    return f"{what} in [{float(arr.min()):.4g}, {float(arr.max()):.4g}]"


def fitted_line(name: str, calibrator: Calibrator, n: int) -> str:
    """``fitted ts on N rows: n_classes_=10, temperature_=1.834``: every fitted attribute
    (:meth:`~selfcal.posthoc.Calibrator.fitted_attributes`), arrays summarised; a mixing
    weight or probability floor of 0 (none applied) is left out. ``auto`` names its choice
    and gives that one's."""
    from selfcal.posthoc import AutoCalibration, GroupwiseCalibration

    if isinstance(calibrator, AutoCalibration):
        inner = fitted_line(calibrator.chosen_, calibrator.calibrator_, n).split(": ", 1)[1]
        return f"fitted {name} on {n} rows: chose {calibrator.chosen_}: {inner}"
    if isinstance(calibrator, GroupwiseCalibration):
        return groupwise_line(name, calibrator, n)
    parts = [
        f"{k}={_value_text(v)}"
        for k, v in calibrator.fitted_attributes().items()
        if not (k in ("mix_", "prob_floor_") and v == 0)
    ]
    return f"fitted {name} on {n} rows: " + "; ".join(parts)


def groupwise_line(name: str, calibrator: Any, n: int) -> str:
    """``fitted groupwise on N rows: 4 groups, 3 with their own map (weights w_g in [0.7,
    0.9]), 1 on the global map; prior_rows_=100 (cross-validated); global ts: ...``."""
    weights = [
        w
        for w, g in zip(calibrator.weights_, calibrator.group_names_, strict=True)
        if g in calibrator.group_calibrators_
    ]
    span = f" (weights w_g in [{min(weights):.3g}, {max(weights):.3g}])" if weights else ""
    how = "cross-validated" if calibrator.prior_rows == "auto" else "given"
    base = calibrator.global_
    inner = fitted_line(type(base).__name__, base, n).split(": ", 1)[1]
    return (
        f"fitted {name} on {n} rows: {len(calibrator.group_names_)} groups, "
        f"{len(calibrator.group_calibrators_)} with their own map{span}, "
        f"{len(calibrator.fallback_)} on the global map; prior_rows_="
        f"{calibrator.prior_rows_:g} ({how}); global {type(base).__name__}: {inner}"
    )


def cv_table(calibrator: Calibrator) -> Table:
    """``auto``'s cross-validation: each candidate's score, its paired differences from the
    lowest score and from temperature scaling's with their 95% intervals (the choice is the
    first candidate not significantly worse than the lowest), its fit time, and which was
    chosen (or why it failed or was left out)."""
    from rich.table import Table

    r = calibrator.cv_results_  # type: ignore[attr-defined]
    criterion = calibrator.criterion  # type: ignore[attr-defined]
    table = Table(title=f"{len(r['candidate'])} candidates, {criterion} of out-of-fold predictions")
    against_ts, grouped = "ts_low" in r, "worst_group" in r
    columns = ["candidate", criterion, "− lowest [95% CI]"]
    columns += ["− TS [95% CI]"] if against_ts else []
    columns += ["worst group", "− choice w/o groups [95% CI]"] if grouped else []
    for column in (*columns, "fit s", "note"):
        table.add_column(column, justify="left" if column in ("candidate", "note") else "right")
    for i, name in enumerate(r["candidate"]):
        failed = bool(r["error"][i])
        cells = [name, "—" if failed else f"{r['score'][i]:.4f}", _interval(r, "", i, failed)]
        cells += [_interval(r, "ts_", i, failed)] if against_ts else []
        if grouped:
            worst = "—" if failed else f"{r['worst_group'][i]:.4f}"
            cells += [worst, _interval(r, "groupless_", i, failed)]
        notes = [r["error"][i]] if failed else []
        if name == calibrator.chosen_:  # type: ignore[attr-defined]
            notes.append("chosen")
        if r["warnings"][i] and not failed:
            notes.append(f"{r['warnings'][i]} fold warnings")
        table.add_row(*cells, f"{r['fit_seconds'][i]:.2f}", "; ".join(notes))
    return table


def _interval(results: dict[str, Any], prefix: str, i: int, failed: bool) -> str:
    """``+0.0012 [-0.0003, +0.0027]``: a candidate's ``<prefix>difference`` and interval."""
    if failed:
        return "—"
    point, low, high = (results[f"{prefix}{k}"][i] for k in ("difference", "low", "high"))
    return f"{point:+.4f} [{low:+.4f}, {high:+.4f}]"


GROUPS_HOW = (
    "each row's group (a 'groups' array in a .npz, NAME.groups.npy, or --groups COLUMN for a table)"
)
"""Where a calibrator that uses groups reads them, in its one-line error."""


def say_groups_not_used(where: object, name: str) -> None:
    """One ``note:`` line on stderr: the predictions at ``where`` hold groups, which the
    calibrator ``name`` does not use -- said, never silently ignored."""
    import sys

    from selfcal.posthoc import build_calibrator, calibrator_names

    users = [
        n
        for n in calibrator_names()
        if build_calibrator(n).uses_groups or build_calibrator(n).accepts_groups
    ]
    sys.stderr.write(
        f"note: {where} holds groups; {name} does not use them (these calibrate with groups: "
        f"{', '.join(users)})\n"
    )


def _calibrate_table(before: dict[str, float], after: dict[str, float], n: int) -> Table:
    from rich.table import Table

    table = Table(title=f"calibration on {n} samples")
    table.add_column("metric")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    for key in before:
        table.add_row(key, fmt(before[key]), fmt(after[key]))
    return table


def calibrate(
    fit: Annotated[str, typer.Option("--fit", help="File to fit the calibrator on (with labels).")],
    apply: Annotated[str, typer.Option("--apply", help="File to calibrate.")],
    out: Annotated[
        Path, typer.Option("--out", help="Output (.npz, .csv, .parquet, NAME.probs.npy).")
    ],
    calibrator_name: Annotated[
        str, typer.Option("--calibrator", "--method", help=DEFERRED_HELP)
    ] = "ts",
    save_calibrator: Annotated[
        Path | None,
        typer.Option("--save-calibrator", help="Save the fitted calibrator (NAME.json)."),
    ] = None,
    bins: BinsOpt = 15,
    kind: KindOpt = None,
    label_column: LabelOpt = "label",
    param: Annotated[
        list[str] | None,
        typer.Option(
            "--param",
            help="A hyperparameter of the calibrator, NAME=VALUE (repeatable), e.g. "
            "--param off_diagonal_l2=10 for matrix or dirichlet.",
        ),
    ] = None,
    criterion: Annotated[
        str | None,
        typer.Option(
            "--criterion",
            help="With --calibrator auto: what its cross-validation chooses by, 'nll' (default), "
            "'brier' or 'ece' (as selfcal compare --criterion).",
        ),
    ] = None,
    groups: GroupsOpt = None,
) -> None:
    """Fit a calibrator on --fit, apply it to --apply, write the probabilities to --out.

    Prints the fitted parameters and, when --apply has labels, the metrics before and after.
    Files as for selfcal evaluate (integer labels). The calibrators that use groups
    (groupwise, multicalibration; auto chooses among them when given groups) read each
    file's groups; the others say in a note that they do not use them."""
    with errors():
        check_kind(kind)
        from selfcal.evaluation import point_estimates
        from selfcal.io import check_probs_output, save_probs
        from selfcal.posthoc import AutoCalibration
        from selfcal.predictions import Predictions

        check_probs_output(out)  # before the fit, which may take long
        if save_calibrator is not None:
            check_calibrator_output(save_calibrator)
        calibrator = _calibrator(calibrator_name, param or [], criterion)
        columns = tuple(groups or ())
        train = read(fit, kind, label_column, group_columns=columns)
        test = read(apply, kind, label_column, require_labels=False, group_columns=columns)
        grouped = calibrator.uses_groups or calibrator.accepts_groups
        for file, pred in ((fit, train), (apply, test)):
            if pred.groups is not None and not grouped:
                say_groups_not_used(file, calibrator_name)
        for file, pred in ((fit, train), (apply, test)):  # before the fit, which may take long
            if calibrator.uses_groups and pred.groups is None:
                raise ValueError(f"{file}: has no groups; {calibrator_name} needs {GROUPS_HOW}")
        with source(fit):
            calibrator.fit(
                **{train.kind: _as_numpy(train.scores)},
                labels=_as_numpy(train.labels),
                groups=train.groups if grouped else None,
            )
        typer.echo(fitted_line(calibrator_name, calibrator, train.n_samples))
        if isinstance(calibrator, AutoCalibration):
            stdout().print(cv_table(calibrator))
        if calibrator.needs_groups() and test.groups is None:
            raise ValueError(
                f"{apply}: has no groups; the fitted {calibrator_name} needs {GROUPS_HOW}"
            )
        with source(apply):
            probs = _as_numpy(
                calibrator.predict_proba(
                    **{test.kind: _as_numpy(test.scores)},
                    groups=test.groups if grouped else None,
                )
            )
        labels = None if test.labels is None else _as_numpy(test.labels)
        after = Predictions.from_probs(probs, labels)
        save_probs(out, after.scores, labels)
        if save_calibrator is not None:
            calibrator.save(save_calibrator)
        console = stdout()
        if test.labels is None:
            console.print(f"wrote {out} (no labels in {apply}: no before/after table)")
            return
        before_vals = point_estimates(test, CALIBRATE_KEYS, n_bins=bins)
        after_vals = point_estimates(after, CALIBRATE_KEYS, n_bins=bins)
        console.print(_calibrate_table(before_vals, after_vals, test.n_samples))
        console.print(f"wrote {out}" + (f" and {save_calibrator}" if save_calibrator else ""))
