"""The kill tests: SIGKILL a sweep in another interpreter while it writes, rerun it, and check
that every run is stored exactly once, done, with its artefacts and nothing else -- and that
the rerun executed exactly the runs that were missing; and SIGKILL a parallel sweep whose
workers are deep in long groups, and check that no worker outlives it."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from helpers import experiments as sweep_helpers
from helpers.experiments import expected, make_specs

from selfcal.experiments import ResultsStore, run_sweep

TESTS = Path(__file__).resolve().parents[1]
"""``tests/``: the helpers' folder, on the sweeps' ``PYTHONPATH`` (as pytest puts it on ours)."""
HELPERS_ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
}
N_RUNS = 40
SPEC_ARGS = {"n": N_RUNS, "study": "kill", "sleep": 0.05, "size": 4000}
SWEEP = """
from helpers import experiments as h
from selfcal.experiments import ResultsStore, run_sweep
specs = h.make_specs(**{spec_args!r})
run_sweep(specs, h.execute, store=ResultsStore({db!r}), progress=False)
"""


def count(db: Path, sql: str) -> int:
    if not db.exists():
        return 0
    with closing(sqlite3.connect(db, timeout=10)) as connection:
        try:
            return int(connection.execute(sql).fetchone()[0])
        except sqlite3.OperationalError:  # tables not created yet
            return 0


def kill_after_some_runs(db: Path, at_least: int = 3, timeout_s: float = 60.0) -> int:
    """Start the sweep in a fresh interpreter, SIGKILL it once ``at_least`` runs are stored;
    return how many were stored then."""
    code = SWEEP.format(spec_args=SPEC_ARGS, db=str(db))
    process = subprocess.Popen(
        [sys.executable, "-c", code], stderr=subprocess.PIPE, env=HELPERS_ENV
    )
    deadline = time.monotonic() + timeout_s
    while count(db, "SELECT COUNT(*) FROM runs") < at_least:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            _, err = process.communicate()
            pytest.fail(f"sweep ended or stalled before {at_least} runs: {err.decode()}")
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL
    return count(db, "SELECT COUNT(*) FROM runs")


def test_sigkill_then_rerun_stores_every_run_exactly_once(tmp_path: Path) -> None:
    db = tmp_path / "kill.sqlite"
    stored_at_kill = kill_after_some_runs(db)
    assert 3 <= stored_at_kill < N_RUNS  # some runs before the kill, some left for after
    specs = make_specs(**SPEC_ARGS)
    with ResultsStore(db) as store:
        before = store.keys(status=None)
        assert len(before) == stored_at_kill and before <= {s.key for s in specs}
        sweep_helpers.CALLS.clear()
        summary = run_sweep(specs, sweep_helpers.execute, store=store, progress=False)
        executed = [key for group in sweep_helpers.CALLS for key in group]
        assert sorted(executed) == sorted(s.key for s in specs if s.key not in before)
        assert (summary.done, summary.skipped, summary.failed) == (
            N_RUNS - stored_at_kill,
            stored_at_kill,
            0,
        )
        records = {r.key: r for r in store.runs("kill", status=None)}
        for spec in specs:  # the data itself, not only the counts
            record = records[spec.key]
            assert record.status == "done" and record.metrics == expected(spec)[0]
            np.testing.assert_array_equal(
                store.artefact(spec.key, "weights"), expected(spec)[1]["weights"]
            )
    assert count(db, "SELECT COUNT(*) FROM runs") == N_RUNS
    assert count(db, "SELECT COUNT(DISTINCT key) FROM runs") == N_RUNS
    assert count(db, "SELECT COUNT(*) FROM runs WHERE status = 'done'") == N_RUNS
    assert count(db, "SELECT COUNT(*) FROM artefacts") == 3 * N_RUNS
    assert (
        count(db, "SELECT COUNT(*) FROM artefacts WHERE run_key NOT IN (SELECT key FROM runs)") == 0
    )
    assert (
        count(
            db,
            "SELECT COUNT(*) FROM (SELECT run_key FROM artefacts GROUP BY run_key "
            "HAVING COUNT(*) != 3)",
        )
        == 0
    )
    with closing(sqlite3.connect(db)) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


PARALLEL_SWEEP = """
from helpers import experiments as h
from selfcal.experiments import ResultsStore, run_sweep
specs = h.make_specs(2, study="orphans", sleep=600, pid_dir={pid_dir!r})
run_sweep(specs, h.pid_then_sleep_execute, store=ResultsStore({db!r}), workers=2,
          progress=False)
"""


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (dead, waiting to be reaped). A
    process that is reaped between opening its ``stat`` and reading it (``ESRCH``, seen once in
    CI) is gone too."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_sigkill_of_a_parallel_sweep_leaves_no_worker_alive(tmp_path: Path) -> None:
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    code = PARALLEL_SWEEP.format(
        pid_dir=str(pid_dir),
        db=str(tmp_path / "o.sqlite"),
    )
    log = tmp_path / "stderr.txt"
    with log.open("wb") as stderr:  # not a pipe: the workers inherit it
        process = subprocess.Popen([sys.executable, "-c", code], stderr=stderr, env=HELPERS_ENV)
    deadline = time.monotonic() + 60
    while len(list(pid_dir.glob("*.pid"))) < 2:  # both workers are inside their groups
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"the workers did not start: {log.read_text()}")
        time.sleep(0.05)
    workers = [int(p.stem) for p in pid_dir.glob("*.pid")]
    assert all(running(pid) for pid in workers) and os.getpid() not in workers
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    deadline = time.monotonic() + 10
    while any(running(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    survivors = [pid for pid in workers if running(pid)]
    for pid in survivors:  # do not leave them behind even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert not survivors, f"workers {survivors} outlived the killed sweep"
