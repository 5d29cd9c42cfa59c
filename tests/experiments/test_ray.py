"""run_sweep(executor="ray") on a local Ray instance (started once for the module): the same
numbers as worker processes (bo4sc's quick reproduction, run by run, and its stored arrays),
resumption after a sweep stopped part way (exactly the missing runs are executed, in Ray
workers, at most ``workers`` at a time), failures stored with the process executor's reasons,
a dead worker re-run once and then recorded as failed, a sweep that starts its own Ray
instance and shuts it down, and the ImportError naming the extra when Ray is absent."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from helpers import experiments as helpers
from helpers.experiments import expected, make_specs

from selfcal.cli import main
from selfcal.experiments import ResultsStore, RunSpec, ray_executor, run_sweep
from selfcal.experiments.runner import EXECUTORS, _running

WORKERS = 2


@pytest.fixture(scope="module")
def ray_module() -> Iterator[ModuleType]:
    """Ray, with a local instance of ``WORKERS`` CPUs for the module's tests (shut down at
    the end); skipped, saying why, only where Ray is not installed or cannot start."""
    ray = pytest.importorskip("ray", reason="Ray (the 'ray' extra) is not installed")
    try:
        ray.init(address="local", num_cpus=WORKERS, include_dashboard=False)
    except Exception as err:  # pragma: no cover - depends on the machine
        pytest.skip(f"a local Ray instance cannot start here: {type(err).__name__}: {err}")
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture
def ray(ray_module: ModuleType) -> ModuleType:
    """The module's Ray instance (started again if a test shut it down)."""
    if not ray_module.is_initialized():
        ray_module.init(address="local", num_cpus=WORKERS, include_dashboard=False)
    return ray_module


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ResultsStore]:
    with ResultsStore(tmp_path / "r.sqlite") as opened:
        yield opened


def traced_specs(folder: Path, n: int, **hparams: Any) -> list[RunSpec]:
    """``n`` specs for ``helpers.pid_then_sleep_execute``: each has its own folder, where every
    execution of the spec leaves the id of the process that ran it."""
    specs = []
    for spec in make_specs(n, **{"sleep": 0.0, **hparams}):
        trace = folder / f"seed{spec.seed}"
        trace.mkdir(parents=True)
        specs.append(spec.replace(hparams={**spec.hparams, "pid_dir": str(trace)}))
    return specs


def executions(spec: RunSpec) -> list[int]:
    """Process ids that ran ``spec`` (one file per process)."""
    return sorted(int(p.read_text()) for p in Path(spec.hparams["pid_dir"]).glob("*.pid"))


def assert_stored_as_expected(store: ResultsStore, specs: list[RunSpec]) -> None:
    records = {r.key: r for r in store.runs(status=None)}
    for spec in specs:
        record = records[spec.key]
        metrics, artefacts = expected(spec)
        assert record.status == "done" and record.metrics == metrics and record.spec == spec
        for name, array in artefacts.items():
            np.testing.assert_array_equal(store.artefact(spec.key, name), array)


def reproduce(folder: Path, *extra: str) -> dict[str, Any]:
    """``selfcal reproduce bo4sc --quick --json`` with its store and report in ``folder``."""
    args = ["reproduce", "bo4sc", "--quick", "--json", "--workers", str(WORKERS)]
    args += ["--store", str(folder / "s.sqlite"), "--out", str(folder / "report"), *extra]
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        assert main(args) == 0
    return json.loads(buffer.getvalue())


def run_id(run: dict[str, Any]) -> str:
    return json.dumps({k: run[k] for k in ("dataset", "method", "regime", "seed", "hp")})


# ----------------------------------------------------------------------------- same numbers
def test_reproduce_with_ray_gives_the_numbers_of_worker_processes(
    ray: ModuleType, tmp_path: Path
) -> None:
    processes = reproduce(tmp_path / "process", "--executor", "process")
    on_ray = reproduce(tmp_path / "ray", "--executor", "ray")
    assert ray.is_initialized()  # the sweep used the module's instance and left it running
    assert processes["runs"] and not processes["failures"] and not on_ray["failures"]
    by_process = {run_id(r): r for r in processes["runs"]}
    by_ray = {run_id(r): r for r in on_ray["runs"]}
    assert by_ray.keys() == by_process.keys() and len(by_ray) == len(on_ray["runs"])
    for key, run in by_ray.items():
        twin = by_process[key]
        assert run["seconds"] > 0.0  # wall-clock: the one field that may differ
        assert {k: v for k, v in run.items() if k != "seconds"} == {
            k: v for k, v in twin.items() if k != "seconds"
        }, key
    assert on_ray["aggregates"] == processes["aggregates"]
    with (
        ResultsStore(tmp_path / "process" / "s.sqlite") as one,
        ResultsStore(tmp_path / "ray" / "s.sqlite") as two,
    ):
        records = {r.key: r for r in two.runs()}
        assert records.keys() == {r.key for r in one.runs()}
        for record in one.runs():
            assert records[record.key].env == record.env
            assert record.artefacts == records[record.key].artefacts
            for name in record.artefacts:
                np.testing.assert_array_equal(
                    one.artefact(record.key, name), two.artefact(record.key, name)
                )


# ----------------------------------------------------------------------------- resumption
def test_a_sweep_stopped_part_way_resumes_with_exactly_the_missing_runs(
    ray: ModuleType, store: ResultsStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each run takes a second, so the group in flight beside the interrupted one is still
    # running when it is cancelled: Ray 2.60 can abort the driver (RAY_CHECK "Tried to complete
    # task that was not pending") when a task finishes at the moment it is force-cancelled.
    specs = traced_specs(tmp_path, 7, sleep=1.0)
    specs[3] = specs[3].replace(hparams={**specs[3].hparams, "interrupt": True})
    with pytest.raises(KeyboardInterrupt):  # the task behaves like Ctrl-C
        run_sweep(
            specs,
            helpers.interrupting_execute,
            store=store,
            workers=WORKERS,
            executor="ray",
            progress=False,
        )
    stored = store.keys(status=None)
    # group 3 is submitted only once two of groups 0-2 finished and were stored
    assert len(stored) >= 2 and specs[3].key not in stored and stored <= {s.key for s in specs}
    assert_stored_as_expected(store, [s for s in specs if s.key in stored])
    assert all(executions(s) == [] for s in specs)  # (it leaves none: the traces are the rerun's)

    in_flight: list[int] = []
    wait = ray.wait

    def counting_wait(refs: list[Any], **options: Any) -> Any:
        in_flight.append(len(refs))
        return wait(refs, **options)

    monkeypatch.setattr(ray, "wait", counting_wait)
    summary = run_sweep(
        specs,
        helpers.pid_then_sleep_execute,
        store=store,
        workers=WORKERS,
        executor="ray",
        progress=False,
    )
    missing = [s for s in specs if s.key not in stored]
    assert (summary.done, summary.skipped, summary.failed) == (len(missing), len(stored), 0)
    for spec in specs:
        ran = executions(spec)
        if spec.key in stored:
            assert ran == [], spec.seed  # stored runs are not executed again
        else:  # each missing run executed once, in a Ray worker, not in this process
            assert len(ran) == 1 and ran[0] != os.getpid(), spec.seed
    assert_stored_as_expected(store, specs)
    assert max(in_flight) == min(WORKERS, len(missing))  # never more than `workers` tasks

    again = run_sweep(specs, helpers.execute, store=store, executor="ray", progress=False)
    assert (again.done, again.skipped) == (0, len(specs))


def test_ctrl_c_cancels_the_running_tasks_and_keeps_what_was_stored(
    ray: ModuleType, store: ResultsStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    quick = traced_specs(tmp_path / "quick", 2)
    slow = [s.replace(seed=10 + s.seed) for s in traced_specs(tmp_path / "slow", 2, sleep=60.0)]
    wait, interrupted = ray.wait, []

    def ctrl_c_once_slow_tasks_run(refs: list[Any], **options: Any) -> Any:
        if not interrupted and all(executions(s) for s in slow):
            interrupted.append(True)
            raise KeyboardInterrupt  # what Ctrl-C raises in the driver
        return wait(refs, **options)

    monkeypatch.setattr(ray, "wait", ctrl_c_once_slow_tasks_run)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(
            quick + slow,
            helpers.pid_then_sleep_execute,
            store=store,
            workers=WORKERS,
            executor="ray",
            progress=False,
        )
    assert store.keys(status=None) == {s.key for s in quick}  # finished before Ctrl-C: kept
    assert_stored_as_expected(store, quick)
    workers = [pid for s in slow for pid in executions(s)]
    deadline = time.monotonic() + 20.0
    while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(workers) == 2 and not any(_running(pid) for pid in workers)  # cancelled: killed


# ----------------------------------------------------------------------------- failures
def test_failures_are_stored_with_the_process_reasons_and_a_dead_worker_is_retried_once(
    ray: ModuleType, tmp_path: Path
) -> None:
    specs = traced_specs(tmp_path / "traces", 5)
    boom = specs[1] = specs[1].replace(hparams={**specs[1].hparams, "fail": True})
    nan = specs[2] = specs[2].replace(hparams={**specs[2].hparams, "nan": True})
    crash = traced_specs(tmp_path / "crash", 1, crash=True)[0].replace(seed=99)
    good = [s for s in specs if s not in (boom, nan)]
    with (
        ResultsStore(tmp_path / "process.sqlite") as by_process,
        ResultsStore(tmp_path / "ray.sqlite") as by_ray,
    ):
        serial = run_sweep(specs, helpers.execute, store=by_process, progress=False)
        summary = run_sweep(
            [*specs, crash],
            helpers.pid_then_sleep_execute,
            store=by_ray,
            workers=WORKERS,
            executor="ray",
            progress=False,
        )
        assert (serial.done, serial.failed) == (3, 2)
        assert (summary.done, summary.skipped, summary.failed) == (3, 0, 3)  # the sweep went on
        assert_stored_as_expected(by_ray, good)
        reasons = {r.key: r.reason for r in by_ray.failures()}
        assert reasons.pop(crash.key).startswith("WorkerCrashedError: the Ray worker died")
        assert reasons == {r.key: r.reason for r in by_process.failures()}
        assert reasons[boom.key] == "ValueError: boom at seed 1"
        assert reasons[nan.key].startswith("diverged") and "nll=nan" in reasons[nan.key]
    ran = executions(crash)  # re-run once, in a fresh worker, then recorded as failed
    assert len(ran) == 2 and len(set(ran)) == 2 and os.getpid() not in ran


def test_a_missing_package_stops_the_sweep_as_with_processes(
    ray: ModuleType, store: ResultsStore
) -> None:
    specs = make_specs(3)
    missing = specs[1] = specs[1].replace(hparams={**specs[1].hparams, "missing": True})
    with pytest.raises(ImportError, match="needs a package"):
        run_sweep(specs, helpers.execute, store=store, workers=1, executor="ray", progress=False)
    stored = {r.key for r in store.runs(status=None)}
    assert missing.key not in stored and not list(store.failures())


# ----------------------------------------------------------------------------- arguments
def test_invalid_arguments(store: ResultsStore) -> None:
    specs = make_specs(1)
    with pytest.raises(ValueError, match="executor must be one of"):
        run_sweep(specs, helpers.execute, store=store, executor="dask")
    with pytest.raises(ValueError, match="address"):
        run_sweep(specs, helpers.execute, store=store, address="auto")
    assert EXECUTORS == ("process", "ray")


def test_ray_needs_a_top_level_executor(ray: ModuleType, store: ResultsStore) -> None:
    with pytest.raises(ValueError, match="top-level .* Ray tasks"):
        run_sweep(make_specs(1), lambda s: helpers.execute(s), store=store, executor="ray")
    assert store.keys(status=None) == set()


def test_the_cli_checks_executor_and_address(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["reproduce", "gra-toy", "--quick", "--store", str(tmp_path / "s.sqlite")]
    assert main([*base, "--executor", "dask"]) == 2
    assert "--executor must be one of process, ray" in capsys.readouterr().err
    assert main([*base, "--address", "auto"]) == 2
    err = capsys.readouterr().err
    assert "--address" in err and "--executor ray" in err


# ----------------------------------------------------------------------------- without Ray
def test_without_ray_the_error_names_the_extra(
    store: ResultsStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(ImportError, match=r'pip install "selfcal\[ray\]"') as caught:
        run_sweep(make_specs(2), helpers.execute, store=store, executor="ray", progress=False)
    assert caught.value.name == "ray"
    assert store.keys(status=None) == set()
    args = ["reproduce", "gra-toy", "--quick", "--executor", "ray"]
    assert main([*args, "--store", str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "r")]) == 2
    assert 'executor="ray" needs Ray' in capsys.readouterr().err


def test_importing_selfcal_does_not_import_ray() -> None:
    code = (
        "import sys, selfcal, selfcal.experiments, selfcal.experiments.study, "
        "selfcal.experiments.ray_executor, selfcal.cli; print('ray' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ----------------------------------------------------------------------------- own instance
def test_a_sweep_starts_its_own_ray_instance_and_shuts_it_down(
    ray: ModuleType, store: ResultsStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Last in the module: it shuts the module's instance down first."""
    ray.shutdown()
    calls: list[dict[str, Any]] = []
    init = ray.init

    def recording_init(**options: Any) -> Any:
        calls.append(options)
        return init(**options)

    monkeypatch.setattr(ray, "init", recording_init)
    specs = make_specs(3)
    summary = run_sweep(specs, helpers.execute, store=store, executor="ray", progress=False)
    assert (summary.done, summary.failed) == (3, 0)
    assert_stored_as_expected(store, specs)
    assert calls == [{"address": "local", "num_cpus": 1, "include_dashboard": False}]
    assert not ray.is_initialized()  # the sweep started it, so it shut it down
    assert ray_executor.driver_paths()  # pytest's `tests/` at least: what the workers lacked
