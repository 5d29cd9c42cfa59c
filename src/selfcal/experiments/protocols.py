"""What the studies share about their protocols: a fingerprint of every setting that changes a
run's result (part of each run's key, so stored runs of another version are never mixed in),
resolving a stored spec back to its protocol, the single-threaded context executors run in, and
the CIFAR rows that join a study when the data is present locally."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import torch

from selfcal.experiments.spec import RunSpec

P = TypeVar("P")


def settings_fingerprint(settings: Mapping[str, Any]) -> str:
    """First 12 hex digits of the SHA-256 of the settings as sorted JSON."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]


def resolve_protocol(spec: RunSpec, protocols: Mapping[str, P]) -> P:
    """The protocol named in ``spec.hparams``; a spec stored by another version of it (another
    fingerprint) is an error rather than a silent mix of results."""
    protocol = protocols[spec.hparams["protocol"]]
    if spec.hparams["fingerprint"] != protocol.fingerprint():  # type: ignore[attr-defined]
        raise ValueError(f"run {spec.key} was made with another version of protocol "
                         f"{spec.hparams['protocol']!r}; start a new results store")
    return protocol


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run a block with one torch thread, restoring the caller's setting afterwards: sweeps run
    one process per core, and the studies' small matrices gain nothing from threads."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


CIFAR = ("cifar10", "cifar100")
"""Run for real (the papers' full schedule, crop + flip) when ``$SELFCAL_DATA`` holds them;
hours per run on a GPU, so the CPU reproductions leave them out otherwise."""
CIFAR_FOLDERS = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}


def available_cifar() -> tuple[str, ...]:
    """The CIFAR sets whose files are present locally (``$SELFCAL_DATA``); never downloads."""
    from selfcal.data.core import DATA_ENV_VAR

    root = os.environ.get(DATA_ENV_VAR)
    if not root:
        return ()
    return tuple(name for name in CIFAR if (Path(root) / CIFAR_FOLDERS[name]).is_dir())


def sweep_datasets(protocol: Any) -> tuple[str, ...]:
    """What a study's ``protocol`` runs: its own datasets, plus (the ``full`` protocol only)
    the CIFAR sets present locally."""
    return tuple(protocol.datasets) + (available_cifar() if protocol.name == "full" else ())


def augmentation(data: Any) -> Any:
    """RandomCrop(32, padding 4) + horizontal flip, padding with black as the reference code
    (which pads before normalising)."""
    from functools import partial

    from selfcal.data.augment import black_fill, random_crop_flip

    return partial(random_crop_flip, padding=4, fill=black_fill(data))
