"""Results store: every run (spec, status, metrics, environment) and its arrays in one
embedded SQLite file; tables and plots are queries over it.

Durability choices:

* **One transaction per completed run.** The run row and all its artefacts are written
  between ``BEGIN IMMEDIATE`` and ``COMMIT``; a process killed at any instant (even SIGKILL)
  leaves either the whole run or nothing, because SQLite rolls an uncommitted transaction
  back when the file is next opened.
* **WAL journal mode** lets readers (a table being printed, a test polling progress) work
  while a sweep writes, and makes a commit one sequential append.
* **synchronous=FULL**: every commit is fsynced, so a finished run also survives a power
  loss or OS crash (NORMAL in WAL mode survives process crashes but may lose the last
  commits on power loss). A run costs seconds to hours; one fsync per run (~ms) is noise.
* **Several writer processes** (e.g. two sweeps sharing one file) are safe: SQLite serialises
  writers; a busy timeout makes a writer wait for the lock, and a bounded retry with
  jittered backoff covers the rare lock errors the timeout does not (WAL snapshot conflicts,
  schema creation races).
* **Artefacts** are stored as ``np.save`` bytes and loaded with ``allow_pickle=False``:
  nothing in the file can execute code when read.
* **A completed run is immutable**: recording a run whose key is already stored as done is
  a no-op (so two sweeps racing on the same spec keep the first result); a failed run is
  replaced by a new attempt. Delete a study to recompute it.
* **A changed run is detected.** Each run row carries a SHA-256 of its content and of its
  artefacts' digests (each artefact its own SHA-256), written with it; reading a run or an
  artefact whose bytes no longer match -- a digit flipped by hand, a damaged page SQLite's
  own integrity check does not see -- raises :class:`~selfcal.exceptions.ChangedResults`
  naming the run. :meth:`ResultsStore.fail_changed` marks such runs failed, so that a sweep
  with ``retry_failed`` (``selfcal reproduce NAME --retry-failed``) runs them again. Stores
  of schema version 1 (no checksums) are upgraded when opened, their runs taken as they are.
"""

from __future__ import annotations

import io
import json
import math
import os
import random
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from selfcal.exceptions import ChangedResults
from selfcal.experiments._integrity import (
    RUN_COLUMNS,
    SCHEMA_VERSION,
    UPGRADES,
    changed_artefacts,
    changed_message,
    checked,
    checked_query,
    mark_failed,
    run_checksum,
    sha,
    store_error,
    upgrade,
)
from selfcal.experiments.environment import environment
from selfcal.experiments.spec import (
    STATUSES,
    RunResult,
    RunSpec,
    Status,
    canonical_json,
    thaw,
)

DEFAULT_PATH = "selfcal-results.sqlite"
BUSY_TIMEOUT_S = 60.0
LOCK_RETRIES = 8
T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    key TEXT PRIMARY KEY,
    study TEXT NOT NULL,
    dataset TEXT NOT NULL,
    method TEXT NOT NULL,
    seed INTEGER NOT NULL,
    spec TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('done', 'failed')),
    reason TEXT,
    metrics TEXT NOT NULL,
    seconds REAL NOT NULL,
    env TEXT NOT NULL,
    finished_at TEXT NOT NULL,
    checksum TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_study ON runs (study, status);
CREATE TABLE IF NOT EXISTS artefacts (
    run_key TEXT NOT NULL REFERENCES runs (key) ON DELETE CASCADE,
    name TEXT NOT NULL,
    dtype TEXT NOT NULL,
    shape TEXT NOT NULL,
    bytes BLOB NOT NULL,
    digest TEXT,
    PRIMARY KEY (run_key, name)
);
"""


@dataclass(frozen=True, eq=False)
class RunRecord:
    """One stored run. ``artefacts`` lists the names; load arrays with
    :meth:`ResultsStore.artefact`. Non-finite metrics of failed runs read back as NaN."""

    key: str
    spec: RunSpec
    status: Status
    reason: str | None
    metrics: dict[str, float]
    env: dict[str, Any]
    seconds: float
    finished_at: str
    artefacts: tuple[str, ...] = field(default=())


class ResultsStore:
    """SQLite results store at ``path`` (default ``selfcal-results.sqlite`` in the working
    directory; the path is resolved once, at construction). See the module docstring for the
    durability and concurrency guarantees. Usable as a context manager (closes the
    connection)."""

    def __init__(self, path: str | os.PathLike[str] = DEFAULT_PATH) -> None:
        self.path = Path(path).resolve()
        self._connection: sqlite3.Connection | None = None
        try:
            self._retry(self._create_schema)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ connection
    @property
    def _db(self) -> sqlite3.Connection:
        if self._connection is None:
            self._connection = self._connect()
        return self._connection

    def _connect(self) -> sqlite3.Connection:
        if self.path.is_dir():
            raise ValueError(f"results store path {self.path} is a directory")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ValueError(f"cannot open results store {self.path}: {err}") from err
        try:
            connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.OperationalError as err:
            raise ValueError(f"cannot open results store {self.path}: {err}") from err
        try:
            connection.execute("PRAGMA foreign_keys = ON")
            connection.execute("PRAGMA synchronous = FULL")
            mode = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.DatabaseError as err:
            connection.close()
            if _is_lock_error(err):
                raise
            raise store_error(self.path, err) from err
        if mode.lower() != "wal":
            connection.close()
            raise ValueError(f"{self.path}: cannot use WAL journal mode (got {mode!r})")
        return connection

    def close(self) -> None:
        """Close the connection (reopened on next use)."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ResultsStore({str(self.path)!r})"

    def __getstate__(self) -> dict[str, Any]:  # a connection cannot cross processes
        return {"path": self.path, "_connection": None}

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` (take the write lock up front: a deferred transaction that
        upgrades to writing can fail with SQLITE_BUSY without waiting) ... ``COMMIT``."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            if db.in_transaction:  # SQLite may already have rolled back (e.g. disk full)
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def _retry(self, action: Callable[[], T]) -> T:
        """Run ``action``, retrying on lock errors with jittered exponential backoff."""
        for attempt in range(LOCK_RETRIES):
            try:
                return action()
            except (sqlite3.ProgrammingError, sqlite3.IntegrityError):
                raise  # selfcal's own mistake, not the file's
            except sqlite3.DatabaseError as err:  # OperationalError, or a damaged file's
                if not _is_lock_error(err):
                    raise store_error(self.path, err) from err
                if attempt == LOCK_RETRIES - 1:
                    raise
                self.close()  # a fresh connection clears a stale snapshot
                time.sleep(0.05 * 2**attempt * (1 + random.random()))
        raise AssertionError("unreachable")

    def _create_schema(self) -> None:
        with self._transaction() as db:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            row = db.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
            if row is None:
                db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                return
            version = int(row[0])
            if version not in (*UPGRADES, SCHEMA_VERSION):
                raise ValueError(
                    f"{self.path} has results-store schema version {row[0]}; this "
                    f"selfcal reads versions {', '.join(map(str, [*UPGRADES, SCHEMA_VERSION]))}"
                )
            if version < SCHEMA_VERSION:
                upgrade(db, version)

    # ------------------------------------------------------------------ writing
    def record(
        self, spec: RunSpec, result: RunResult, env: Mapping[str, Any] | None = None
    ) -> bool:
        """Store one finished run and its artefacts in a single transaction.

        ``result`` goes through :meth:`RunResult.checked` first (a "done" run with a NaN/inf
        metric is stored as failed). ``env`` defaults to :func:`environment`. Returns
        ``False`` -- and writes nothing -- when the key is already stored as done.
        """
        if not isinstance(spec, RunSpec) or not isinstance(result, RunResult):
            raise ValueError("record(spec, result) needs a RunSpec and a RunResult")
        result = result.checked()
        env_json = canonical_json(dict(environment() if env is None else env))
        row = (
            spec.key,
            spec.study,
            spec.dataset,
            spec.method,
            spec.seed,
            spec.to_json(),
            result.status,
            result.reason,
            _metrics_json(result.metrics),
            float(result.seconds or 0.0),
            env_json,
            datetime.now(UTC).isoformat(timespec="milliseconds"),
        )
        blobs = []
        for name, a in result.artefacts.items():
            data = _to_bytes(a)
            blobs.append((spec.key, name, str(a.dtype), json.dumps(list(a.shape)), data, sha(data)))
        checksum = run_checksum(row, [(b[1], b[5]) for b in blobs])
        return self._retry(lambda: self._write((*row, checksum), blobs))

    def _write(self, row: tuple[Any, ...], blobs: list[tuple[Any, ...]]) -> bool:
        with self._transaction() as db:
            existing = db.execute("SELECT status FROM runs WHERE key = ?", (row[0],)).fetchone()
            if existing is not None and existing[0] == "done":
                return False
            db.execute("DELETE FROM runs WHERE key = ?", (row[0],))  # cascades to artefacts
            db.execute(f"INSERT INTO runs ({RUN_COLUMNS}, checksum) VALUES ({_marks(13)})", row)
            db.executemany(
                "INSERT INTO artefacts (run_key, name, dtype, shape, bytes, digest) "
                f"VALUES ({_marks(6)})",
                blobs,
            )
        return True

    def delete(self, study: str) -> int:
        """Delete every run of ``study`` with its artefacts; returns the number of runs."""

        def action() -> int:
            with self._transaction() as db:
                return db.execute("DELETE FROM runs WHERE study = ?", (study,)).rowcount

        return self._retry(action)

    # ------------------------------------------------------------------ reading
    def keys(self, study: str | None = None, status: Status | None = None) -> set[str]:
        """Keys of stored runs, optionally of one study and/or one status."""
        where, args = _filters(study=study, status=status)
        rows = self._query(f"SELECT key FROM runs{where}", args)
        return {key for (key,) in rows}

    def completed_keys(self, study: str | None = None) -> set[str]:
        """Keys of runs stored with status "done"."""
        return self.keys(study, "done")

    def runs(
        self,
        study: str | None = None,
        dataset: str | None = None,
        method: str | None = None,
        status: Status | None = "done",
    ) -> list[RunRecord]:
        """Stored runs matching the filters (``status=None``: any status), ordered by
        study, dataset, method, seed, key."""
        records = []
        for row in self._checked_rows(study, dataset, method, status):
            if not row[-1]:
                raise ChangedResults(changed_message(self.path, row))
            records.append(_record(row[:-1]))
        return records

    def _checked_rows(
        self,
        study: str | None = None,
        dataset: str | None = None,
        method: str | None = None,
        status: Status | None = None,
    ) -> list[tuple[Any, ...]]:
        """The runs' rows, each followed by its artefacts' names and whether the stored
        checksum matches the content (:func:`~selfcal.experiments._integrity.checked`)."""
        where, args = _filters(study=study, dataset=dataset, method=method, status=status)
        return [checked(row) for row in self._query(checked_query(where), args)]

    def fail_changed(self, study: str | None = None) -> list[str]:
        """Mark every run whose content or arrays no longer match their checksums as failed
        (reason ``"changed after it was stored"``; its arrays dropped), so that a sweep with
        ``retry_failed`` runs it again; returns their keys."""
        changed = {row[0] for row in self._checked_rows(study) if not row[-1]}
        where, args = _filters(study=study)
        changed |= changed_artefacts(self._db, where, args)
        if changed:
            self._retry(lambda: mark_failed(self._transaction, sorted(changed)))
        return sorted(changed)

    def failures(self, study: str | None = None) -> list[RunRecord]:
        """Failed runs (their ``reason`` says why)."""
        return self.runs(study, status="failed")

    def artefact(self, key: str, name: str) -> np.ndarray:
        """The array ``name`` of run ``key`` (``KeyError`` when absent)."""
        rows = self._query(
            "SELECT bytes, digest FROM artefacts WHERE run_key = ? AND name = ?", (key, name)
        )
        if not rows:
            raise KeyError(f"no artefact {name!r} for run {key!r} in {self.path}")
        data, digest = rows[0]
        if digest is not None and sha(data) != digest:
            raise ChangedResults(
                f"{self.path}: artefact {name!r} of run {key} was changed after it was stored "
                "(checksum mismatch); run it again with --retry-failed"
            )
        return np.load(io.BytesIO(data), allow_pickle=False)

    def to_rows(
        self, study: str | None = None, status: Status | None = "done"
    ) -> list[dict[str, Any]]:
        """Flat records for tables: ``study, dataset, method, seed``, then the
        hyperparameters by name, the model configuration as ``model.<path>`` columns, then the
        metrics by name. A metric named like a hyperparameter or a fixed column is an error
        (``ValueError``) rather than a silent overwrite."""
        return [_flat_row(record) for record in self.runs(study, status=status)]

    def _query(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return self._retry(lambda: self._db.execute(sql, args).fetchall())


# ----------------------------------------------------------------------------- helpers
def _is_lock_error(err: sqlite3.Error) -> bool:
    message = str(err).lower()
    return "locked" in message or "busy" in message


def _filters(**equal: Any) -> tuple[str, tuple[Any, ...]]:
    """``WHERE a = ? AND b = ?`` over the filters that are not ``None``."""
    chosen = {name: value for name, value in equal.items() if value is not None}
    if "status" in chosen and chosen["status"] not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES} or None, got {chosen['status']!r}")
    if not chosen:
        return "", ()
    where = " AND ".join(f"{name} = ?" for name in chosen)
    return " WHERE " + where, tuple(chosen.values())


def _marks(n: int) -> str:
    return ", ".join("?" * n)


def _to_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _metrics_json(metrics: Mapping[str, float]) -> str:
    """Strict JSON: non-finite values (only possible for failed runs) become null."""
    return canonical_json({k: v if math.isfinite(v) else None for k, v in metrics.items()})


def _record(row: tuple[Any, ...]) -> RunRecord:
    key, _, _, _, _, spec, status, reason, metrics, seconds, env, finished_at, names = row
    return RunRecord(
        key=key,
        spec=RunSpec.from_json(spec),
        status=status,
        reason=reason,
        metrics={k: math.nan if v is None else float(v) for k, v in json.loads(metrics).items()},
        env=json.loads(env),
        seconds=float(seconds),
        finished_at=finished_at,
        artefacts=tuple(sorted(names.split("\x1f"))) if names else (),
    )


def _flat_row(record: RunRecord) -> dict[str, Any]:
    spec = record.spec
    row: dict[str, Any] = {
        "study": spec.study,
        "dataset": spec.dataset,
        "method": spec.method,
        "seed": spec.seed,
    }
    columns = [*spec.hparams.items(), *_flatten(spec.model, "model"), *record.metrics.items()]
    for name, value in columns:
        if name in row:
            raise ValueError(
                f"run {record.key}: column {name!r} appears twice (hyperparameter "
                "and metric, or a reserved name); rename one of them"
            )
        row[name] = value
    return row


def _flatten(value: Any, prefix: str) -> list[tuple[str, Any]]:
    """Nested mappings -> ``[("model.a.b", leaf), ...]``; lists stay whole."""
    if not isinstance(value, Mapping):
        return [(prefix, thaw(value))]
    return [item for k, v in value.items() for item in _flatten(v, f"{prefix}.{k}")]
