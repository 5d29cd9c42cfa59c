"""``TrainConfig(compile=True)`` and ``TrainConfig(autocast="bf16")`` on the CPU: the same
training, to the stated tolerance."""

from __future__ import annotations

import os

import pytest
import torch

import selfcal.metrics as M
from selfcal.bilevel import MetaStep
from selfcal.models import build_model, predict_logits
from selfcal.training import TrainConfig, fit


def _blobs(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(3, (n,), generator=g)
    centres = torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0]])
    return centres[y] + torch.randn(n, 2, generator=g), y


def _train(
    epochs: int = 15, batch_size: int | None = 64, **options: object
) -> tuple[torch.Tensor, tuple[float, float]]:
    """Trained parameters, and the test NLL and accuracy."""
    model = build_model("mlp", seed=0, n_features=2, n_classes=3, hidden=(32, 32))
    if epochs:
        config = TrainConfig(epochs=epochs, batch_size=batch_size, lr=1e-2, seed=0, **options)
        fit(model, _blobs(512, 0), config=config)
    x, y = _blobs(1000, 1)
    z = predict_logits(model, x)
    vector = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    return vector, (float(M.nll(logits=z, labels=y)), float(M.accuracy(logits=z, labels=y)))


def test_bf16_autocast_trains_to_the_same_scores():
    """bfloat16 keeps 8 mantissa bits: one step's update differs from float32's by about 1%,
    and a run's trajectory drifts from the float32 one as under any perturbation; the trained
    model's test NLL stays within 0.02 nat and its accuracy within 1 point."""
    eager, eager_scores = _train()
    mixed, mixed_scores = _train(autocast="bf16")
    assert not torch.equal(mixed, eager)  # it did run in bfloat16
    assert abs(mixed_scores[0] - eager_scores[0]) < 0.02
    assert abs(mixed_scores[1] - eager_scores[1]) <= 0.01


def test_bf16_autocast_step_is_float32_to_one_percent():
    one, _ = _train(epochs=1, batch_size=None, optimizer="sgd")  # Adam's first step is sign(g)
    before, _ = _train(epochs=0, batch_size=None)
    mixed, _ = _train(epochs=1, batch_size=None, optimizer="sgd", autocast="bf16")
    update, mixed_update = one - before, mixed - before
    assert float((mixed_update - update).norm() / update.norm()) < 0.02


def test_compile_gives_the_eager_numbers(monkeypatch):
    """The plumbing, traced by TorchDynamo and AOTAutograd without code generation (seconds);
    ``SELFCAL_SLOW_TESTS=1`` runs TorchInductor's generated code too (minutes)."""
    if os.environ.get("SELFCAL_SLOW_TESTS") != "1":
        compile_module = torch.nn.Module.compile
        monkeypatch.setattr(
            torch.nn.Module,
            "compile",
            lambda self, **kw: compile_module(self, backend="aot_eager", **kw),
        )
    eager, eager_scores = _train()
    compiled, compiled_scores = _train(compile=True)
    torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-5)
    assert abs(compiled_scores[0] - eager_scores[0]) < 1e-5


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@CUDA
def test_on_cuda_compile_gives_the_eager_numbers():
    """TorchInductor's generated Triton kernels against eager CUDA: fused kernels sum in
    another order, so the parameters agree to 1e-3 relative after 120 Adam steps and the test
    NLL to 1e-4 nat."""
    eager, eager_scores = _train(device="cuda")
    compiled, compiled_scores = _train(device="cuda", compile=True)
    torch.testing.assert_close(compiled, eager, rtol=1e-3, atol=1e-4)
    assert abs(compiled_scores[0] - eager_scores[0]) < 1e-4


@CUDA
def test_on_cuda_bf16_autocast_trains_to_the_same_scores():
    eager, eager_scores = _train(device="cuda")
    mixed, mixed_scores = _train(device="cuda", autocast="bf16")
    assert not torch.equal(mixed, eager)  # it did run in bfloat16
    assert abs(mixed_scores[0] - eager_scores[0]) < 0.02
    assert abs(mixed_scores[1] - eager_scores[1]) <= 0.01


def test_options_are_checked():
    with pytest.raises(ValueError, match="autocast"):
        TrainConfig(autocast="fp16")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="compile must be True or False"):
        TrainConfig(compile=1)  # type: ignore[arg-type]


def test_the_meta_step_refuses_them():
    model = build_model("cnn2d", seed=0, n_classes=3)
    x = torch.randn(32, 1, 8, 8)
    y = torch.randint(3, (32,))
    step = MetaStep((x, y), method="gamma-net")
    with pytest.raises(ValueError, match="MetaStep does not support compile= or autocast="):
        fit(model, (x, y), config=TrainConfig(epochs=1, autocast="bf16"), step=step)
