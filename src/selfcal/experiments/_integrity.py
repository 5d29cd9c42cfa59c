"""The results store's integrity (:mod:`selfcal.experiments.store`): the checksums a run row
must still match when it is read, the upgrade that gives a store of schema version 1 its
checksums, and one-line messages for the file-level failures SQLite reports."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

RUN_COLUMNS = (
    "key, study, dataset, method, seed, spec, status, reason, metrics, seconds, env, finished_at"
)
"""The columns a run's checksum covers, in order (with its artefacts' names and digests)."""
UPGRADES = {
    1: ("ALTER TABLE runs ADD COLUMN checksum TEXT", "ALTER TABLE artefacts ADD COLUMN digest TEXT")
}
"""Schema version -> the statements that bring a store of it to the next version."""
SCHEMA_VERSION = 2
"""The results store's schema: version 2 added the checksums."""


def sha(data: bytes) -> str:
    """SHA-256 of ``data``, hex."""
    return hashlib.sha256(data).hexdigest()


def run_checksum(fields: Sequence[Any], artefacts: Sequence[Sequence[str]]) -> str:
    """SHA-256 of a run's stored fields (:data:`RUN_COLUMNS`, in order) and its artefacts'
    ``(name, digest)`` pairs sorted by name: what the row must still hold when read."""
    text = json.dumps([list(fields), sorted(map(list, artefacts))], separators=(",", ":"))
    return sha(text.encode("utf-8"))


def upgrade(db: sqlite3.Connection, version: int) -> None:
    """Bring a store of schema ``version`` to :data:`SCHEMA_VERSION` inside the open
    transaction: add the checksum columns and fill them from the rows as they are."""
    for statement in UPGRADES[version]:
        db.execute(statement)
    digests: dict[str, list[tuple[str, str]]] = {}
    for run_key, name in db.execute("SELECT run_key, name FROM artefacts").fetchall():
        where = (run_key, name)
        (data,) = db.execute(
            "SELECT bytes FROM artefacts WHERE run_key = ? AND name = ?", where
        ).fetchone()  # one array in memory at a time
        digest = sha(data)
        db.execute(
            "UPDATE artefacts SET digest = ? WHERE run_key = ? AND name = ?", (digest, *where)
        )
        digests.setdefault(run_key, []).append((name, digest))
    for fields in db.execute(f"SELECT {RUN_COLUMNS} FROM runs").fetchall():
        checksum = run_checksum(tuple(fields), digests.get(fields[0], []))
        db.execute("UPDATE runs SET checksum = ? WHERE key = ?", (checksum, fields[0]))
    db.execute("UPDATE meta SET value = ? WHERE name = 'schema_version'", (str(SCHEMA_VERSION),))


def checked_query(where: str) -> str:
    """The runs (``where``: a ``WHERE`` clause on ``runs r``) with their stored checksum and
    their artefacts' ``name<RS>digest`` joined by ``<US>``."""
    columns = ", ".join("r." + c.strip() for c in RUN_COLUMNS.split(","))
    return (
        f"SELECT {columns}, r.checksum, "
        "(SELECT group_concat(name || char(30) || ifnull(digest, ''), char(31)) FROM "
        "(SELECT name, digest FROM artefacts a WHERE a.run_key = r.key ORDER BY name)) "
        f"FROM runs r{where} ORDER BY r.study, r.dataset, r.method, r.seed, r.key"
    )


def checked(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A row of :func:`checked_query` as ``(*fields, artefact names joined by <US>, ok)``:
    ``ok`` when its checksum matches its fields and artefact digests."""
    fields, stored, joined = row[:12], row[12], row[13]
    pairs = [tuple(p.split("\x1e")) for p in joined.split("\x1f")] if joined else []
    names = "\x1f".join(p[0] for p in pairs)
    return (*fields, names, stored == run_checksum(fields, pairs))


def changed_message(path: Path, row: tuple[Any, ...]) -> str:
    """The one line naming a changed run and how to run it again."""
    key, study, dataset, method, seed = row[:5]
    return (
        f"{path}: run {key} ({study}, {dataset}, {method}, seed {seed}) was changed after it "
        f"was stored (checksum mismatch); run it again: selfcal reproduce {study} "
        "--retry-failed (or ResultsStore.fail_changed, then retry_failed=True)"
    )


def changed_artefacts(db: sqlite3.Connection, where: str, args: tuple[Any, ...]) -> set[str]:
    """Keys of the runs (``where`` on ``runs``) one of whose arrays no longer matches its
    digest; the arrays are read one at a time."""
    rows: Iterator[tuple[str, bytes, str | None]] = db.execute(
        "SELECT a.run_key, a.bytes, a.digest FROM artefacts a "
        f"JOIN runs ON runs.key = a.run_key{where}",
        args,
    )
    return {key for key, data, digest in rows if digest and sha(data) != digest}


def mark_failed(
    transaction: Callable[[], AbstractContextManager[sqlite3.Connection]], keys: list[str]
) -> None:
    """Mark the runs ``keys`` failed ("changed after it was stored"), drop their arrays and
    checksum what they now hold, in one transaction."""
    with transaction() as db:
        for key in keys:
            db.execute("DELETE FROM artefacts WHERE run_key = ?", (key,))
            db.execute(
                "UPDATE runs SET status = 'failed', reason = ? WHERE key = ?",
                ("changed after it was stored (checksum mismatch)", key),
            )
            fields = db.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE key = ?", (key,)).fetchone()
            db.execute(
                "UPDATE runs SET checksum = ? WHERE key = ?", (run_checksum(fields, []), key)
            )


def store_error(path: Path, err: sqlite3.Error) -> ValueError:
    """One line naming the store and what to do, for what SQLite reports: a read-only file
    or folder, a full disk, a damaged file, or a file that is not a store."""
    message = str(err).lower()
    if "readonly" in message or "read-only" in message or "unable to open" in message:
        what = "cannot be written here (a read-only file or folder); copy it somewhere writable"
    elif "disk is full" in message or "disk i/o" in message:
        what = "could not be written: the disk is full or failing; free space and rerun"
    elif "malformed" in message or "decode" in message or "corrupt" in message:
        what = "is damaged; rebuild it by rerunning into a new --store"
    else:
        return ValueError(f"{path} is not a selfcal results store: {err}")
    return ValueError(f"results store {path} {what} ({err})")
