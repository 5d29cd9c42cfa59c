"""Executors and spec factories shared by the experiments tests.

The executors are top-level functions of an importable module so that they can be pickled
into spawned worker processes. Behaviour is steered by hyperparameters:
``sleep`` (seconds per run), ``fail`` (raise ``ValueError``), ``missing`` (raise
``ImportError``), ``nan`` (a NaN metric),
``crash`` (``os._exit``: the process dies) and ``size`` (artefact length).
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from selfcal.experiments import RunResult, RunSpec

CALLS: list[list[str]] = []
"""Keys of every group the in-process executor received (reset by the tests)."""


def make_specs(n: int, study: str = "s", **hparams: Any) -> list[RunSpec]:
    """``n`` specs over two datasets, two methods and seeds ``0..``."""
    return [
        RunSpec(
            study,
            f"d{i % 2}",
            f"m{(i // 2) % 2}",
            i,
            {"lr": 0.1, **hparams},
            {"name": "mlp", "hidden": [4, 4]},
        )
        for i in range(n)
    ]


def expected(spec: RunSpec) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """The metrics and artefacts :func:`execute` computes for ``spec`` (a pure function)."""
    rng = np.random.default_rng(int(spec.key, 16))
    size = int(spec.hparams.get("size", 5))
    metrics = {"ece": float(rng.uniform()), "accuracy": float(rng.uniform())}
    if spec.hparams.get("nan"):
        metrics["nll"] = float("nan")
    artefacts = {
        "weights": rng.normal(size=(3, size)),
        "confidences": rng.uniform(size=size).astype(np.float32),
        "labels": rng.integers(0, 10, size=size),
    }
    return metrics, artefacts


def run_one(spec: RunSpec) -> RunResult:
    time.sleep(float(spec.hparams.get("sleep", 0.0)))
    if spec.hparams.get("crash"):
        os._exit(3)
    if spec.hparams.get("fail"):
        raise ValueError(f"boom at seed {spec.seed}")
    if spec.hparams.get("missing"):
        raise ImportError(f"seed {spec.seed} needs a package: pip install it")
    metrics, artefacts = expected(spec)
    return RunResult(metrics, artefacts)


def execute(specs: list[RunSpec]) -> list[RunResult]:
    """Executor: runs each spec in turn and logs the call in :data:`CALLS`."""
    CALLS.append([spec.key for spec in specs])
    return [run_one(spec) for spec in specs]


def interrupting_execute(specs: list[RunSpec]) -> list[RunResult]:
    """Executor that behaves like Ctrl-C when it meets ``hparams["interrupt"]``."""
    if any(spec.hparams.get("interrupt") for spec in specs):
        raise KeyboardInterrupt
    return execute(specs)


def wrong_count_execute(specs: list[RunSpec]) -> list[RunResult]:
    """Broken executor: one result too few."""
    return [run_one(spec) for spec in specs][1:]


def pid_then_sleep_execute(specs: list[RunSpec]) -> list[RunResult]:
    """Executor that writes its process id to ``hparams["pid_dir"]`` and then sleeps for
    ``hparams["sleep"]`` seconds (a worker busy in a long group)."""
    folder = specs[0].hparams["pid_dir"]
    partial = os.path.join(folder, f"{os.getpid()}.partial")
    with open(partial, "w") as handle:
        handle.write(str(os.getpid()))
    os.replace(partial, os.path.join(folder, f"{os.getpid()}.pid"))  # a reader never sees it empty
    time.sleep(float(specs[0].hparams["sleep"]))
    return [run_one(spec) for spec in specs]


def warning_execute(specs: list[RunSpec]) -> list[RunResult]:
    """:func:`execute`, warning once per spec with the seed in the text (one kind of warning)."""
    import warnings

    for spec in specs:
        text = f"run {spec.seed}: every validation prediction is correct; ignore this"
        warnings.warn(text, stacklevel=2)
    return execute(specs)


def counting_execute(specs: list[RunSpec]) -> list[RunResult]:
    """Executor that appends one line per run to ``hparams["log"]`` (who executed what) and
    sleeps ``hparams["sleep"]`` seconds a run."""
    with open(specs[0].hparams["log"], "a") as handle:
        handle.writelines(f"{os.getpid()} {spec.key}\n" for spec in specs)
    time.sleep(float(specs[0].hparams["sleep"]) * len(specs))
    return [run_one(spec) for spec in specs]
