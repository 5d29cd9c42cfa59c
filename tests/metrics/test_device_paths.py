"""The metrics' paths for large inputs and for non-CPU devices, checked on the CPU: chunked
per-row scores (memory ``O(chunk x C)`` whatever ``N``) and the deterministic one-hot bin sums
that replace ``bincount(weights=)``'s atomics on a GPU."""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import pytest
import torch

import selfcal.metrics as M
import selfcal.recalibration as R
from selfcal import predictions
from selfcal.metrics import binning
from selfcal.predictions import Predictions

GEN = torch.Generator().manual_seed(0)


def _data(n: int = 1000, c: int = 7) -> tuple[torch.Tensor, torch.Tensor]:
    return 3 * torch.randn(n, c, generator=GEN, dtype=torch.float64), torch.randint(
        c, (n,), generator=GEN
    )


@pytest.mark.parametrize("metric", [M.nll, M.brier, M.sece, M.dece])
@pytest.mark.parametrize("kind", ["logits", "probs"])
def test_chunked_per_row_scores_are_bit_identical(monkeypatch, metric, kind):
    """NLL and Brier per row, and SECE's and DECE's soft accuracies."""
    z, y = _data()
    scores_in = z if kind == "logits" else torch.softmax(z, 1)
    whole = metric(**{kind: scores_in, "labels": y})
    monkeypatch.setattr(predictions, "DEVICE_CHUNK_ELEMENTS", 7 * 64)  # 64 rows per chunk
    chunked = metric(**{kind: scores_in, "labels": y})
    assert torch.equal(torch.as_tensor(chunked), torch.as_tensor(whole))


def test_chunked_nll_keeps_its_gradient(monkeypatch):
    z, y = _data(200)
    z.requires_grad_(True)
    (g_whole,) = torch.autograd.grad(M.nll(logits=z, labels=y), z)
    monkeypatch.setattr(predictions, "DEVICE_CHUNK_ELEMENTS", 7 * 16)
    (g_chunked,) = torch.autograd.grad(M.nll(logits=z, labels=y), z)
    assert torch.equal(g_chunked, g_whole)


@pytest.mark.parametrize(
    ("values", "resampled"), [(False, True), (True, False), (True, True)]
)  # counts without weights stay an integer bincount on every device
def test_onehot_bin_sums_equal_the_cpu_sums(monkeypatch, values, resampled):
    """The GPU's deterministic sums (one-hot products, chunked) equal ``bincount`` /
    ``index_add_`` up to rounding."""
    n, n_bins = 5000, 15
    index = torch.randint(n_bins, (n,), generator=GEN)
    x = torch.rand(n, generator=GEN, dtype=torch.float64) if values else None
    weights = torch.randint(3, (4, n), generator=GEN).double() if resampled else None
    monkeypatch.setattr(binning, "CHUNK", 1024)
    onehot = binning._onehot_sum(index, x, n_bins, weights)
    cpu = binning._bin_sum(index, x, n_bins, weights)
    assert onehot.shape == cpu.shape
    torch.testing.assert_close(onehot, cpu, rtol=1e-13, atol=1e-12)


@pytest.mark.parametrize("resampled", [False, True])
@pytest.mark.parametrize("kind", ["logits", "probs"])
def test_classwise_onehot_sums_equal_the_cpu_sums(monkeypatch, resampled, kind):
    """Classwise bins on a GPU (one-hot products over chunks of rows) against the CPU's
    row-order sums, here on the CPU with chunks of 10 rows."""
    z, y = _data(1000, 7)
    pred = (
        Predictions.from_logits(z, y)
        if kind == "logits"
        else Predictions.from_probs(torch.softmax(z, 1), y)
    )
    weights = torch.randint(3, (4, 1000), generator=GEN).double() if resampled else None
    cpu = binning.classwise_bins(pred, 15, weights)
    monkeypatch.setattr(predictions, "DEVICE_CHUNK_ELEMENTS", 7 * 15 * 10)
    device = binning._classwise_onehot_sums(pred, cpu.edges, weights)
    for got, want in zip(device, (cpu.count, cpu.confidence_sum, cpu.accuracy_sum), strict=True):
        assert got.shape == want.shape == ((4,) if resampled else ()) + (7, 15)
        torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-12)


def _flat_classwise_sums(pred: Predictions, n_bins: int, weights):
    """The CPU's classwise sums in one pass over every row, as they were computed before the
    chunks: ``bincount`` over the flat ``(N C)`` entries (class ``j``'s bins offset by ``j M``),
    or per class ``index_add_`` of the resampling weights."""
    p, y, c = pred.probs, pred.labels, pred.n_classes
    edges = binning.uniform_edges(n_bins, p.device)
    index = binning.bin_index(p, edges)
    target = torch.nn.functional.one_hot(y, c).double()
    if weights is None:
        flat = (index + torch.arange(c) * n_bins).reshape(-1)
        sums = [
            torch.bincount(flat, weights=x, minlength=c * n_bins).double().reshape(c, n_bins)
            for x in (None, p.reshape(-1), target.reshape(-1))
        ]
        return tuple(sums)
    sums = torch.zeros(3, c, weights.shape[0], n_bins, dtype=torch.float64)
    for j in range(c):
        for total, x in zip(sums[:, j], (None, p[:, j], target[:, j]), strict=True):
            total.index_add_(1, index[:, j], weights if x is None else weights * x)
    return tuple(sums.transpose(1, 2))


@pytest.mark.parametrize("resampled", [False, True])
@pytest.mark.parametrize("kind", ["logits", "probs"])
def test_chunked_classwise_sums_on_the_cpu_are_one_pass_bit_for_bit(monkeypatch, resampled, kind):
    """The CPU's classwise bins over chunks of 64 rows, added in row order into sums that carry
    over from chunk to chunk, equal the one-pass sums bit for bit (and classwise ECE with them)."""
    z, y = _data(1000, 7)
    scores_in = z if kind == "logits" else torch.softmax(z, 1)
    pred = (
        Predictions.from_logits(z, y) if kind == "logits" else Predictions.from_probs(scores_in, y)
    )
    weights = torch.randint(3, (4, 1000), generator=GEN).double() if resampled else None
    flat = _flat_classwise_sums(pred, 15, weights)
    whole = M.classwise_ece.core(pred, weights)
    chunk = binning.TEMPORARIES * 7 * 64  # 64 rows per chunk
    monkeypatch.setattr(predictions, "DEVICE_CHUNK_ELEMENTS", chunk)
    chunked = binning.classwise_bins(pred, 15, weights)
    for got, want in zip(
        (chunked.count, chunked.confidence_sum, chunked.accuracy_sum), flat, strict=True
    ):
        assert got.shape == want.shape == ((4,) if resampled else ()) + (7, 15)
        assert torch.equal(got, want)
    assert torch.equal(M.classwise_ece.core(pred, weights), whole)


_CPU_MEMORY = """
import sys, warnings
import torch
from selfcal import predictions
predictions.DEVICE_CHUNK_ELEMENTS = 1 << 20  # 8 MiB of float64 a chunk
from selfcal import Predictions
from selfcal.evaluation import METRICS, point_estimates
torch.set_num_threads(1)
n, c = 40_000, 1_000
g = torch.Generator().manual_seed(0)
z, y = 3 * torch.randn(n, c, generator=g), torch.randint(c, (n,), generator=g)
pred = Predictions.from_logits(z, y)
def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))
for key in METRICS:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak restarts from the resident memory now
    before = status("VmRSS:")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        point_estimates(pred, [key])
    print(key, status("VmHWM:") - before)
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads and resets the peak through /proc"
)
def test_every_metric_takes_chunks_not_a_float64_copy_on_the_cpu():
    """The CPU's counterpart of the CUDA memory test: every metric on 40,000 x 1,000 logits with
    8 MiB chunks adds less than a quarter of one float64 copy (305 MiB) to the peak resident
    memory of a fresh process. glibc's mmap threshold is fixed, so that freed blocks leave the
    process and the peak counts what a metric holds at once (its default, dynamic threshold
    keeps freed 8 MiB blocks resident). Before they were chunked, the refinement pair added 317
    MiB here and classwise ECE 1,221 MiB."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    done = subprocess.run(
        [sys.executable, "-c", _CPU_MEMORY], capture_output=True, text=True, env=env, check=True
    )
    added = {key: int(kib) for key, kib in (line.split() for line in done.stdout.splitlines())}
    assert len(added) == 14
    copy_kib = 40_000 * 1_000 * 8 / 1024
    too_big = {key: f"{kib / 1024:.0f} MiB" for key, kib in added.items() if kib > copy_kib / 4}
    assert not too_big, too_big


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_binning_is_deterministic_and_matches_the_cpu():
    z, y = _data(200_000, 10)
    sece_grid = functools.partial(M.sece, method="grid")  # linear binning onto a grid
    for metric in (M.ece, M.classwise_ece, M.kde_ece, M.smooth_ece, sece_grid):
        runs = [metric(logits=z.cuda(), labels=y.cuda()) for _ in range(3)]
        assert all(torch.equal(torch.as_tensor(r), torch.as_tensor(runs[0])) for r in runs)
        assert abs(float(runs[0]) - float(metric(logits=z, labels=y))) < 1e-12


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(
    "metric",
    [
        *(M.nll, M.brier, M.ece, M.mce, M.adaece, M.classwise_ece),
        *(M.sece, M.kde_ece, M.smooth_ece, M.debiased_ece, M.aurc),
        *(R.refinement_loss, R.calibration_loss),
    ],
)
def test_cuda_metrics_take_chunks_not_a_float64_copy(metric):
    """200,000 x 1,000 float32 logits (800 MB): a float64 copy of them would take 1.6 GB; the
    chunked passes stay under half of that whatever N."""
    n, c = 200_000, 1000
    g = torch.Generator(device="cuda").manual_seed(0)
    z = 3 * torch.randn(n, c, device="cuda", generator=g)
    y = torch.randint(c, (n,), device="cuda", generator=g)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    metric(logits=z, labels=y)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - before
    assert extra < n * c * 8 / 2, f"{extra / 2**20:.0f} MiB"


class _ReportsMps(torch.Tensor):
    """A CPU tensor that says it lives on Apple MPS until copied to the CPU: what selfcal sees
    of a tensor on a device without float64, on a machine without one."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    def device(self) -> torch.device:
        return torch.device("mps")

    def cpu(self, *args, **kwargs) -> torch.Tensor:
        return self.as_subclass(torch.Tensor).clone()


def _on_mps(t: torch.Tensor) -> torch.Tensor:
    return torch.Tensor._make_subclass(_ReportsMps, t, t.requires_grad)


@pytest.mark.parametrize("kind", ["logits", "probs"])
def test_a_device_without_float64_is_scored_on_the_cpu(monkeypatch, kind):
    """Scores and labels on MPS (no float64) are copied to the CPU before any float64 is made:
    every metric then equals the CPU's bit for bit, for ``from_logits`` / ``from_probs`` and
    ``trusted``, gradients included. Without the copy the first float64 tensor made on the
    scores' device fails -- what the CPU copy avoids."""
    z, y = _data(300)
    scores_in = z.float() if kind == "logits" else torch.softmax(z, 1)
    build = Predictions.from_logits if kind == "logits" else Predictions.from_probs
    on_cpu, on_mps = build(scores_in, y), build(_on_mps(scores_in), _on_mps(y))
    assert on_mps.device == torch.device("cpu") and type(on_mps.scores) is torch.Tensor
    for metric in (M.ece, M.nll, M.brier, M.adaece, M.classwise_ece, M.sece, M.smooth_ece):
        assert torch.equal(torch.as_tensor(metric(on_mps)), torch.as_tensor(metric(on_cpu)))
    trusted = Predictions.trusted(_on_mps(scores_in), kind, _on_mps(y))
    assert trusted.device == torch.device("cpu") and torch.equal(M.ece(trusted), M.ece(on_cpu))

    leaf = _on_mps(z.clone().requires_grad_(True))
    (grad,) = torch.autograd.grad(M.sece(Predictions.from_logits(leaf, y)), leaf)
    want_leaf = z.clone().requires_grad_(True)
    (want,) = torch.autograd.grad(M.sece(Predictions.from_logits(want_leaf, y)), want_leaf)
    assert torch.equal(grad, want)

    monkeypatch.setattr(predictions, "NO_FLOAT64_DEVICES", frozenset())
    with pytest.raises((NotImplementedError, RuntimeError), match="MPS"):
        build(_on_mps(scores_in), _on_mps(y))
