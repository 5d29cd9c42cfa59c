"""Run a sweep of :class:`RunSpec` s through any executor and store each result as it finishes.

``execute(list[RunSpec]) -> list[RunResult]`` is a top-level function (so that it can be
pickled into worker processes) that knows how to run specs; this module knows nothing about
datasets, models or methods. Choices:

* **Resumable.** A spec whose key is already stored is skipped (failed ones too, unless
  ``retry_failed=True``), and each group's results are written as soon as the group finishes,
  one transaction per run, by the parent process only. Killing a sweep at any moment and
  starting it again therefore finishes exactly the missing runs. Sweeps sharing a store
  claim their runs and wait for each other's (:mod:`selfcal.experiments._claims`): each run
  is executed once.
* **Groups.** ``batch_by(spec)`` maps specs to a hashable group id; one executor call gets a
  whole group (e.g. all seeds of one configuration, to be vmapped). Default: one spec a call.
* **Failures are data.** An exception inside ``execute`` fails every run of its group with
  ``"<ExceptionType>: <message>"`` and the sweep goes on; so does a crashed worker process
  (segfault, out-of-memory kill). A "done" result with a NaN/inf metric is stored as failed.
  An ``ImportError`` is the exception: a package missing from the environment says nothing
  about the run, so it stops the sweep (the groups already finished are stored) and nothing is
  stored for its group -- installing the package and running again resumes, where a stored
  failure would be kept until ``retry_failed``.
* **Processes.** ``workers > 1`` uses a ``ProcessPoolExecutor`` with the *forkserver* start
  method on Linux and *spawn* elsewhere, never plain *fork*: forking a parent that has used
  torch (its OpenMP/intra-op thread pools, CUDA) can deadlock or break CUDA in the child.
  Forkserver workers are forked from a server process that has only imported selfcal and
  torch, so they are as clean as spawned ones but start in milliseconds rather than
  re-importing torch (seconds) -- which matters for the fresh processes used after a crash.
  At most ``workers`` groups are in flight, so when a worker dies the suspects are known:
  each is re-run alone in its own fresh process, and only the one that crashes again is
  recorded as failed.
* **Ctrl-C** stops the sweep: results already returned are stored, workers are terminated,
  and the ``KeyboardInterrupt`` is re-raised (a library must not swallow it); rerun to resume.
* **No orphans.** A sweep killed outright (SIGKILL, out-of-memory killer) takes its workers
  with it: each worker exits within a second of losing its parent (:func:`_watch_parent`);
  the forkserver process that forked them exits once they are gone (measured: 2-7 s).
* **Ray.** ``executor="ray"`` runs the groups as Ray tasks instead of worker processes
  (:mod:`selfcal.experiments.ray_executor`; the optional ``ray`` extra,
  ``pip install "selfcal[ray]"``, imported only then): on a new local Ray instance with
  ``num_cpus=workers`` (``address=None``; shut down when the sweep ends) or on an existing
  cluster (``address="auto"`` or ``"ray://host:port"``). Everything above holds as for
  processes: at most ``workers`` groups in flight (one CPU each), results stored by the
  driver as each task finishes (resumable), the same failure reasons, a task whose worker
  dies re-run once alone before it is recorded as failed (``"WorkerCrashedError: ..."``),
  Ctrl-C cancelling the running tasks; and the task runs the same ``run_group``, so the
  results are bit-identical to a process sweep's. Without Ray installed, ``executor="ray"``
  is an ``ImportError`` naming the extra.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

from selfcal._validation import check_choice, check_int
from selfcal.experiments._claims import share
from selfcal.experiments._groups import Executor, Group, OnDone, run_group, warn_summary
from selfcal.experiments._plan import groups_of, pending_of, unique
from selfcal.experiments.environment import environment
from selfcal.experiments.ray_executor import import_ray, run_on_ray
from selfcal.experiments.spec import RunResult, RunSpec
from selfcal.experiments.store import DEFAULT_PATH, ResultsStore

EXECUTORS = ("process", "ray")
"""What runs the groups: worker processes (or this process when ``workers == 1``), or Ray
tasks."""
WATCHDOG_INTERVAL_S = 0.5
WATCHDOG_EXIT = 70
"""Exit code of a worker that outlived its sweep."""
CRASH_REASON = (
    "BrokenProcessPool: the worker process died while running this group "
    "(segfault, out-of-memory kill or os._exit); it crashed again when re-run alone"
)


@dataclass(frozen=True)
class SweepSummary:
    """Counts over the distinct specs of one :func:`run_sweep` call: ``done`` and ``failed``
    were run now; ``skipped`` were already stored (or stored as done meanwhile by another
    process). ``seconds`` is the sweep's wall time; ``warnings`` the distinct warnings its
    groups raised (``"Category: message"``), with how often each came."""

    done: int
    skipped: int
    failed: int
    seconds: float
    warnings: tuple[tuple[str, int], ...] = ()

    def __str__(self) -> str:
        return (
            f"{self.done} done, {self.skipped} skipped, {self.failed} failed "
            f"in {self.seconds:.1f} s"
        )


def run_sweep(
    specs: Iterable[RunSpec],
    execute: Executor,
    *,
    store: ResultsStore | str | Path | None = None,
    workers: int = 1,
    batch_by: Callable[[RunSpec], Hashable] | None = None,
    retry_failed: bool = False,
    progress: bool = True,
    executor: str = "process",
    address: str | None = None,
) -> SweepSummary:
    """Run every spec not yet stored in ``store`` (default ``ResultsStore()``, i.e.
    ``selfcal-results.sqlite`` in the working directory) and store the results.

    See the module docstring for the semantics of skipping, grouping, failures, worker
    processes and interruption. ``progress`` shows a rich progress bar with ETA on stderr.
    ``executor="ray"`` runs the groups as Ray tasks, ``workers`` of them at a time, on a new
    local Ray instance (``address=None``) or on the cluster at ``address`` (``"auto"``,
    ``"ray://host:port"``); ``address`` is only for Ray.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from selfcal.experiments import ResultsStore, RunResult, RunSpec, run_sweep
    >>> def square(group):  # an executor: results for a group of specs
    ...     return [RunResult(metrics={"value": float(spec.seed) ** 2}) for spec in group]
    >>> specs = [RunSpec("demo", "none", "square", seed) for seed in range(3)]
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     with ResultsStore(Path(folder) / "runs.sqlite") as store:
    ...         first = run_sweep(specs, square, store=store, progress=False)
    ...         again = run_sweep(specs, square, store=store, progress=False)  # resumes
    ...         values = sorted(r.metrics["value"] for r in store.runs(study="demo"))
    >>> (first.done, again.done, again.skipped), values
    ((3, 0, 3), [0.0, 1.0, 4.0])
    """
    start = time.perf_counter()
    _check_arguments(execute, workers, executor, address)
    owned = not isinstance(store, ResultsStore)
    results_store = (
        store
        if isinstance(store, ResultsStore)
        else ResultsStore(DEFAULT_PATH if store is None else store)
    )
    try:
        once = unique(specs)
        pending = pending_of(once, results_store, retry_failed)
        tally: dict[str, Any] = {"done": 0, "failed": 0, "skipped": 0, "warnings": Counter()}

        def run(ours: list[RunSpec]) -> None:
            got = _run_pending(
                ours, execute, results_store, workers, batch_by, progress, executor, address
            )
            for name, count in got.items():
                tally[name] += count

        share(
            results_store, pending, run, lambda left: pending_of(left, results_store, retry_failed)
        )
        tally["skipped"] += len(pending) - sum(tally[k] for k in ("done", "failed", "skipped"))
    finally:
        if owned:
            results_store.close()
    caught = tuple(tally.pop("warnings").items())
    warn_summary(caught, len(pending))
    return SweepSummary(
        tally["done"],
        len(once) - len(pending) + tally["skipped"],
        tally["failed"],
        time.perf_counter() - start,
        caught,
    )


def _run_pending(
    pending: list[RunSpec],
    execute: Executor,
    store: ResultsStore,
    workers: int,
    batch_by: Callable[[RunSpec], Hashable] | None,
    progress: bool,
    executor: str = "process",
    address: str | None = None,
) -> dict[str, Any]:
    """Run and record the pending specs; returns counts of done / failed / skipped (already
    stored as done by another process meanwhile) and, under ``"warnings"``, a ``Counter`` of
    the warnings the groups raised."""
    caught: Counter[str] = Counter()
    tally: dict[str, Any] = {"done": 0, "failed": 0, "skipped": 0, "warnings": caught}
    if not pending:
        return tally
    groups = groups_of(pending, batch_by)
    env = environment()
    with _progress_bar(progress, len(pending), _title(pending)) as advance:

        def on_done(group: Group, results: list[RunResult]) -> None:
            for spec, result in zip(group, results, strict=True):
                caught.update(dict(result.warnings))
                checked = result.checked()
                written = store.record(spec, checked, env)
                tally[checked.status if written else "skipped"] += 1
            advance(len(group), tally["failed"])

        if executor == "ray":
            run_on_ray(groups, execute, workers, on_done, address)
        elif workers == 1:
            for group in groups:
                on_done(group, run_group(execute, group))
        else:
            _run_parallel(groups, execute, workers, on_done)
    return tally


# ----------------------------------------------------------------------------- preparation
def _check_arguments(
    execute: Executor, workers: int, executor: str = "process", address: str | None = None
) -> None:
    if not callable(execute):
        raise ValueError(f"execute must be callable, got {execute!r}")
    check_int("workers", workers)
    check_choice("executor", executor, EXECUTORS)
    if address is not None and executor != "ray":
        raise ValueError(f"address is the Ray cluster's (executor='ray'), got {address!r}")
    if address is not None and (not isinstance(address, str) or not address.strip()):
        raise ValueError(f"address must be a non-empty string such as 'auto', got {address!r}")
    if executor == "ray":
        import_ray()  # fail before anything runs when the extra is missing
    if workers > 1 or executor == "ray":
        where = "Ray tasks" if executor == "ray" else "worker processes"
        try:
            pickle.dumps(execute)
        except (pickle.PicklingError, AttributeError, TypeError) as err:
            raise ValueError(
                f"execute must be a top-level (picklable) function to run in "
                f"{where}; {execute!r} is not: {err}"
            ) from err


def _title(specs: Sequence[RunSpec]) -> str:
    studies = sorted({spec.study for spec in specs})
    return "sweep " + (", ".join(studies) if len(studies) <= 3 else f"{len(studies)} studies")


@contextmanager
def _progress_bar(enabled: bool, total: int, title: str) -> Iterator[Callable[[int, int], None]]:
    """Yields ``advance(n_runs, n_failed_so_far)``; a no-op when disabled."""
    if not enabled:
        yield lambda n, failed: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("failed {task.fields[failed]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = bar.add_task(title, total=total, failed=0)
        yield lambda n, failed: bar.update(task, advance=n, failed=failed)


# ----------------------------------------------------------------------------- execution
def _run_parallel(groups: list[Group], execute: Executor, workers: int, on_done: OnDone) -> None:
    """Run groups on ``workers`` processes; after a worker crash, re-run the groups that were
    in flight each alone (concurrently, one process each), then go on with a fresh pool."""
    queue = deque(groups)
    while queue:
        suspects = _run_pool(queue, execute, workers, on_done)
        if suspects:
            _run_alone(suspects, execute, on_done)


def _context() -> BaseContext:
    """*forkserver* on Linux: workers are forked from a clean server process that has only
    imported this module (and so torch) -- never run a torch op, started a thread pool or
    touched CUDA -- which is as safe as spawn, while a worker starts in milliseconds instead
    of re-importing torch (seconds). Elsewhere *spawn* (macOS system frameworks do not
    survive fork reliably; Windows has no fork). Note: sets the forkserver's preload list."""
    if sys.platform.startswith("linux"):
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([__name__])
        return context
    return multiprocessing.get_context("spawn")


def _new_pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=_context(),
        initializer=_watch_parent,
        initargs=(os.getpid(),),
    )


def _watch_parent(sweep_pid: int) -> None:
    """Worker initializer: the worker dies with the sweep. A sweep killed by a signal (even
    SIGKILL) cannot stop its workers, and a worker deep in a long group would otherwise run --
    and hold its memory -- until the group ends. Nor does the forkserver help: it hands its
    liveness pipe to every worker it forks, so server and workers keep each other alive.
    A daemon thread therefore checks every :data:`WATCHDOG_INTERVAL_S` that the sweep process
    still runs (a zombie counts as dead) and that the worker was not re-parented, and ends the
    worker at once (``os._exit``) otherwise."""
    parent = os.getppid()
    if not _running(sweep_pid):  # died before the guard was up
        os._exit(WATCHDOG_EXIT)
    threading.Thread(
        target=_watchdog, args=(sweep_pid, parent), daemon=True, name="selfcal-sweep-watchdog"
    ).start()


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and, where ``/proc`` tells, is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - exists, owned by someone else
        return True
    return True


def _watchdog(sweep_pid: int, parent: int) -> None:
    while True:
        time.sleep(WATCHDOG_INTERVAL_S)
        if os.getppid() != parent or not _running(sweep_pid):
            os._exit(WATCHDOG_EXIT)


def _run_pool(queue: deque[Group], execute: Executor, workers: int, on_done: OnDone) -> list[Group]:
    """Drain ``queue`` through one pool, ``workers`` groups in flight at a time. Returns the
    groups that were in flight when the pool broke (empty when it did not)."""
    pool = _new_pool(min(workers, len(queue)))
    in_flight: dict[Future[list[RunResult]], Group] = {}
    try:
        while queue or in_flight:
            while queue and len(in_flight) < workers:
                group = queue.popleft()
                in_flight[pool.submit(run_group, execute, group)] = group
            finished, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            for future in finished:
                if isinstance(future.exception(), BrokenProcessPool):
                    return _store_finished(in_flight, on_done)
                group = in_flight.pop(future)
                on_done(group, _future_results(future, group))
    except BaseException:
        _store_finished(in_flight, on_done)
        _terminate(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return []


def _run_alone(groups: list[Group], execute: Executor, on_done: OnDone) -> None:
    """Run each group in its own fresh process, all at once; a group whose process dies is
    the one that crashes and is recorded as failed."""
    pools = [_new_pool(1) for _ in groups]
    try:
        futures = [
            pool.submit(run_group, execute, group)
            for pool, group in zip(pools, groups, strict=True)
        ]
        for future, group in zip(futures, groups, strict=True):
            wait([future])
            on_done(group, _future_results(future, group))
    except BaseException:
        for pool in pools:
            _terminate(pool)
        raise
    finally:
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=True)


def _future_results(future: Future[list[RunResult]], group: Group) -> list[RunResult]:
    """The group's results. A dead worker process, or an error in shipping the results back
    (e.g. pickling), fails the group; Ctrl-C, or an ``ImportError``, raised in a worker
    propagates."""
    error = future.exception()
    if error is None:
        return future.result()
    if isinstance(error, BrokenProcessPool):
        return [RunResult.failure(CRASH_REASON) for _ in group]
    if isinstance(error, Exception) and not isinstance(error, ImportError):
        return [RunResult.failure(f"{type(error).__name__}: {error}") for _ in group]
    raise error


def _store_finished(
    in_flight: dict[Future[list[RunResult]], Group], on_done: OnDone
) -> list[Group]:
    """Store every in-flight group that finished successfully; return the others."""
    unfinished = []
    for future, group in in_flight.items():
        if future.done() and not future.cancelled() and future.exception() is None:
            on_done(group, future.result())
        else:
            unfinished.append(group)
    in_flight.clear()
    return unfinished


def _terminate(pool: ProcessPoolExecutor) -> None:
    """Kill the pool's workers now (Python < 3.14 has no public API for it; on Ctrl-C the
    running groups' partial work is discarded anyway)."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        if process.is_alive():
            process.terminate()
