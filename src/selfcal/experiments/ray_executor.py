"""Sweeps as Ray tasks: the ``executor="ray"`` back end of
:func:`selfcal.experiments.run_sweep` (Ray is the optional ``ray`` extra,
``pip install "selfcal[ray]"``, imported only when a sweep asks for it).

Each group of specs is one Ray task (``num_cpus=1``) that runs the runner's own
``run_group(execute, group)`` (:mod:`selfcal.experiments._groups`) -- the very function a
worker process runs, so an exception becomes the same ``"<Type>: <message>"`` failure and a
study's executor (:func:`selfcal.experiments.study.execute_group`) fixes the same thread
count: results are bit-identical to the process executor's. The **driver** keeps at most
``workers`` tasks in flight and stores each group's results as soon as its task finishes (one
transaction per run, in the driver only), so a Ray sweep is resumable exactly like a process
sweep. Choices:

* **Where.** ``address=None`` starts a new local Ray instance with ``num_cpus=workers``
  (``ray.init(address="local", ...)``, so an unrelated cluster or ``RAY_ADDRESS`` is never
  picked up by accident) and shuts it down when the sweep ends; ``address="auto"`` (a cluster
  started with ``ray start`` on this machine) or ``"ray://host:port"`` (Ray Client) connects to
  an existing cluster and disconnects afterwards, leaving the cluster running. When Ray is
  already initialised in this process (your own ``ray.init``, e.g. with a ``runtime_env``),
  the sweep uses that connection, whatever ``address`` says, and leaves it open.
* **Imports on the workers.** A Ray worker does *not* inherit the driver's ``sys.path``: it
  starts a fresh interpreter that sees only the driver's working directory, its
  ``PYTHONPATH`` and what is installed. An executor defined in a module the driver found
  through a ``sys.path`` entry added at run time (a script's folder, pytest's ``pythonpath``)
  would fail to import there. Rather than replacing the workers' ``PYTHONPATH`` through a
  ``runtime_env`` (which would clobber a remote node's own ``PYTHONPATH`` and start every
  worker through Ray's runtime-environment agent), the task receives the driver's own
  ``sys.path`` entries -- those outside the interpreter's installation (:func:`driver_paths`)
  -- appends the missing ones to the worker's ``sys.path`` and only then unpickles the
  executor, which travels as ``pickle`` bytes (a top-level function, pickled by reference as
  for worker processes). selfcal itself must be installed wherever the tasks run; on a
  remote cluster, so must the executor's module (or ship it with your own ``runtime_env``).
* **Crashes.** A task whose worker process dies (segfault, ``os._exit``, the out-of-memory
  killer, a lost node: Ray's :data:`CRASH_ERRORS`, also when wrapped in a ``RayTaskError``)
  is not retried by Ray (``max_retries=0``) but by the driver: once, in a fresh worker, with
  no other task in flight, so a crash caused by its neighbours' memory does not recur; when
  it dies again its runs are stored as failed with :data:`RAY_CRASH_REASON`. Any other error
  a task reports fails its group with ``"<Type>: <message>"`` of the original exception.
* **Ctrl-C** (or ``KeyboardInterrupt`` inside a task, which Ray reports as a cancelled task)
  stores the tasks that already finished, cancels the others (``ray.cancel(force=True)``) and
  re-raises ``KeyboardInterrupt``; rerun to resume. (Ray 2.60 itself can abort the driver
  with ``Check failed: ... Tried to complete task that was not pending`` when a task finishes
  at the very moment it is cancelled, a race inside Ray; the store is unharmed and a rerun
  resumes.)
* **A killed driver** (SIGKILL, the out-of-memory killer) loses only its unstored groups: the
  store holds whole runs, and rerunning resumes. Its local Ray instance dies with it (Ray's
  fate sharing: the running tasks' workers within seconds, Ray's idle agents within about a
  minute); on a cluster, Ray ends a dead driver's tasks.
* **Threads and devices.** Ray sets ``OMP_NUM_THREADS`` to a task's CPUs (1) and hides the
  GPUs from a task that reserves none (``CUDA_VISIBLE_DEVICES=""``). The study engine fixes
  the torch and BLAS thread counts around every executor call, so study results do not
  depend on the first; the second means every run of a Ray sweep uses the CPU, so the studies
  that train on a GPU when there is one (the CIFAR rows of ``bo4sc-images`` and
  ``benchmark``) differ from a process sweep on a GPU machine: run those with processes.
"""

from __future__ import annotations

import importlib
import os
import pickle
import site
import sys
from collections import deque
from collections.abc import Iterable
from types import ModuleType
from typing import Any

from selfcal.experiments._groups import Executor, Group, OnDone, run_group
from selfcal.experiments.spec import RunResult

MISSING_RAY = (
    'executor="ray" needs Ray, the optional "ray" extra: pip install "selfcal[ray]" '
    "(or pip install ray)"
)
RAY_CRASH_REASON = (
    "the Ray worker died while running this group (segfault, out-of-memory kill, os._exit "
    "or a lost node); it crashed again when re-run alone"
)
"""Reason of a group whose worker died twice, after ``"<Ray error type>: "``."""
CRASH_ERRORS = ("WorkerCrashedError", "OutOfMemoryError", "NodeDiedError")
"""Names in ``ray.exceptions`` of the errors that mean the task's worker died."""
WAIT_S = 1.0
"""How long the driver blocks in ``ray.wait`` before looking again (keeps Ctrl-C prompt)."""


def import_ray() -> ModuleType:
    """The ``ray`` module, or an ``ImportError`` naming the extra that provides it."""
    try:
        return importlib.import_module("ray")
    except ImportError as err:
        raise ImportError(MISSING_RAY, name="ray") from err


def run_on_ray(
    groups: Iterable[Group],
    execute: Executor,
    workers: int,
    on_done: OnDone,
    address: str | None = None,
) -> None:
    """Run every group as a Ray task, at most ``workers`` in flight, calling
    ``on_done(group, results)`` in this process as each finishes (module doc)."""
    ray = import_ray()
    started = _connect(ray, workers, address)
    try:
        _drain(ray, deque(groups), execute, workers, on_done)
    finally:
        if started:
            ray.shutdown()


def _connect(ray: ModuleType, workers: int, address: str | None) -> bool:
    """Initialise Ray unless it already is; returns whether this call did (and so must shut
    it down)."""
    if ray.is_initialized():
        return False
    if address is None:
        ray.init(address="local", num_cpus=workers, include_dashboard=False)
    else:
        ray.init(address=address)
    return True


# ----------------------------------------------------------------------------- the task
def run_group_task(paths: tuple[str, ...], execute: bytes, group: Group) -> list[RunResult]:
    """The Ray task: make the driver's import paths visible, unpickle the executor and run
    the group exactly as a worker process does (``_groups.run_group``)."""
    for path in paths:
        if path not in sys.path:
            sys.path.append(path)
    return run_group(pickle.loads(execute), group)


def driver_paths() -> tuple[str, ...]:
    """This process's ``sys.path`` entries that are existing folders outside the
    interpreter's own installation (its prefixes and the user site-packages), as absolute
    paths in order: what a fresh interpreter started by Ray may lack."""
    installed = {
        os.path.realpath(p)
        for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
    }
    user_site = os.path.realpath(site.getusersitepackages())
    out: list[str] = []
    for entry in sys.path:
        path = os.path.abspath(entry or os.curdir)
        real = os.path.realpath(path)
        inside = any(real == p or real.startswith(p + os.sep) for p in installed)
        if os.path.isdir(path) and not inside and real != user_site and path not in out:
            out.append(path)
    return tuple(out)


# ----------------------------------------------------------------------------- the driver
def _drain(
    ray: ModuleType, queue: deque[Group], execute: Executor, workers: int, on_done: OnDone
) -> None:
    """Submit groups (``workers`` in flight; a crashed group waits until nothing else runs and
    then runs alone) and store each as it finishes."""
    task = ray.remote(num_cpus=1, max_retries=0)(run_group_task)
    paths, payload = driver_paths(), pickle.dumps(execute)
    in_flight: dict[Any, tuple[Group, bool]] = {}  # task reference -> (group, is a retry)
    crashed: deque[Group] = deque()

    def submit(group: Group, retry: bool) -> None:
        in_flight[task.remote(paths, payload, group)] = (group, retry)

    try:
        while queue or crashed or in_flight:
            if crashed and not in_flight:
                submit(crashed.popleft(), True)
            while not crashed and queue and len(in_flight) < workers:
                submit(queue.popleft(), False)
            ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=WAIT_S)
            for ref in ready:
                group, retry = in_flight.pop(ref)
                results = _task_results(ray, ref, group, retry)
                if results is None:
                    crashed.append(group)
                else:
                    on_done(group, results)
    except BaseException:
        _store_finished(ray, in_flight, on_done)
        _cancel(ray, in_flight)
        raise


def _task_results(ray: ModuleType, ref: Any, group: Group, retry: bool) -> list[RunResult] | None:
    """The group's results; ``None`` when its worker died for the first time (re-run it).
    A task cancelled from inside (``KeyboardInterrupt``) stops the sweep; an ``ImportError``
    of the task, or an error of Ray itself (e.g. the local raylet died), propagates: nothing
    is stored for the group."""
    errors = ray.exceptions
    crash_types = tuple(getattr(errors, name) for name in CRASH_ERRORS)
    try:
        results: list[RunResult] = ray.get(ref)
    except errors.TaskCancelledError as err:
        raise KeyboardInterrupt("a Ray task of the sweep was interrupted") from err
    except (*crash_types, errors.RayTaskError) as err:
        cause = getattr(err, "cause", None)
        crash = err if isinstance(err, crash_types) else cause
        if isinstance(crash, crash_types):
            if not retry:
                return None
            return [RunResult.failure(f"{type(crash).__name__}: {RAY_CRASH_REASON}") for _ in group]
        error = cause if isinstance(cause, BaseException) else err
        if isinstance(error, ImportError):  # the environment, not the run (run_group)
            raise error from err
        return [RunResult.failure(f"{type(error).__name__}: {error}") for _ in group]
    return results


def _store_finished(
    ray: ModuleType, in_flight: dict[Any, tuple[Group, bool]], on_done: OnDone
) -> None:
    """On the way out: store every in-flight group whose task already finished with results
    (the others run again on the next sweep)."""
    refs = list(in_flight)
    if not refs:
        return
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
    for ref in ready:
        group, _retry = in_flight.pop(ref)
        try:
            results = ray.get(ref, timeout=0)
        except Exception:  # a failed or crashed task: not stored, rerun to resume
            continue
        on_done(group, results)


def _cancel(ray: ModuleType, in_flight: dict[Any, tuple[Group, bool]]) -> None:
    """Cancel the tasks still running (their workers are killed; partial work is lost)."""
    for ref in in_flight:
        try:
            ray.cancel(ref, force=True)
        except Exception:  # pragma: no cover - already finished or already cancelled
            pass
    in_flight.clear()
