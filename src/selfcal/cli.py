"""The ``selfcal`` command line: ``evaluate``, ``calibrate``, ``reproduce`` and ``example-path``.

Input files are read by :mod:`selfcal.io` (``.npz``, ``NAME.logits.npy``/``NAME.probs.npy`` +
``NAME.labels.npy``, ``.csv``, ``.parquet``); ``example:NAME`` names a bundled example, e.g.
``selfcal evaluate example:digits_test``.

Errors never print a traceback: bad input or usage exits with code 2 and one line
``error: ...`` on stderr; an unexpected failure exits with code 1, one line, and a hint to
rerun with ``SELFCAL_DEBUG=1`` (which lets the traceback through).
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

import selfcal
from selfcal._validation import check_choice, check_real
from selfcal.io import KINDS

app = typer.Typer(
    name="selfcal",
    help="Measure and fix the calibration of classifier predictions.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

PROGRESS_MIN_ROWS = 100_000
"""Show the evaluation progress bar from this many rows on (always when stderr is a TTY)."""

CALIBRATE_KEYS = ["ece", "mce", "adaece", "nll", "brier", "accuracy"]
USAGE_EXIT = 2
ERROR_EXIT = 1
_INPUT_ERRORS = (ValueError, OSError, KeyError, ImportError, TypeError)


# ----------------------------------------------------------------------------- errors
def _debug() -> bool:
    return os.environ.get("SELFCAL_DEBUG", "") not in ("", "0")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _fail(message: str, code: int = USAGE_EXIT) -> typer.Exit:
    """Print ``error: message`` (one line) to stderr and return the exit to raise."""
    sys.stderr.write(f"error: {_one_line(message)}\n")
    sys.stderr.flush()
    return typer.Exit(code)


def _message(exc: BaseException) -> str:
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    if isinstance(exc, OSError) and exc.strerror and exc.filename:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc) or type(exc).__name__


@contextmanager
def _errors() -> Iterator[None]:
    """Command boundary: turn exceptions into one-line errors (unless ``SELFCAL_DEBUG``)."""
    try:
        yield
    except (typer.Exit, typer.Abort):
        raise
    except KeyboardInterrupt:
        raise _fail("interrupted", 130) from None
    except _INPUT_ERRORS as exc:
        if _debug():
            raise
        raise _fail(_message(exc), USAGE_EXIT) from None
    except Exception as exc:
        if _debug():
            raise
        raise _fail(
            f"{type(exc).__name__}: {_message(exc)} (rerun with SELFCAL_DEBUG=1 for the traceback)",
            ERROR_EXIT,
        ) from None


# ----------------------------------------------------------------------------- helpers
def _stdout() -> Console:
    return Console(file=sys.stdout, highlight=False)


def _stderr() -> Console:
    return Console(file=sys.stderr, highlight=False)


def _finite(x: float) -> float | None:
    """JSON has no NaN/inf: non-finite numbers become ``null``."""
    return x if math.isfinite(x) else None


def _fmt(x: float) -> str:
    return f"{x:.4f}" if math.isfinite(x) else "n/a"


@contextmanager
def _progress(enabled: bool, total: int) -> Iterator[Any]:
    """A rich progress bar on stderr advancing once per metric, or a no-op callback."""
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=_stderr(),
        transient=True,
    )
    with bar:
        task = bar.add_task("metrics", total=total)
        yield lambda key: bar.update(task, advance=1, description=f"metrics ({key} done)")


def _evaluate_table(
    results: dict, confidence: float, n: int, n_resamples: int, interval: str
) -> Table:
    pct = round(100 * confidence)
    table = Table(title=f"{n} samples, {pct}% {interval} bootstrap CI ({n_resamples} resamples)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column(f"{pct}% CI", justify="right")
    for key, iv in results.items():
        table.add_row(key, _fmt(iv.value), f"[{_fmt(iv.low)}, {_fmt(iv.high)}]")
    return table


# ----------------------------------------------------------------------------- commands
def _version(value: bool) -> None:
    if value:
        typer.echo(f"selfcal {selfcal.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """Measure and fix the calibration of classifier predictions."""


KindOpt = Annotated[
    str | None,
    typer.Option("--kind", help="Scores are 'logits' or 'probs' (when file names don't say)."),
]
LabelOpt = Annotated[str, typer.Option("--label-column", help="Label column in CSV/parquet.")]
BinsOpt = Annotated[int, typer.Option("--bins", min=1, help="Bins for the binned metrics.")]


@app.command()
def evaluate(
    file: Annotated[str, typer.Argument(help="Predictions file, or example:NAME.")],
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
            help="Bootstrap resamples [default: 5e6 // (rows + 2e4), between 10 and 1000].",
        ),
    ] = None,
    confidence: Annotated[float, typer.Option("--confidence", help="CI level.")] = 0.95,
    seed: Annotated[int, typer.Option("--seed", help="Bootstrap seed.")] = 0,
    interval: Annotated[
        str,
        typer.Option(
            "--interval",
            help="Bootstrap interval: 'percentile' or 'basic' "
            "(bias-reflected; see selfcal.metrics.bootstrap).",
        ),
    ] = "percentile",
    kind: KindOpt = None,
    label_column: LabelOpt = "label",
) -> None:
    """Every calibration metric of FILE with bootstrap confidence intervals."""
    with _errors():
        if kind is not None:
            check_choice("--kind", kind, KINDS)
        check_real("--confidence", confidence, 0.0, 1.0, low_open=True, high_open=True)
        check_choice("--interval", interval, ("percentile", "basic"))
        from selfcal.evaluation import METRICS, default_resamples
        from selfcal.evaluation import evaluate as run
        from selfcal.io import load_predictions

        pred = load_predictions(file, kind=kind, label_column=label_column)
        n_res = resamples or default_resamples(pred.n_samples)
        show = pred.n_samples >= PROGRESS_MIN_ROWS or sys.stderr.isatty()
        with _progress(show, len(METRICS)) as advance:
            results = run(
                pred,
                n_bins=bins,
                n_resamples=n_res,
                confidence=confidence,
                seed=seed,
                interval=interval,
                progress=advance,
            )
        if plot is not None:
            from selfcal.plots import save_figures

            written = save_figures(pred, plot, n_bins=bins)
            _stderr().print(f"wrote {len(written)} figure(s) to {plot}")
        if as_json:
            payload = {
                k: {"value": _finite(iv.value), "ci": [_finite(iv.low), _finite(iv.high)]}
                for k, iv in results.items()
            }
            sys.stdout.write(json.dumps(payload) + "\n")
        else:
            _stdout().print(_evaluate_table(results, confidence, pred.n_samples, n_res, interval))


def _calibrator(method: str) -> Any:
    """A fresh calibrator from :data:`selfcal.posthoc.CALIBRATORS`."""
    from selfcal.posthoc import CALIBRATORS

    if method not in CALIBRATORS:
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(CALIBRATORS)}")
    return CALIBRATORS[method]()


def _as_numpy(x: Any) -> Any:
    import numpy as np
    import torch

    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _calibrate_table(before: dict, after: dict, n: int) -> Table:
    table = Table(title=f"calibration on {n} samples")
    table.add_column("metric")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    for key in before:
        table.add_row(key, _fmt(before[key]), _fmt(after[key]))
    return table


@app.command()
def calibrate(
    fit: Annotated[str, typer.Option("--fit", help="File to fit the calibrator on (labels).")],
    apply: Annotated[str, typer.Option("--apply", help="File to calibrate.")],
    out: Annotated[
        Path, typer.Option("--out", help="Output (.npz, .csv, .parquet, NAME.probs.npy).")
    ],
    method: Annotated[
        str,
        typer.Option(
            "--method",
            help="Calibrator: ts, ts-grid, vector, "
            "matrix, platt, isotonic, isotonic-ovr, histogram.",
        ),
    ] = "ts",
    save_calibrator: Annotated[
        Path | None, typer.Option("--save-calibrator", help="Save the fitted calibrator (JSON).")
    ] = None,
    bins: BinsOpt = 15,
    kind: KindOpt = None,
    label_column: LabelOpt = "label",
) -> None:
    """Fit a calibrator on --fit, apply it to --apply and write the probabilities to --out."""
    with _errors():
        if kind is not None:
            check_choice("--kind", kind, KINDS)
        from selfcal.evaluation import point_estimates
        from selfcal.io import load_predictions, save_probs
        from selfcal.predictions import Predictions

        calibrator = _calibrator(method)
        train = load_predictions(fit, kind=kind, label_column=label_column)
        test = load_predictions(apply, kind=kind, label_column=label_column, require_labels=False)
        calibrator.fit(**{train.kind: _as_numpy(train.scores)}, labels=_as_numpy(train.labels))
        probs = _as_numpy(calibrator.predict_proba(**{test.kind: _as_numpy(test.scores)}))
        labels = None if test.labels is None else _as_numpy(test.labels)
        after = Predictions.from_probs(probs, labels)
        save_probs(out, after.scores, labels)
        if save_calibrator is not None:
            calibrator.save(save_calibrator)
        console = _stdout()
        if test.labels is None:
            console.print(f"wrote {out} (no labels in {apply}: no before/after table)")
            return
        before_vals = point_estimates(test, CALIBRATE_KEYS, n_bins=bins)
        after_vals = point_estimates(after, CALIBRATE_KEYS, n_bins=bins)
        console.print(_calibrate_table(before_vals, after_vals, test.n_samples))
        console.print(f"wrote {out}" + (f" and {save_calibrator}" if save_calibrator else ""))


@app.command("example-path")
def example_path(
    name: Annotated[str, typer.Argument(help="Example name.")] = "digits_test",
) -> None:
    """Print the path of a bundled example (also usable directly as example:NAME)."""
    with _errors():
        from selfcal.examples import example_path as find

        typer.echo(str(find(name)))


# ----------------------------------------------------------------------------- reproduce
REPORT_ROOT = Path("selfcal-report")


class _StudyGroup(typer.core.TyperGroup):
    """``selfcal reproduce``: one subcommand per registered study, read from the registry
    when the command line is parsed (a study added later -- a new folder under
    ``selfcal/studies`` -- needs no edit here)."""

    def list_commands(self, ctx: Any) -> list[str]:
        from selfcal.experiments.study import study_names

        return list(study_names())

    def get_command(self, ctx: Any, name: str) -> Any:
        from selfcal.experiments.study import get_study, study_names

        return _study_command(get_study(name)) if name in study_names() else None


reproduce_app = typer.Typer(
    cls=_StudyGroup,
    help="Reproduce a study: a paper's tables and figures, with hyperparameters selected on "
    "validation and paired confidence intervals (runs are stored; reruns resume).",
    no_args_is_help=True,
)
app.add_typer(reproduce_app, name="reproduce")


def _study_command(study: Any) -> Any:
    """The click command ``selfcal reproduce NAME`` (the same options for every study)."""
    from selfcal.experiments.store import DEFAULT_PATH

    names = ", ".join(study.protocols)

    def command(
        quick: Annotated[
            bool,
            typer.Option(
                "--quick", help="The 'quick' protocol: a small version for tests and a first look."
            ),
        ] = False,
        protocol: str | None = typer.Option(
            None, "--protocol", help=f"A named protocol of the study: {names}."
        ),
        as_json: Annotated[
            bool,
            typer.Option(
                "--json",
                help="Print every run, the selected "
                "hyperparameters and the aggregates as one "
                "JSON object.",
            ),
        ] = False,
        store: Annotated[Path, typer.Option("--store", help="SQLite results store.")] = Path(
            DEFAULT_PATH
        ),
        out: Annotated[Path, typer.Option("--out", help="Report folder.")] = (
            REPORT_ROOT / study.name
        ),
        workers: Annotated[
            int,
            typer.Option("--workers", min=0, help="Parallel processes (0: CPU cores, at most 4)."),
        ] = 0,
        retry_failed: Annotated[
            bool,
            typer.Option(
                "--retry-failed",
                help="Run again the specs stored as failed (e.g. after a fix); "
                "by default a stored failure is kept and reported.",
            ),
        ] = False,
    ) -> None:
        with _errors():
            _reproduce(study, quick, protocol, as_json, store, out, workers, retry_failed)

    command.__doc__ = study.help
    single = typer.Typer()
    single.command(study.name)(command)
    return typer.main.get_command(single)


def _reproduce(
    study: Any,
    quick: bool,
    protocol_name: str | None,
    as_json: bool,
    store: Path,
    out: Path,
    workers: int,
    retry_failed: bool = False,
) -> None:
    """Run the study's sweep (resuming from ``store``), write its report to ``out``, and print
    the summary (or the JSON payload)."""
    import time

    from selfcal.experiments import ResultsStore
    from selfcal.experiments.report import json_payload, reproduce_command, write_report
    from selfcal.experiments.store import DEFAULT_PATH
    from selfcal.experiments.study import StudyResults, run_study

    if quick and protocol_name not in (None, "quick"):
        raise ValueError("--quick and --protocol name different protocols")
    protocol = study.protocol("quick" if quick else protocol_name)
    start = time.perf_counter()
    with ResultsStore(store) as results_store:
        summary = run_study(
            study,
            protocol,
            results_store,
            workers=workers or min(4, os.cpu_count() or 1),
            progress=sys.stderr.isatty() and not as_json,
            retry_failed=retry_failed,
        )
        seconds = time.perf_counter() - start
        command = reproduce_command(
            study,
            protocol.name,
            None if store == Path(DEFAULT_PATH) else str(store),
            None if out == REPORT_ROOT / study.name else str(out),
        )
        results = StudyResults.load(study, protocol, results_store)
        path = write_report(results, out, command=command, seconds=seconds)
        if as_json:
            sys.stdout.write(json.dumps(json_payload(results)) + "\n")
            return
        text = [
            f"{summary.done} runs done, {summary.skipped} already stored, {summary.failed} "
            f"failed ({seconds:.0f} s); store {store}",
            "",
            *study.summary(results),
            "",
            f"report: {path}",
        ]
        sys.stdout.write("\n".join(text) + "\n")


# ----------------------------------------------------------------------------- entry point
def main(argv: list[str] | None = None) -> int:
    """Console entry point; returns (and, as a script, exits with) the exit code."""
    command = typer.main.get_command(app)
    try:
        code = command.main(args=argv, prog_name="selfcal", standalone_mode=False)
    except typer.TyperException as exc:  # usage errors: bad option, missing argument, ...
        fmt = getattr(exc, "format_message", None)
        _fail(fmt() if fmt else str(exc), getattr(exc, "exit_code", USAGE_EXIT))
        code = getattr(exc, "exit_code", USAGE_EXIT)
    except typer.Abort:
        _fail("aborted", 1)
        code = 1
    code = code if isinstance(code, int) else 0
    if argv is None:
        sys.exit(code)
    return code


if __name__ == "__main__":
    main()
