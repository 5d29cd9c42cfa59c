"""What the studies share about their protocols: a fingerprint of every setting that changes a
run's result (part of each run's key, so stored runs of another version are never mixed in),
resolving a stored spec back to its protocol, and the single-threaded context executors run in."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator, Mapping
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
