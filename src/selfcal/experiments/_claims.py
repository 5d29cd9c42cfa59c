"""Claims on runs in flight: sweeps sharing a store split its work instead of repeating it.

Before it runs anything, a sweep claims the pending runs that no live sweep has claimed
(``claims`` table of the store: key, owner, time) and runs only those; the runs another sweep
holds it waits for, and takes over any whose owner died (a killed sweep's claims are stale the
moment its process is gone). Its claims are released when it ends. An owner is
``host:pid``; a claim made on another host is honoured as long as it is younger than
:data:`STALE_AFTER_S` (a host's processes cannot be seen from another).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterable

from selfcal.experiments.spec import RunSpec
from selfcal.experiments.store import ResultsStore

STALE_AFTER_S = 24 * 3600.0
"""A claim made on another host older than this is taken over."""
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS claims "
    "(key TEXT PRIMARY KEY, owner TEXT NOT NULL, claimed_at REAL NOT NULL)"
)


def this_owner() -> str:
    """``host:pid`` of this process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def alive(owner: str, claimed_at: float) -> bool:
    """Whether the sweep ``owner`` may still be running the run it claimed."""
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname():
        return time.time() - claimed_at < STALE_AFTER_S
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return True
    return True


def claim(store: ResultsStore, keys: Iterable[str], owner: str) -> set[str]:
    """Claim for ``owner`` every key of ``keys`` that no other live sweep holds and that is not
    stored as done; returns the keys ``owner`` now holds (one transaction: two sweeps never
    claim the same key)."""
    wanted = list(keys)

    def action() -> set[str]:
        with store._transaction() as db:
            db.execute(SCHEMA)
            held = set()
            for key in wanted:
                row = db.execute(
                    "SELECT owner, claimed_at FROM claims WHERE key = ?", (key,)
                ).fetchone()
                if row is not None and row[0] != owner and alive(row[0], row[1]):
                    continue
                done = db.execute("SELECT 1 FROM runs WHERE key = ? AND status = 'done'", (key,))
                if done.fetchone() is not None:  # finished since the caller looked
                    continue
                db.execute(
                    "INSERT OR REPLACE INTO claims VALUES (?, ?, ?)", (key, owner, time.time())
                )
                held.add(key)
            return held

    return store._retry(action)


def release(store: ResultsStore, owner: str) -> None:
    """Drop every claim of ``owner``."""

    def action() -> None:
        with store._transaction() as db:
            db.execute(SCHEMA)
            db.execute("DELETE FROM claims WHERE owner = ?", (owner,))

    store._retry(action)


POLL_S = 1.0
"""Seconds between looks at the runs another sweep holds."""


def share(
    store: ResultsStore,
    pending: list[RunSpec],
    run: Callable[[list[RunSpec]], None],
    unfinished: Callable[[list[RunSpec]], list[RunSpec]],
) -> None:
    """``run`` the pending specs this sweep can claim, round after round: after each, the
    specs still ``unfinished`` (not stored as the sweep needs them) are either held by a live
    sweep (wait for it) or free again (claim and run them). Claims are released at the end,
    however the sweep ends."""
    owner = this_owner()
    left = list(pending)
    try:
        while left:
            mine = claim(store, [spec.key for spec in left], owner)
            ours = [spec for spec in left if spec.key in mine]
            if ours:
                run(ours)
            left = [spec for spec in left if spec.key not in mine]
            if left and not ours:
                time.sleep(POLL_S)
            left = unfinished(left)  # looked at after waiting: what is still not stored
    finally:
        release(store, owner)
