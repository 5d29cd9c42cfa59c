"""``selfcal train``: train a self-calibrated classifier on one's own data
(:func:`selfcal.pipeline.train`), with the hyperparameters selected on validation, a post-hoc
calibrator and abstention thresholds fitted there, and a calibration report."""

from __future__ import annotations

import json
import math
import shlex
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from selfcal.cli._common import DEFERRED_HELP, LabelOpt, deferred_help, fmt, rich_bar, stdout
from selfcal.cli._errors import errors

if TYPE_CHECKING:  # pragma: no cover - typing only
    from rich.table import Table

    from selfcal.pipeline import Progress


def method_help() -> str:
    """``--method``'s help: every method with its one-line summary, one paragraph each
    (computed when ``--help`` shows it: the methods import torch)."""
    from selfcal.methods import METHODS

    lines = [f"{name}: {m.summary}" for name, m in METHODS.items()]
    head = (
        "Training method, hyperparameters selected on VAL (default: ce, which with "
        "--calibrator ts is what selfcal reproduce benchmark recommends):"
    )
    return "\n\n".join([head, *lines])


DEFAULT_METHOD = "ce"
"""The method trained without ``--method``: cross-entropy, which with temperature scaling (the
default ``--calibrator ts``) no method of the benchmark (``selfcal reproduce benchmark``)
reliably beats."""


DEFAULT_PATIENCE = 50
"""``--patience``'s default: :data:`selfcal.pipeline.fitting.DEFAULT_PATIENCE` (written again
here because the pipeline imports torch; a test keeps the two equal)."""


def default_method_note(calibrate: str) -> str:
    """The line ``selfcal train`` prints (stderr) when no ``--method`` is given."""
    then = {"ts": "temperature scaling", "none": "no post-hoc calibrator"}.get(
        calibrate, f"the {calibrate!r} calibrator"
    )
    head = f"no --method given: training {DEFAULT_METHOD!r} (cross-entropy), then {then}"
    if calibrate == "ts":
        return f"{head} -- what selfcal reproduce benchmark recommends"
    return f"{head}; selfcal reproduce benchmark recommends {DEFAULT_METHOD!r} with --calibrator ts"


def calibrate_help() -> str:
    """``--calibrator``'s help: every registered calibrator name (computed when ``--help``
    shows it)."""
    from selfcal.posthoc import build_calibrator, calibrator_names

    names = ", ".join(n for n in calibrator_names() if not build_calibrator(n).uses_groups)
    return (
        f"Post-hoc calibrator fitted on VAL, or 'none': {names} (or a class's name in kebab "
        "case, as selfcal calibrate takes; --calibrate is the 0.1 spelling of this option)."
    )


TrainCommand = deferred_help(method=method_help, calibrate=calibrate_help)
"""``selfcal train``'s command class: the help of ``--method`` and ``--calibrator`` is
:func:`method_help` and :func:`calibrate_help`."""


def parse_hidden(text: str) -> tuple[int, ...]:
    """``"64,64"`` -> ``(64, 64)``; ``""`` or ``"none"``: no hidden layer (logistic
    regression)."""
    if text.strip().lower() in ("", "none"):
        return ()
    try:
        widths = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"--hidden must be widths like 64,64, got {text!r}") from None
    if any(w < 1 for w in widths):
        raise ValueError(f"--hidden widths must be positive, got {text!r}")
    return widths


def parse_batch_size(text: str) -> int | Literal["auto"] | None:
    """``"auto"``, ``"full"`` (``None``) or a positive integer."""
    if text in ("auto", "full"):
        return None if text == "full" else "auto"
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"--batch-size must be 'auto', 'full' or a positive integer, got {text!r}")
    return value


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"--grid values must be numbers, got {text!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"--grid values must be finite, got {text!r}")
    return value


def parse_grid(items: list[str], method: str) -> dict[str, tuple[int | float, ...]]:
    """``["gamma=1,3", "norm=2"]`` -> ``{"gamma": (1.0, 3.0), "norm": (2,)}``: each value
    takes the type (int or float) of the method's own values for that hyperparameter."""
    from selfcal.methods import get_method

    axes = get_method(method).axes()
    out: dict[str, tuple[int | float, ...]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        name = name.strip()
        if not sep or not name or not values.strip():
            raise ValueError(f"--grid takes NAME=V1,V2,..., got {item!r}")
        parsed = tuple(_number(v.strip()) for v in values.split(","))
        like = axes.get(name, ())
        if like and all(isinstance(v, float) for v in like):
            parsed = tuple(float(v) for v in parsed)
        out[name] = parsed
    return out


def rich_progress(bar: Any) -> Progress:
    """A :class:`selfcal.pipeline.Progress` drawing on the rich progress ``bar``: one task
    over the candidates, one over the current candidate's epochs."""
    from selfcal.pipeline import Progress

    class RichProgress(Progress):
        def __init__(self) -> None:
            self.grid = bar.add_task("candidates", total=None)
            self.epochs = bar.add_task("epochs", total=None)

        def candidate(self, index: int, total: int, label: str, epochs: int) -> None:
            description = f"candidate {index + 1}/{total}"
            bar.update(self.grid, total=total, completed=index, description=description)
            bar.reset(self.epochs, total=epochs, description=f"  {label}: epochs")

        def epochs_done(self, epochs: int) -> None:
            bar.advance(self.epochs, epochs)

    return RichProgress()


def announcing(note: str, inner: Progress | None) -> Progress:
    """A :class:`selfcal.pipeline.Progress` that prints ``note`` (one line, stderr) when the
    first candidate starts -- after every input check, so a bad input still gets one line --
    and forwards everything to ``inner``."""
    from selfcal.pipeline import Progress

    class Announcing(Progress):
        said = False

        def candidate(self, index: int, total: int, label: str, epochs: int) -> None:
            if not self.said:
                typer.echo(note, err=True)
                self.said = True
            if inner is not None:
                inner.candidate(index, total, label, epochs)

        def epochs_done(self, epochs: int) -> None:
            if inner is not None:
                inner.epochs_done(epochs)

    return Announcing()


@contextmanager
def progress_bar(enabled: bool) -> Iterator[Progress | None]:
    """A rich progress bar on stderr when ``enabled`` (stderr is a terminal), else ``None``."""
    if not enabled:
        yield None
        return
    with rich_bar() as bar:
        yield rich_progress(bar)


def _summary_table(report: dict[str, Any]) -> Table:
    from rich.table import Table

    table = Table(title="calibration (95% bootstrap CI)")
    table.add_column("split")
    table.add_column("metric")
    from selfcal.pipeline.report import COLUMN_TITLES, REPORT_KEYS

    columns = list(report["metrics"]["validation"])
    for name in columns:
        table.add_column(COLUMN_TITLES.get(name, name), justify="right")
    for split, cols in report["metrics"].items():
        for key in REPORT_KEYS:
            cells = []
            for name in columns:
                value, (lo, hi) = cols[name][key]["value"], cols[name][key]["ci"]
                cells.append(f"{fmt(value)} [{fmt(lo)}, {fmt(hi)}]")
            table.add_row(split, key, *cells)
    return table


def train(
    data: Annotated[
        str,
        typer.Argument(help="Training file (.csv, .parquet, .npz); labels: integers or names."),
    ],
    val: Annotated[
        str, typer.Option("--val", help="Validation file: selection, calibration, threshold.")
    ],
    out: Annotated[Path, typer.Option("--out", help="Model folder to write.")],
    method: Annotated[str | None, typer.Option("--method", help=DEFERRED_HELP)] = None,
    test: Annotated[
        str | None, typer.Option("--test", help="Test file, scored in the report only.")
    ] = None,
    label_column: LabelOpt = "label",
    hidden: Annotated[
        str, typer.Option("--hidden", help="MLP hidden widths, e.g. 64,64 ('none': linear).")
    ] = "64,64,64",
    epochs: Annotated[int, typer.Option("--epochs", min=1, help="Training epochs.")] = 400,
    lr: Annotated[float, typer.Option("--lr", help="Adam learning rate.")] = 1e-2,
    batch_size: Annotated[
        str,
        typer.Option(
            "--batch-size",
            help="'auto' (full batch up to 4096 training rows, else 512), 'full' or a number.",
        ),
    ] = "auto",
    grid: Annotated[
        list[str] | None,
        typer.Option(
            "--grid", help="Replace a hyperparameter's candidates: NAME=V1,V2 (repeatable)."
        ),
    ] = None,
    calibrate: Annotated[
        str, typer.Option("--calibrator", "--calibrate", help=DEFERRED_HELP)
    ] = "ts",
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of every candidate.")] = 0,
    resamples: Annotated[
        int | None,
        typer.Option("--resamples", min=1, help="Bootstrap resamples of the report's intervals."),
    ] = None,
    device: Annotated[str, typer.Option("--device", help="Torch device for training.")] = "cpu",
    stop_by: Annotated[
        str,
        typer.Option(
            "--stop-by",
            help="The checkpoint kept: 'refinement' (the lowest validation NLL after "
            "temperature scaling; Berta et al., 2025; what the benchmark supports) or 'nll' (the "
            "lowest validation NLL).",
        ),
    ] = "refinement",
    patience: Annotated[
        int,
        typer.Option(
            "--patience",
            min=0,
            help="Stop a candidate once this many epochs have passed without a better "
            "checkpoint; 0 trains every --epochs.",
        ),
    ] = DEFAULT_PATIENCE,
    conformal_split: Annotated[
        float | None,
        typer.Option(
            "--conformal-split",
            help="Hold out this share of VAL (seeded, e.g. 0.3) before selection and "
            "calibration, used for nothing else, so that selfcal predict --conformal ALPHA can "
            "give prediction sets with the split-conformal guarantee (1 - ALPHA coverage) at any "
            "ALPHA >= 1/(rows held out + 1). The other VAL rows select, calibrate and set "
            "thresholds.",
        ),
    ] = None,
    target_risk: Annotated[
        float | None,
        typer.Option(
            "--target-risk",
            help="Keep an abstention guarantee in the folder: selfcal predict (given no target) "
            "abstains below the threshold certified on the --conformal-split rows.",
        ),
    ] = None,
    delta: Annotated[
        float, typer.Option("--delta", help="--target-risk's failure probability (ltt).")
    ] = 0.05,
    rule: Annotated[
        str, typer.Option("--rule", help="--target-risk's rule: ltt, crc or empirical.")
    ] = "ltt",
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace the model in a non-empty --out.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the report (report.json) as one JSON object.")
    ] = False,
) -> None:
    """Train a self-calibrated classifier on DATA (features and a label column).

    Trains every hyperparameter candidate of --method, selects one on --val and calibrates it
    there; writes the model, its calibrator, abstention thresholds and a calibration report to
    --out."""
    with errors():
        from selfcal.pipeline import TrainSettings
        from selfcal.pipeline import train as run

        note = default_method_note(calibrate) if method is None else None
        method = DEFAULT_METHOD if method is None else method
        settings = TrainSettings(
            method=method,
            hidden=parse_hidden(hidden),
            epochs=epochs,
            lr=lr,
            batch_size=parse_batch_size(batch_size),
            grid=parse_grid(grid or [], method),
            calibrate=None if calibrate == "none" else calibrate,
            seed=seed,
            n_resamples=resamples,
            device=device,
            stop_by=stop_by,
            patience=patience or None,
            conformal_split=conformal_split,
            target_risk=target_risk,
            delta=delta,
            rule=rule,
        )
        given = {
            "--test": test,
            "--label-column": label_column,
            "--hidden": hidden,
            "--epochs": epochs,
            "--lr": lr,
            "--batch-size": batch_size,
            "--calibrator": calibrate,
            "--seed": seed,
            "--resamples": resamples,
            "--device": device,
            "--stop-by": stop_by,
            "--patience": patience,
            "--conformal-split": conformal_split,
            "--target-risk": target_risk,
            "--delta": delta,
            "--rule": rule,
        }
        command = _command(data, val, method, out, given, grid or [])
        with progress_bar(sys.stderr.isatty() and not as_json) as progress:
            if note is not None:
                progress = announcing(note, progress)
            result = run(
                data,
                val,
                out,
                settings,
                test=test,
                label_column=label_column,
                overwrite=overwrite,
                progress=progress,
                command=command,
            )
        if as_json:
            sys.stdout.write(json.dumps(result.report) + "\n")
            return
        _print_summary(result.report, result.folder)


DEFAULTS: dict[str, object] = {
    "--test": None,
    "--label-column": "label",
    "--hidden": "64,64,64",
    "--epochs": 400,
    "--lr": 1e-2,
    "--batch-size": "auto",
    "--calibrator": "ts",
    "--seed": 0,
    "--resamples": None,
    "--device": "cpu",
    "--stop-by": "refinement",
    "--patience": DEFAULT_PATIENCE,
    "--conformal-split": None,
    "--target-risk": None,
    "--delta": 0.05,
    "--rule": "ltt",
}
"""The options' defaults: the report's command line names only the others."""


def _command(
    data: str, val: str, method: str, out: Path, given: Mapping[str, object], grid: list[str]
) -> str:
    """The command line that trains this model again (options at their default left out)."""
    words = ["selfcal", "train", data, "--val", val, "--method", method, "--out", str(out)]
    for option, value in given.items():
        if value != DEFAULTS[option]:
            words += [option, str(value)]
    for item in grid:
        words += ["--grid", item]
    return shlex.join(words)


def _print_summary(report: dict[str, Any], folder: Path) -> None:
    from selfcal.pipeline.fitting import describe
    from selfcal.pipeline.selective import Threshold

    console = stdout()
    model = report["model"]
    n = len(report["candidates"])
    if n == 1 and not model["hyperparameters"]:
        selected = "no hyperparameters to select"
    elif n == 1:
        selected = f"{describe(model['hyperparameters'])} (the only candidate)"
    else:
        selected = (
            f"selected {describe(model['hyperparameters'])} of {n} candidate(s) by "
            f"{model['criterion']}"
        )
    from selfcal.pipeline.report import stopping

    console.print(
        f"{model['method']}: {selected}; checkpoint epoch {model['checkpoint_epoch']}; "
        f"{stopping(model)}; calibrator {model['calibrator'] or 'none'}"
    )
    console.print(_summary_table(report))
    for t in report["selective"]:
        console.print("abstention, " + Threshold.from_json(t).describe())
    held = report.get("conformal")
    if held is not None:
        console.print(
            f"conformal: {held['rows']} validation rows ({held['split']:g} of VAL, seed "
            f"{held['seed']}) held out before selection and calibration; selfcal predict "
            f"--conformal ALPHA gives sets for ALPHA >= {1 / (held['rows'] + 1):.3g}"
        )
    kept = report.get("abstention")
    if kept is not None:
        console.print(f"abstention kept in the folder, {kept['rule']}: {kept['promise']}")
    console.print(f"wrote {folder} (report: {folder / 'report.md'})")
