"""``TrainConfig(deterministic=True)``: CUDA's deterministic mode for one run, nothing on CPU."""

from __future__ import annotations

import pytest
import torch

from selfcal.models import build_model
from selfcal.training import TrainConfig, fit
from selfcal.training.loop import deterministic_mode


def _data(n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 3, generator=g), torch.randint(3, (n,), generator=g)


def test_on_the_cpu_it_changes_nothing():
    runs = []
    for deterministic in (False, True):
        model = build_model("mlp", seed=0, n_features=3, n_classes=3, hidden=(8,))
        fit(model, _data(), config=TrainConfig(epochs=3, deterministic=deterministic))
        runs.append(torch.nn.utils.parameters_to_vector(model.parameters()))
    assert torch.equal(runs[0], runs[1])
    assert not torch.are_deterministic_algorithms_enabled()


@pytest.mark.parametrize("value", [1, "yes", None])
def test_it_must_be_a_bool(value):
    with pytest.raises(ValueError, match="deterministic must be True or False"):
        TrainConfig(deterministic=value)


def test_cuda_needs_the_cublas_workspace_setting(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    with (
        pytest.raises(ValueError, match="CUBLAS_WORKSPACE_CONFIG=:4096:8"),
        deterministic_mode(True, torch.device("cuda")),
    ):
        pass


def test_cuda_settings_are_set_inside_and_restored(monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    cudnn = torch.backends.cudnn
    before = (cudnn.deterministic, cudnn.benchmark, torch.are_deterministic_algorithms_enabled())
    with deterministic_mode(True, torch.device("cuda")):
        assert cudnn.deterministic and not cudnn.benchmark
        assert torch.are_deterministic_algorithms_enabled()
    assert (
        cudnn.deterministic,
        cudnn.benchmark,
        torch.are_deterministic_algorithms_enabled(),
    ) == before


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_two_deterministic_cuda_runs_are_bit_identical(monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    runs = []
    for _ in range(2):
        model = build_model("cnn2d", seed=0, n_classes=3)
        x = torch.randn(256, 1, 8, 8, generator=torch.Generator().manual_seed(0))
        y = torch.randint(3, (256,), generator=torch.Generator().manual_seed(1))
        config = TrainConfig(epochs=2, batch_size=32, device="cuda", deterministic=True)
        fit(model, (x, y), config=config)
        runs.append(torch.nn.utils.parameters_to_vector(model.parameters()).cpu())
    assert torch.equal(runs[0], runs[1])
