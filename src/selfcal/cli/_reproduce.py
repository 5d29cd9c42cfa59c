"""``selfcal reproduce NAME``: one subcommand per registered study (the same options for every
study); runs the study's sweep, resuming from the results store, and writes its report."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from selfcal.cli._errors import USAGE_EXIT, errors

if TYPE_CHECKING:  # pragma: no cover - typing only
    from selfcal.experiments.study import Study

REPORT_ROOT = Path("selfcal-report")
"""Reports go to ``REPORT_ROOT / <study name>`` unless ``--out`` says otherwise."""
DEFAULT_STORE = Path("selfcal-results.sqlite")
"""The results store unless ``--store`` says otherwise: the store's own default path
(:data:`selfcal.experiments.store.DEFAULT_PATH`, as a constant)."""
EXECUTORS = ("process", "ray")
"""``--executor``'s choices: :data:`selfcal.experiments.runner.EXECUTORS`, as a constant."""
MAX_DEFAULT_WORKERS = 4
SETS_PROTOCOL = "sets"
"""The protocol of the studies that run on prediction sets
(:data:`selfcal.studies._sets.PROTOCOL`, as a constant: the CLI imports no study to parse)."""
PREDICTIONS_ENV = "SELFCAL_PREDICTIONS"
""":data:`selfcal.io.PREDICTIONS_ENV`, as a constant."""
KIND_ENV = "SELFCAL_PREDICTIONS_KIND"
""":data:`selfcal.io.KIND_ENV`, as a constant."""


class _StudyGroup(typer.core.TyperGroup):
    """``selfcal reproduce``: one subcommand per registered study, read from the registry
    when the command line is parsed (a study added later -- a new folder under
    ``selfcal/studies`` -- needs no edit here). The CLI is the composition root: it imports
    the study packages (:func:`selfcal.studies.import_all`); the engine imports none."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(_study_names())

    def get_command(self, ctx: Any, name: str) -> Any:
        from selfcal.experiments.study import get_study

        return _study_command(get_study(name)) if name in _study_names() else None


def _study_names() -> tuple[str, ...]:
    """Every study's name, the study packages imported first (once per process)."""
    from selfcal.experiments.study import study_names
    from selfcal.studies import import_all

    import_all()
    return study_names()


reproduce_app = typer.Typer(
    cls=_StudyGroup,
    help="Reproduce a study: a paper's tables and figures, with hyperparameters selected on "
    "validation and paired confidence intervals (runs are stored; reruns resume).",
    no_args_is_help=True,
)


def _study_command(study: Study) -> Any:
    """The click command ``selfcal reproduce NAME`` (the same options for every study)."""
    names = ", ".join(study.protocols)
    reads_sets = SETS_PROTOCOL in study.protocols

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
        store: Annotated[Path, typer.Option("--store", help="SQLite results store.")] = (
            DEFAULT_STORE
        ),
        out: Annotated[Path, typer.Option("--out", help="Report folder.")] = (
            REPORT_ROOT / study.name
        ),
        workers: Annotated[
            int,
            typer.Option(
                "--workers",
                min=0,
                help="Groups run in parallel: worker processes, or Ray tasks in flight (and the "
                "CPUs of a local Ray instance) with --executor ray (0: CPU cores, at most 4).",
            ),
        ] = 0,
        executor: Annotated[
            str,
            typer.Option(
                "--executor",
                help="What runs the sweep: 'process' (worker processes) or 'ray' (Ray tasks; "
                'the "ray" extra: pip install "selfcal\\[ray]"); the results are identical.',
            ),
        ] = "process",
        address: Annotated[
            str | None,
            typer.Option(
                "--address",
                help="With --executor ray: the Ray cluster to use ('auto': the one started on "
                "this machine with 'ray start'; 'ray://host:port'). Default: a new local Ray "
                "instance, shut down afterwards.",
            ),
        ] = None,
        retry_failed: Annotated[
            bool,
            typer.Option(
                "--retry-failed",
                help="Run again the specs stored as failed (e.g. after a fix); "
                "by default a stored failure is kept and reported.",
            ),
        ] = False,
        sets: str | None = typer.Option(
            None,
            "--sets",
            help="Run on the prediction sets in this folder (each a folder with val.npz and "
            "test.npz, or one .npz with *_val / *_test arrays) instead of the study's own: the "
            f"'{SETS_PROTOCOL}' protocol (default folder: ${PREDICTIONS_ENV}).",
            hidden=not reads_sets,
        ),
        kind: str | None = typer.Option(
            None,
            "--kind",
            help="With --sets: the sets' scores are 'logits' or 'probs', where the array names "
            "don't say (or name both); --kind logits also accepts logits whose rows look like "
            f"probabilities (default: ${KIND_ENV}, else the names).",
            hidden=not reads_sets,
        ),
    ) -> None:
        with errors():
            if kind is not None and sets is None:
                raise ValueError("--kind says how to read prediction sets: use it with --sets")
            if sets is not None:
                protocol = _use_sets(study, Path(sets), protocol, kind)
            _reproduce(
                study,
                quick,
                protocol,
                as_json,
                store,
                out,
                workers,
                retry_failed,
                executor=executor,
                address=address,
                sets=sets,
                kind=kind,
            )

    command.__doc__ = study.help
    single = typer.Typer(add_completion=False)
    single.command(study.name, short_help=study.title)(command)
    return typer.main.get_command(single)


def _reproduce(
    study: Study,
    quick: bool,
    protocol_name: str | None,
    as_json: bool,
    store: Path,
    out: Path,
    workers: int,
    retry_failed: bool = False,
    *,
    executor: str = "process",
    address: str | None = None,
    sets: str | None = None,
    kind: str | None = None,
) -> None:
    """Run the study's sweep (resuming from ``store``) in worker processes or as Ray tasks
    (``executor``, ``address``), write its report to ``out``, and print the summary (or the
    JSON payload); ``sets`` and ``kind``: the folder of prediction sets and ``--kind``, as
    given (for the command line the report names)."""
    from selfcal._folders import check_replaceable, is_report_file
    from selfcal._validation import check_choice
    from selfcal.experiments import ResultsStore
    from selfcal.experiments._groups import summarized_warnings
    from selfcal.experiments.report import json_payload, reproduce_command, write_report
    from selfcal.experiments.study import StudyResults, run_study

    if quick and protocol_name not in (None, "quick"):
        raise ValueError("--quick and --protocol name different protocols")
    check_choice("--executor", executor, EXECUTORS)
    if address is not None and executor != "ray":
        raise ValueError("--address is the Ray cluster's: use it with --executor ray")
    protocol = study.protocol("quick" if quick else protocol_name)
    check_replaceable(out, is_report_file, "report")  # now, not after the sweep
    start = time.perf_counter()
    with ResultsStore(store) as results_store:
        summary = run_study(
            study,
            protocol,
            results_store,
            workers=workers or min(MAX_DEFAULT_WORKERS, os.cpu_count() or 1),
            progress=sys.stderr.isatty() and not as_json,
            retry_failed=retry_failed,
            executor=executor,
            address=address,
        )
        seconds = time.perf_counter() - start
        command = reproduce_command(
            study,
            protocol.name,
            None if store == DEFAULT_STORE else str(store),
            None if out == REPORT_ROOT / study.name else str(out),
            sets,
            kind,
        )
        results = StudyResults.load(study, protocol, results_store)
        failed = say_failed_sets(results) if protocol.name == SETS_PROTOCOL else 0
        with summarized_warnings("in the report"):
            path = write_report(results, out, command=command, seconds=seconds)
            lines = study.summary(results)
        if as_json:
            sys.stdout.write(json.dumps(json_payload(results)) + "\n")
        else:
            head = (
                f"{summary.done} runs done, {summary.skipped} already stored, {summary.failed} "
                f"failed ({seconds:.0f} s); store {store}"
            )
            print_summary(head, lines, f"report: {path}")
    if failed:
        raise typer.Exit(USAGE_EXIT)


def say_failed_sets(results: Any) -> int:
    """One ``error:`` line on stderr per prediction set without results (its stored reason,
    naming the set), as ``selfcal compare`` says a set it cannot read; how many. The report
    lists them too, and the command exits 2 once it is written."""
    from selfcal.exceptions import one_line

    for record in results.failures:
        sys.stderr.write(f"error: {one_line(str(record.reason), record.spec.dataset)}\n")
    sys.stderr.flush()
    return len(results.failures)


def _use_sets(study: Study, sets: Path, protocol: str | None, kind: str | None) -> str:
    """``--sets DIR``: the study's prediction-sets protocol, with ``$SELFCAL_PREDICTIONS`` set
    to ``DIR`` for the sweep and its worker processes (a Ray cluster's workers need the folder
    at the same path), and ``$SELFCAL_PREDICTIONS_KIND`` to ``--kind`` where given; a folder
    without a set is an error now, not in a worker."""
    from selfcal.cli._common import check_kind
    from selfcal.io import find_prediction_sets

    if SETS_PROTOCOL not in study.protocols:
        raise ValueError(f"study {study.name!r} does not run on prediction sets (no --sets)")
    if protocol not in (None, SETS_PROTOCOL):
        raise ValueError(f"--sets runs the {SETS_PROTOCOL!r} protocol, not {protocol!r}")
    check_kind(kind)
    find_prediction_sets(sets)
    os.environ[PREDICTIONS_ENV] = str(sets.resolve())
    if kind is not None:
        os.environ[KIND_ENV] = kind
    return SETS_PROTOCOL


PIPE_WIDTH = 100
"""Columns the summary is drawn to when stdout is not a terminal and ``$COLUMNS`` is unset."""


def print_summary(head: str, lines: list[str], tail: str) -> None:
    """``head``, the study's summary ``lines`` (Markdown) and ``tail`` on stdout, the summary
    drawn to fit (:mod:`selfcal.cli._terminal`: tables wrapped or split, bullets wrapped): the
    terminal's width, or ``$COLUMNS`` (else :data:`PIPE_WIDTH`) when stdout is a pipe or a
    file (:func:`~selfcal.cli._common.print_drawn`). The Markdown itself is in the report,
    named by ``tail``; ``head`` and ``tail`` are written as they are."""
    from selfcal.cli._common import print_drawn
    from selfcal.cli._terminal import print_markdown

    sys.stdout.write(head + "\n\n")
    sys.stdout.flush()
    print_drawn(lambda console: print_markdown(console, lines), PIPE_WIDTH)
    sys.stdout.write(tail + "\n")
