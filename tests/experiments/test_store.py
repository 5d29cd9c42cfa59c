"""ResultsStore: exact round trips, status rules, queries, schema, durability settings,
atomicity under SIGKILL inside a transaction, and several writer processes at once."""

from __future__ import annotations

import math
import multiprocessing
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from helpers.experiments import expected, make_specs

from selfcal.experiments import ResultsStore, RunResult, RunSpec

ENV = {"python": "3.x", "git_commit": None}


def result_for(spec: RunSpec) -> RunResult:
    metrics, artefacts = expected(spec)
    return RunResult(metrics, artefacts, seconds=1.5)


def raw_rows(path: Path, sql: str) -> list[tuple]:
    """Read the file with a plain sqlite3 connection (independent of the store's code)."""
    with closing(sqlite3.connect(path)) as db:
        return db.execute(sql).fetchall()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ResultsStore]:
    with ResultsStore(tmp_path / "r.sqlite") as opened:
        yield opened


def test_round_trip_of_spec_metrics_artefacts_env(store: ResultsStore) -> None:
    specs = make_specs(4)
    for spec in specs:
        assert store.record(spec, result_for(spec), ENV) is True
    records = store.runs()
    order = sorted(specs, key=lambda s: (s.study, s.dataset, s.method, s.seed, s.key))
    assert [r.key for r in records] == [s.key for s in order]
    for record in records:
        spec = next(s for s in specs if s.key == record.key)
        metrics, artefacts = expected(spec)
        assert record.spec == spec and record.spec.to_dict() == spec.to_dict()
        assert record.metrics == metrics  # exact: floats round-trip through JSON repr
        assert record.status == "done" and record.reason is None
        assert record.env == ENV and record.seconds == 1.5
        assert sorted(record.artefacts) == sorted(artefacts)
        for name, array in artefacts.items():
            loaded = store.artefact(record.key, name)
            assert loaded.dtype == array.dtype and loaded.shape == array.shape
            np.testing.assert_array_equal(loaded, array)


@pytest.mark.parametrize(
    "array",
    [
        np.array(3.5),
        np.zeros((0, 3)),
        np.array([True, False]),
        np.array([1 + 2j]),
        np.arange(24, dtype=np.int16).reshape(2, 3, 4),
        np.asfortranarray(np.eye(3)[:, :2]),
    ],
)
def test_artefact_dtypes_and_shapes_round_trip(store: ResultsStore, array: np.ndarray) -> None:
    spec = make_specs(1)[0]
    store.record(spec, RunResult({"x": 1.0}, {"a": array}), ENV)
    loaded = store.artefact(spec.key, "a")
    assert loaded.dtype == array.dtype and loaded.shape == array.shape
    np.testing.assert_array_equal(loaded, array)
    ((dtype, shape, blob),) = raw_rows(store.path, "SELECT dtype, shape, bytes FROM artefacts")
    assert (
        blob[:6] == b"\x93NUMPY" and dtype == str(array.dtype) and shape == str(list(array.shape))
    )


def test_missing_artefact_is_a_key_error(store: ResultsStore) -> None:
    with pytest.raises(KeyError, match="no artefact"):
        store.artefact("0" * 16, "weights")


def test_nan_metric_is_stored_as_failed_with_reason(store: ResultsStore) -> None:
    spec = make_specs(1, nan=True)[0]
    store.record(spec, result_for(spec), ENV)
    assert store.runs() == [] and store.completed_keys() == set()
    (failure,) = store.failures()
    assert failure.status == "failed" and "nll=nan" in failure.reason
    assert math.isnan(failure.metrics["nll"])
    assert failure.metrics["ece"] == expected(spec)[0]["ece"]
    (metrics_json,) = raw_rows(store.path, "SELECT metrics FROM runs")[0]
    assert "NaN" not in metrics_json and '"nll":null' in metrics_json  # strict JSON


def test_done_is_immutable_and_failed_is_replaced(store: ResultsStore) -> None:
    spec = make_specs(1)[0]
    failed = RunResult.failure("ValueError: boom")
    assert store.record(spec, RunResult({"e": 1.0}, {"old": np.ones(2)}, status="done"), ENV)
    assert store.record(spec, failed, ENV) is False
    assert store.record(spec, RunResult({"e": 2.0}), ENV) is False
    assert store.runs()[0].metrics == {"e": 1.0}
    other = make_specs(2)[1]
    store.record(other, RunResult({"e": 0.0}, {"stale": np.ones(3)}, "failed", "x"), ENV)
    assert store.record(other, RunResult({"e": 3.0}, {"new": np.zeros(1)}), ENV) is True
    assert raw_rows(store.path, "SELECT COUNT(*) FROM runs") == [(2,)]
    assert sorted(raw_rows(store.path, "SELECT run_key, name FROM artefacts")) == sorted(
        [(spec.key, "old"), (other.key, "new")]
    )


def test_queries_filter_by_study_dataset_method_status(store: ResultsStore) -> None:
    a, b = make_specs(4, study="a"), make_specs(2, study="b")
    for spec in a + b:
        store.record(spec, result_for(spec), ENV)
    store.record(a[0].replace(seed=99), RunResult.failure("E: x"), ENV)
    assert store.completed_keys() == {s.key for s in a + b}
    assert store.completed_keys("b") == {s.key for s in b}
    assert store.keys("a") == {s.key for s in a} | {a[0].replace(seed=99).key}
    assert {r.key for r in store.runs("a", dataset="d0")} == {a[0].key, a[2].key}
    assert {r.key for r in store.runs(method="m1")} == {s.key for s in a + b if s.method == "m1"}
    assert len(store.runs("a", status=None)) == 5 and len(store.failures("a")) == 1
    assert store.failures("b") == []
    with pytest.raises(ValueError, match="status"):
        store.runs(status="ok")  # type: ignore[arg-type]


def test_to_rows_flattens_hparams_model_and_metrics(store: ResultsStore) -> None:
    spec = RunSpec(
        "t",
        "blobs",
        "ce",
        2,
        {"lr": 0.1, "T": 5},
        {"name": "mlp", "hidden": [8, 8], "opt": {"kind": "adam"}},
    )
    store.record(spec, RunResult({"ece": 0.5, "acc": 0.9}), ENV)
    assert store.to_rows("t") == [
        {
            "study": "t",
            "dataset": "blobs",
            "method": "ce",
            "seed": 2,
            "lr": 0.1,
            "T": 5,
            "model.name": "mlp",
            "model.hidden": [8, 8],
            "model.opt.kind": "adam",
            "ece": 0.5,
            "acc": 0.9,
        }
    ]
    clash = RunSpec("u", "blobs", "ce", 0, {"ece": 1})
    store.record(clash, RunResult({"ece": 0.5}), ENV)
    with pytest.raises(ValueError, match="'ece' appears twice"):
        store.to_rows("u")


def test_delete_removes_a_study_and_its_artefacts_only(store: ResultsStore) -> None:
    a, b = make_specs(3, study="a"), make_specs(2, study="b")
    for spec in a + b:
        store.record(spec, result_for(spec), ENV)
    assert store.delete("a") == 3 and store.delete("a") == 0
    assert store.keys() == {s.key for s in b}
    keys = {k for (k,) in raw_rows(store.path, "SELECT DISTINCT run_key FROM artefacts")}
    assert keys == {s.key for s in b}


def test_default_path_is_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with ResultsStore() as default:
        assert default.path == tmp_path / "selfcal-results.sqlite"
    assert (tmp_path / "selfcal-results.sqlite").exists()


def test_schema_version_pragmas_and_bad_files(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    with ResultsStore(path) as store:
        store.completed_keys()
        db = store._db
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert db.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
    assert raw_rows(path, "SELECT name, value FROM meta") == [("schema_version", "2")]
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE meta SET value = '3'")
    with pytest.raises(ValueError, match="schema version 3"):
        ResultsStore(path)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all" * 100)
    with pytest.raises(ValueError, match="not a selfcal results store"):
        ResultsStore(junk)
    with pytest.raises(ValueError, match="directory"):
        ResultsStore(tmp_path)
    nested = ResultsStore(tmp_path / "new" / "dir" / "r.sqlite")  # parents are created
    assert nested.completed_keys() == set() and (tmp_path / "new" / "dir").is_dir()
    nested.close()
    with pytest.raises(ValueError, match="cannot open"):
        ResultsStore(junk / "below-a-file.sqlite")


def test_rolled_back_on_error_inside_the_transaction(
    store: ResultsStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The second artefact's digest cannot be bound: the error comes after the run row and
    # the first artefact were inserted, inside the transaction.
    import selfcal.experiments.store as store_module

    real = store_module.sha
    size_of_two = len(store_module._to_bytes(np.ones(2)))
    monkeypatch.setattr(
        store_module, "sha", lambda d: real(d) if len(d) == size_of_two else {"unbindable": 1}
    )
    spec = make_specs(1)[0]
    with pytest.raises(sqlite3.Error):
        store.record(spec, RunResult({"e": 1.0}, {"a": np.ones(2), "b": np.ones(3)}), ENV)
    assert raw_rows(store.path, "SELECT COUNT(*) FROM runs") == [(0,)]
    assert raw_rows(store.path, "SELECT COUNT(*) FROM artefacts") == [(0,)]
    monkeypatch.undo()
    assert store.record(spec, result_for(spec), ENV)  # the connection is usable afterwards


# ----------------------------------------------------------------------------- processes
needs_fork = pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method"
)


def _record_and_die_mid_transaction(path: Path) -> None:
    """Child: start recording a run, SIGKILL itself after the run row and one artefact are
    written inside the transaction, before COMMIT."""
    store = ResultsStore(path)
    spec = make_specs(2)[1]
    inserted: list[str] = []

    def trace(sql: str) -> None:
        inserted.append(sql)
        if sql.startswith("COMMIT") and any("INSERT INTO runs" in s for s in inserted):
            os.kill(os.getpid(), signal.SIGKILL)

    store._db.set_trace_callback(trace)
    store.record(spec, RunResult({"e": 1.0}, {"a": np.ones(10_000), "b": np.ones(5)}), ENV)
    os._exit(0)  # not reached


@needs_fork
def test_sigkill_inside_a_transaction_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    first = make_specs(1)[0]
    with ResultsStore(path) as store:
        store.record(first, result_for(first), ENV)
    child = multiprocessing.get_context("fork").Process(
        target=_record_and_die_mid_transaction, args=(path,)
    )
    child.start()
    child.join(30)
    assert child.exitcode == -signal.SIGKILL
    with ResultsStore(path) as store:
        assert store.keys(status=None) == {first.key}
        assert raw_rows(path, "SELECT run_key FROM artefacts") == [(first.key,)] * 3
        assert raw_rows(path, "PRAGMA integrity_check") == [("ok",)]


def _write_many(path: Path, study: str, n: int, ready: Path, others: list[Path]) -> None:
    """Child: open the store, wait until every writer is ready, then record ``n`` runs."""
    store = ResultsStore(path)
    ready.touch()
    deadline = time.monotonic() + 30
    while not all(p.exists() for p in others) and time.monotonic() < deadline:
        time.sleep(0.005)
    for spec in make_specs(n, study=study):
        store.record(spec, result_for(spec), ENV)
    store.close()
    os._exit(0)


@needs_fork
def test_concurrent_writer_processes(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    flags = [tmp_path / f"ready{i}" for i in range(3)]
    context = multiprocessing.get_context("fork")
    children = [
        context.Process(target=_write_many, args=(path, f"w{i}", 15, flags[i], flags))
        for i in range(3)
    ]
    for child in children:
        child.start()
    for child in children:
        child.join(60)
    assert [c.exitcode for c in children] == [0, 0, 0]
    with ResultsStore(path) as store:
        for i in range(3):
            assert store.completed_keys(f"w{i}") == {s.key for s in make_specs(15, f"w{i}")}
    assert raw_rows(path, "SELECT COUNT(*) FROM artefacts") == [(45 * 3,)]


# ----------------------------------------------------------------------------- integrity
def _flip_metric(path: Path, key: str) -> None:
    """Change one digit of a stored metric behind the store's back (SQLite's own integrity
    check still says "ok")."""
    with closing(sqlite3.connect(path)) as db, db:
        (metrics,) = db.execute("SELECT metrics FROM runs WHERE key = ?", (key,)).fetchone()
        changed = metrics.replace("0.", "0.9", 1)
        assert changed != metrics
        db.execute("UPDATE runs SET metrics = ? WHERE key = ?", (changed, key))
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_changed_metric_or_artefact_is_caught_naming_the_run(tmp_path: Path) -> None:
    from selfcal.exceptions import ChangedResults

    path = tmp_path / "r.sqlite"
    specs = make_specs(3)
    with ResultsStore(path) as store:
        for spec in specs:
            store.record(spec, RunResult({"ece": 0.0123}, {"p": np.arange(4.0)}))
        assert len(store.runs()) == 3
    _flip_metric(path, specs[1].key)
    with ResultsStore(path) as store, pytest.raises(ChangedResults) as caught:
        store.runs()
    message = str(caught.value)
    assert message.startswith(f"{path}: run {specs[1].key} (") and "--retry-failed" in message
    assert "\n" not in message
    with closing(sqlite3.connect(path)) as db, db:
        db.execute(
            "UPDATE artefacts SET bytes = ? WHERE run_key = ?",
            (sqlite3.Binary(b"\x00" * 8), specs[2].key),
        )
    with ResultsStore(path) as store:
        with pytest.raises(ChangedResults, match=f"artefact 'p' of run {specs[2].key}"):
            store.artefact(specs[2].key, "p")
        assert set(store.fail_changed()) == {specs[1].key, specs[2].key}
        assert {r.key for r in store.runs()} == {specs[0].key}  # the rest are failed now
        assert all("changed after it was stored" in r.reason for r in store.failures())
        for spec in specs[1:]:  # a retry replaces them
            assert store.record(spec, RunResult({"ece": 0.0123}, {"p": np.arange(4.0)}))
        assert len(store.runs()) == 3


def test_a_version_1_store_is_upgraded_with_its_runs_as_they_are(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    specs = make_specs(2)
    with ResultsStore(path) as store:
        for spec in specs:
            store.record(spec, RunResult({"ece": 0.5}, {"p": np.ones(3)}))
    with closing(sqlite3.connect(path)) as db, db:  # as selfcal 0.1 wrote it
        db.execute("ALTER TABLE runs DROP COLUMN checksum")
        db.execute("ALTER TABLE artefacts DROP COLUMN digest")
        db.execute("UPDATE meta SET value = '1'")
    with ResultsStore(path) as store:
        assert [r.metrics for r in store.runs()] == [{"ece": 0.5}, {"ece": 0.5}]
        assert np.array_equal(store.artefact(specs[0].key, "p"), np.ones(3))
    assert raw_rows(path, "SELECT value FROM meta") == [("2",)]
    _flip_metric(path, specs[0].key)
    with ResultsStore(path) as store:
        assert store.fail_changed() == [specs[0].key]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only files")
def test_a_valid_store_in_a_read_only_folder_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    with ResultsStore(folder / "r.sqlite") as store:
        store.record(make_specs(1)[0], RunResult({"e": 1.0}))
    os.chmod(folder, 0o500)
    os.chmod(folder / "r.sqlite", 0o400)
    try:
        with pytest.raises(ValueError, match="cannot be written here") as caught:
            ResultsStore(folder / "r.sqlite").runs()
        assert "not a selfcal results store" not in str(caught.value)
    finally:
        os.chmod(folder, 0o700)


def test_sqlite_failures_become_one_line_naming_the_store() -> None:
    from selfcal.experiments._integrity import store_error

    path = Path("/data/r.sqlite")
    cases = {
        "attempt to write a readonly database": "cannot be written here",
        "database or disk is full": "the disk is full",
        "database disk image is malformed": "is damaged",
        "Could not decode to UTF-8 column 'metrics'": "is damaged",
        "file is not a database": "is not a selfcal results store",
    }
    for message, said in cases.items():
        error = str(store_error(path, sqlite3.OperationalError(message)))
        assert str(path) in error and said in error and "\n" not in error, error


def test_a_damaged_store_is_one_line_naming_it(tmp_path: Path) -> None:
    """Pages overwritten on disk: SQLite's "malformed" (a DatabaseError, not an
    OperationalError) came out raw, without the store's name."""
    path = tmp_path / "r.sqlite"
    with ResultsStore(path) as store:
        for spec in make_specs(40):
            store.record(spec, result_for(spec), ENV)
        store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    data[4096 * 2 : 4096 * 6] = b"\xff" * (4096 * 4)  # pages past the header
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError) as caught:
        with ResultsStore(path) as store:
            store.runs()
    message = str(caught.value)
    assert str(path) in message and "\n" not in message
