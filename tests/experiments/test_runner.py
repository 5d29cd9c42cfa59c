"""run_sweep: stores what the executor computes, skips what is stored (counting executor
calls), runs duplicates once, turns exceptions / NaN / crashed workers into failed runs, groups
with batch_by, gives the same store with 2 workers as with 1, and stops cleanly on Ctrl-C."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers import experiments as helpers
from helpers.experiments import expected, make_specs

from selfcal.experiments import ResultsStore, RunSpec, SweepSummary, environment, run_sweep


@pytest.fixture(autouse=True)
def _reset_calls() -> None:
    helpers.CALLS.clear()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ResultsStore]:
    with ResultsStore(tmp_path / "r.sqlite") as opened:
        yield opened


def called_keys() -> list[str]:
    return [key for group in helpers.CALLS for key in group]


def assert_stored_as_expected(store: ResultsStore, specs: list[RunSpec]) -> None:
    """Every spec is stored done with exactly the executor's metrics and arrays."""
    records = {r.key: r for r in store.runs(status=None)}
    for spec in specs:
        record = records[spec.key]
        metrics, artefacts = expected(spec)
        assert record.status == "done" and record.metrics == metrics and record.spec == spec
        for name, array in artefacts.items():
            np.testing.assert_array_equal(store.artefact(spec.key, name), array)


def test_sweep_stores_results_and_environment(store: ResultsStore) -> None:
    specs = make_specs(6)
    summary = run_sweep(specs, helpers.execute, store=store, progress=False)
    assert (summary.done, summary.skipped, summary.failed) == (6, 0, 0)
    assert summary.seconds > 0 and "6 done" in str(summary)
    assert_stored_as_expected(store, specs)
    assert called_keys() == [s.key for s in specs]  # one spec per call, in order
    env = environment()
    for record in store.runs():
        assert record.env == env and record.seconds >= 0.0


def test_rerun_skips_completed_runs_without_calling_the_executor(store: ResultsStore) -> None:
    specs = make_specs(6)
    run_sweep(specs[:4], helpers.execute, store=store, progress=False)
    helpers.CALLS.clear()
    summary = run_sweep(specs, helpers.execute, store=store, progress=False)
    assert (summary.done, summary.skipped, summary.failed) == (2, 4, 0)
    assert called_keys() == [s.key for s in specs[4:]]
    helpers.CALLS.clear()
    summary = run_sweep(specs, helpers.execute, store=store, progress=False)
    assert (summary.done, summary.skipped) == (0, 6) and helpers.CALLS == []
    assert_stored_as_expected(store, specs)


def test_duplicates_run_once(store: ResultsStore) -> None:
    specs = make_specs(3)
    copies = [RunSpec.from_json(s.to_json()) for s in specs]
    summary = run_sweep(specs + copies + specs, helpers.execute, store=store, progress=False)
    assert (summary.done, summary.skipped) == (3, 0)
    assert sorted(called_keys()) == sorted(s.key for s in specs)


def test_exception_and_nan_fail_their_runs_and_the_sweep_goes_on(store: ResultsStore) -> None:
    good = make_specs(4)
    boom = RunSpec("s", "d0", "m0", 50, {"fail": True})
    nan = make_specs(1, nan=True)[0].replace(seed=60)
    summary = run_sweep(
        [good[0], boom, good[1], nan, *good[2:]], helpers.execute, store=store, progress=False
    )
    assert (summary.done, summary.skipped, summary.failed) == (4, 0, 2)
    assert_stored_as_expected(store, good)
    reasons = {r.key: r.reason for r in store.failures("s")}
    assert reasons[boom.key] == "ValueError: boom at seed 50"
    assert reasons[nan.key].startswith("diverged") and "nll=nan" in reasons[nan.key]
    helpers.CALLS.clear()
    again = run_sweep([*good, boom, nan], helpers.execute, store=store, progress=False)
    assert (again.done, again.skipped, again.failed) == (0, 6, 0) and helpers.CALLS == []
    retried = run_sweep(
        [*good, boom, nan], helpers.execute, store=store, progress=False, retry_failed=True
    )
    assert (retried.done, retried.skipped, retried.failed) == (0, 4, 2)
    assert sorted(called_keys()) == sorted([boom.key, nan.key])


def test_batch_by_groups_specs_and_a_failing_group_fails_whole(store: ResultsStore) -> None:
    specs = make_specs(8)
    specs[5] = specs[5].replace(hparams={"lr": 0.1, "fail": True})  # dataset d1, method m0
    summary = run_sweep(
        specs,
        helpers.execute,
        store=store,
        progress=False,
        batch_by=lambda s: (s.dataset, s.method),
    )
    groups = [sorted(g) for g in helpers.CALLS]
    by_config: dict[tuple[str, str], list[str]] = {}
    for spec in specs:
        by_config.setdefault((spec.dataset, spec.method), []).append(spec.key)
    assert groups == [sorted(keys) for keys in by_config.values()]
    failed_group = by_config[("d1", "m0")]
    assert summary.failed == len(failed_group) == 2 and summary.done == 6
    assert {r.key for r in store.failures()} == set(failed_group)
    assert all(r.reason == "ValueError: boom at seed 5" for r in store.failures())
    assert_stored_as_expected(store, [s for s in specs if s.key not in failed_group])


def test_executor_returning_the_wrong_number_fails_the_group(store: ResultsStore) -> None:
    summary = run_sweep(
        make_specs(2),
        helpers.wrong_count_execute,
        store=store,
        progress=False,
        batch_by=lambda s: 0,
    )
    assert summary.failed == 2
    assert {r.reason for r in store.failures()} == {
        "ValueError: execute returned 1 results for 2 specs"
    }


def test_keyboard_interrupt_stops_and_keeps_what_finished(store: ResultsStore) -> None:
    specs = make_specs(5)
    specs[2] = specs[2].replace(hparams={"lr": 0.1, "interrupt": True})
    with pytest.raises(KeyboardInterrupt):
        run_sweep(specs, helpers.interrupting_execute, store=store, progress=False)
    assert store.keys(status=None) == {specs[0].key, specs[1].key}
    helpers.CALLS.clear()
    summary = run_sweep(specs[:2] + specs[3:], helpers.execute, store=store, progress=False)
    assert (summary.done, summary.skipped) == (2, 2)


def test_keyboard_interrupt_in_a_worker_stops_the_parallel_sweep(store: ResultsStore) -> None:
    specs = make_specs(6)
    specs[2] = specs[2].replace(hparams={"lr": 0.1, "interrupt": True})
    with pytest.raises(KeyboardInterrupt):
        run_sweep(specs, helpers.interrupting_execute, store=store, workers=2, progress=False)
    stored = store.keys(status=None)
    # group 2 is submitted only after group 0 or 1 finished and was stored
    assert stored & {specs[0].key, specs[1].key} and specs[2].key not in stored
    assert stored <= {s.key for s in specs}
    assert_stored_as_expected(store, [s for s in specs if s.key in stored])


def test_two_workers_store_the_same_as_one_and_survive_a_crash(tmp_path: Path) -> None:
    specs = make_specs(6, sleep=0.01)
    specs[1] = specs[1].replace(hparams={"lr": 0.1, "fail": True})
    specs[3] = specs[3].replace(hparams={"lr": 0.1, "nan": True})
    crash = RunSpec("s", "d0", "m0", 99, {"crash": True})
    with ResultsStore(tmp_path / "one.sqlite") as one, ResultsStore(tmp_path / "two.sqlite") as two:
        serial = run_sweep(specs, helpers.execute, store=one, progress=False)
        parallel = run_sweep([*specs, crash], helpers.execute, store=two, workers=2, progress=False)
        assert (serial.done, serial.failed) == (4, 2)
        assert (parallel.done, parallel.failed) == (4, 3)
        (crashed,) = [r for r in two.failures() if r.key == crash.key]
        assert crashed.reason.startswith("BrokenProcessPool")
        runs_one, runs_two = (
            one.runs(status=None),
            [r for r in two.runs(status=None) if r.key != crash.key],
        )
        assert [r.key for r in runs_one] == [r.key for r in runs_two]
        for a, b in zip(runs_one, runs_two, strict=True):
            assert (a.status, a.reason, a.spec, a.env) == (b.status, b.reason, b.spec, b.env)
            np.testing.assert_array_equal(list(a.metrics.values()), list(b.metrics.values()))
            assert a.artefacts == b.artefacts
            for name in a.artefacts:
                np.testing.assert_array_equal(one.artefact(a.key, name), two.artefact(b.key, name))


def test_progress_bar_and_default_store_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    summary = run_sweep(make_specs(3, study="bar"), helpers.execute, progress=True)
    assert summary == SweepSummary(3, 0, 0, summary.seconds)
    captured = capsys.readouterr()
    assert "sweep bar" in captured.err and "3/3" in captured.err and captured.out == ""
    with ResultsStore() as store:
        assert len(store.completed_keys("bar")) == 3


def test_invalid_arguments(store: ResultsStore) -> None:
    specs = make_specs(1)
    with pytest.raises(ValueError, match="workers"):
        run_sweep(specs, helpers.execute, store=store, workers=0)
    with pytest.raises(ValueError, match="top-level"):
        run_sweep(specs, lambda s: helpers.execute(s), store=store, workers=2)
    with pytest.raises(ValueError, match="RunSpec"):
        run_sweep([{"study": "s"}], helpers.execute, store=store)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="callable"):
        run_sweep(specs, "execute", store=store)  # type: ignore[arg-type]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_missing_package_stops_the_sweep_and_is_not_stored(
    store: ResultsStore, workers: int
) -> None:
    """An ``ImportError`` is the environment, not the run: stored as a failure it would be
    kept (not rerun) after the package is installed; instead the sweep stops with it, the
    groups finished before are stored, and the next sweep runs the rest."""
    specs = make_specs(4)
    missing = specs[2].replace(hparams={**specs[2].hparams, "missing": True})
    with pytest.raises(ImportError, match="needs a package"):
        run_sweep(
            [specs[0], specs[1], missing, specs[3]],
            helpers.execute,
            store=store,
            workers=workers,
            progress=False,
        )
    stored = {r.key for r in store.runs(status=None)}
    assert missing.key not in stored and not list(store.failures())
    if workers == 1:  # in order: the two groups before it finished and are stored
        assert stored == {specs[0].key, specs[1].key}
    else:  # a group still in flight beside it is discarded, as on Ctrl-C
        assert stored and stored <= {specs[0].key, specs[1].key, specs[3].key}
    helpers.CALLS.clear()
    summary = run_sweep(specs, helpers.execute, store=store, workers=workers, progress=False)
    assert summary.failed == 0 and summary.done + summary.skipped == 4
    assert_stored_as_expected(store, specs)


@pytest.mark.parametrize("workers", [1, 2])
def test_warnings_are_counted_and_summarised_not_printed_per_run(
    store: ResultsStore, workers: int, capfd: pytest.CaptureFixture[str]
) -> None:
    """The groups' warnings ride back on their results (from worker processes too) and the
    sweep warns once per kind -- the same text but for its numbers -- with the count."""
    specs = make_specs(6)
    with pytest.warns(RuntimeWarning) as record:
        summary = run_sweep(
            specs, helpers.warning_execute, store=store, progress=False, workers=workers
        )
    assert sum(count for _, count in summary.warnings) == 6 and len(summary.warnings) == 6
    (summary_line,) = [str(w.message) for w in record if w.category is RuntimeWarning]
    example = r"UserWarning: run \d: every validation prediction is correct"
    assert re.fullmatch(r"6 times in 6 runs: " + example, summary_line)  # its first clause
    assert "run 3" not in capfd.readouterr().err  # nothing printed by the workers
    assert_stored_as_expected(store, specs)


def test_the_main_processs_warnings_are_summarized_one_line_per_kind() -> None:
    """Warnings raised while the report is written (the main process's share of a sweep)
    come out as one line per kind, the count first, the first clause of the first example,
    within the summary's width."""
    import warnings

    from selfcal.experiments._groups import SUMMARY_WIDTH, summarized_warnings

    long = "; fit on more validation rows, stratified, so that " + "x" * 200
    with pytest.warns(RuntimeWarning) as record:
        with summarized_warnings("while writing the report"):
            for n in (27, 30, 27):
                warnings.warn(
                    f"fit {n}: all {n} predictions are correct, so T = 1{long}", stacklevel=1
                )
    (line,) = [str(w.message) for w in record]
    assert (
        line
        == "3 times while writing the report: UserWarning: fit 27: all 27 predictions are correct"
    )
    assert len(line) <= SUMMARY_WIDTH


def test_retry_failed_runs_a_changed_run_again(store: ResultsStore) -> None:
    """A run whose stored metrics were changed by hand is refused when read, naming it; the
    sweep with ``retry_failed`` runs it again and the store reads clean."""
    import sqlite3
    from contextlib import closing

    from selfcal.exceptions import ChangedResults

    specs = make_specs(3)
    run_sweep(specs, helpers.execute, store=store, progress=False)
    with closing(sqlite3.connect(store.path)) as db, db:
        db.execute("UPDATE runs SET metrics = '{\"x\":1}' WHERE key = ?", (specs[0].key,))
    with pytest.raises(ChangedResults, match=f"run {specs[0].key} "):
        store.runs()
    summary = run_sweep(specs, helpers.execute, store=store, progress=False, retry_failed=True)
    assert summary.done == 1 and summary.skipped == 2
    assert_stored_as_expected(store, specs)


def _sweep_in_child(path, specs, ready, flags) -> None:
    """Child: wait until every sweep is ready, then run the shared specs on the store."""
    import os
    import time

    ready.touch()
    deadline = time.monotonic() + 30
    while not all(p.exists() for p in flags) and time.monotonic() < deadline:
        time.sleep(0.005)
    run_sweep(specs, helpers.counting_execute, store=path, progress=False)
    os._exit(0)


def test_sweeps_sharing_a_store_execute_each_run_once(tmp_path) -> None:
    """Three sweeps of the same 30 runs started together on one store: every run is stored
    once and executed once (the audit: 300 runs stored, 900 executions), and a sweep ended
    early leaves no claim that blocks a later one."""
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("needs the fork start method")
    log = tmp_path / "executed.log"
    specs = make_specs(30, log=str(log), sleep=0.02)
    path = tmp_path / "shared.sqlite"
    flags = [tmp_path / f"ready{i}" for i in range(3)]
    context = multiprocessing.get_context("fork")
    children = [
        context.Process(target=_sweep_in_child, args=(path, specs, flags[i], flags))
        for i in range(3)
    ]
    for child in children:
        child.start()
    for child in children:
        child.join(120)
    assert [c.exitcode for c in children] == [0, 0, 0]
    executed = [line.split()[1] for line in log.read_text().splitlines()]
    assert sorted(executed) == sorted(s.key for s in specs)  # each once
    with ResultsStore(path) as store:
        assert store.completed_keys("s") == {s.key for s in specs}
        (left,) = store._db.execute("SELECT COUNT(*) FROM claims").fetchone()
    assert left == 0
