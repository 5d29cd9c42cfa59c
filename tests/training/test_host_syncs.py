"""Host syncs in a training step: on a GPU, reading a device value on the host (``item()``,
``float(t)``, ``bool(t)``, ``tolist()``, ``numpy()``) waits for every queued kernel. On the CPU
the same reads are counted here with a ``TorchFunctionMode``: a loss step makes none, and an
epoch's reads do not grow with its number of minibatches. Not counted: ``torch.optim``'s reads
of its step counter, a CPU tensor whatever the parameters' device (not a sync). On a GPU the
same tests count the synchronizing calls themselves (``torch.cuda.set_sync_debug_mode``, which
also sees blocking host-to-device copies); they passed on an H200.

One step still reads, and the test pins how often so that it cannot grow unseen: mixup draws
its ``lam`` through scipy's inverse Beta CDF on the host (one read; drawing it on the device
would change every mixup result). The γ-Net meta step reads nothing: its γ are trusted inside
the step (``>= 0`` by construction, finiteness read once an epoch) and its SECE / DECE batch is
built by ``Predictions.trusted``."""

from __future__ import annotations

import os
import sys
import warnings

import pytest
import torch
from torch.overrides import TorchFunctionMode

from selfcal.bilevel import MetaStep
from selfcal.losses import build_loss
from selfcal.models import build_model
from selfcal.training import LossStep, MixupStep, TrainConfig, fit, prepare_run

READS = {
    torch.Tensor.item,
    torch.Tensor.__bool__,
    torch.Tensor.__float__,
    torch.Tensor.__int__,
    torch.Tensor.__index__,
    torch.Tensor.tolist,
    torch.Tensor.numpy,
}


class HostReads(TorchFunctionMode):
    """Counts the tensor-to-host reads made inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        caller = sys._getframe(1).f_code.co_filename
        if func in READS and f"torch{os.sep}optim" not in caller:
            self.count += 1
        return func(*args, **(kwargs or {}))


def _data(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 1, 8, 8, generator=g), torch.randint(3, (n,), generator=g)


STEPS = {
    "ce": (lambda: LossStep(), 0),
    "focal": (lambda: LossStep(build_loss("focal", gamma=3.0)), 0),
    "bsce-gra": (lambda: LossStep(build_loss("bsce-gra", gamma=3.0, norm=2)), 0),
    "mixup": (lambda: MixupStep(alpha=1.0), 1),
    "mixup-focal": (lambda: MixupStep(build_loss("focal", gamma=3.0), alpha=1.0), 1),
    "gamma-net": (lambda: MetaStep(_data(32), method="gamma-net"), 0),
}


class CudaSyncs:
    """Counts the synchronizing CUDA calls made inside it (``torch.cuda.set_sync_debug_mode``:
    device-to-host reads and blocking copies), with where each was made."""

    def __enter__(self) -> CudaSyncs:
        torch.cuda.synchronize()
        self._caught = warnings.catch_warnings(record=True)
        self.warnings = self._caught.__enter__()
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc: object) -> None:
        torch.cuda.set_sync_debug_mode("default")
        self._caught.__exit__(*exc)

    @property
    def count(self) -> int:
        return len(self.syncs)

    @property
    def syncs(self) -> list[str]:
        return [
            f"{w.filename}:{w.lineno}"
            for w in self.warnings
            if "called a synchronizing" in str(w.message)
        ]


DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    ),
]


def counter(device: str) -> HostReads | CudaSyncs:
    """On the CPU the host reads; on a GPU the synchronizing calls themselves."""
    return HostReads() if device == "cpu" else CudaSyncs()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(STEPS))
def test_host_reads_per_step(name, device):
    model = build_model("cnn2d", seed=0, n_classes=3)
    config = TrainConfig(epochs=1, batch_size=16, device=device)
    run = prepare_run(model, _data(64), config=config)
    make, per_step = STEPS[name]
    step = make()
    step.start(run)
    step.start_epoch(0)
    x, y = run.train
    # the step hands its loss the rows of the run's checked labels (prepare_run checked them
    # once), so no loss scans them
    step.step(model, x[:16], y[:16])  # the first step may set things up
    with counter(device) as reads:
        for start in (16, 32, 48):
            loss = step.step(model, x[start : start + 16], y[start : start + 16])
    assert reads.count == 3 * per_step, getattr(reads, "syncs", reads.count)
    assert loss.ndim == 0 and not loss.requires_grad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["ce", "gamma-net"])
def test_an_epoch_reads_the_same_whatever_its_number_of_minibatches(name, device):
    """With the data on the CPU, as a user passes it, in 2 and 8 minibatches of 16 an epoch; the
    γ-Net's 32 meta rows are then passed over 1 and 4 times an epoch."""
    counts, where = [], []
    for n in (32, 128):
        model = build_model("cnn2d", seed=0, n_classes=3)
        config = TrainConfig(epochs=2, batch_size=16, device=device)
        with counter(device) as reads:
            fit(model, _data(n), config=config, step=STEPS[name][0]())
        counts.append(reads.count)
        where.append(getattr(reads, "syncs", None))
    assert counts[0] == counts[1], where
