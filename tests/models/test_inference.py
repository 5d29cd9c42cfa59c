"""``predict_logits``: the one way selfcal runs a model over data."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch import nn

from selfcal.models import build_model, predict_logits
from selfcal.models.inference import PREDICT_BATCH

SRC = Path(__file__).resolve().parents[2] / "src" / "selfcal"

MODELS = [
    ("mlp", {"n_features": 12, "n_classes": 5, "hidden": (64, 64, 64)}, (12,)),
    ("cnn1d", {"n_classes": 10}, (40,)),
    ("cnn2d", {"n_classes": 10}, (1, 8, 8)),
]


@pytest.mark.parametrize(("name", "kwargs", "shape"), MODELS, ids=[m[0] for m in MODELS])
@pytest.mark.parametrize("threads", [1, 2])
def test_chunking_moves_no_number(name, kwargs, shape, threads):
    """The studies' models give bit-identical logits in one batch and in chunks whose size is
    a multiple of 4 (the row blocking of the CPU kernels), so the default batch size is a
    memory bound, never a result; other sizes move the last bits of some rows."""
    model = build_model(name, seed=0, **kwargs)
    x = torch.randn(2500, *shape, generator=torch.Generator().manual_seed(1))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        whole = predict_logits(model, x, batch_size=None)
        for batch in (PREDICT_BATCH, 500, 4096):
            assert torch.equal(predict_logits(model, x, batch), whole)
        assert torch.allclose(predict_logits(model, x, 333), whole, rtol=0, atol=1e-6)
    finally:
        torch.set_num_threads(before)


def assert_same_logits(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal up to float32 rounding: a matrix product of 8 rows and of 50 may round
    differently on CPUs whose kernels block by batch size (AVX-512), so bit equality is
    not what PyTorch promises across batch sizes; a wrong mode, snapshot or forward moves
    the logits by orders of magnitude more."""
    torch.testing.assert_close(actual, expected, rtol=1e-6, atol=1e-6)


def test_eval_mode_no_grad_and_mode_restored():
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 3))
    model.train()
    x = torch.randn(50, 4)
    out = predict_logits(model, x, batch_size=8)
    assert model.training
    assert not out.requires_grad
    model.eval()
    with torch.no_grad():
        assert_same_logits(out, model(x))
    model.train()
    running = model[1].running_mean.clone()
    predict_logits(model, x)
    assert torch.equal(model[1].running_mean, running)  # eval mode: statistics untouched


def test_mode_restored_after_an_error():
    class Fails(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("boom")

    model = Fails().train()
    with pytest.raises(RuntimeError, match="boom"):
        predict_logits(model, torch.zeros(3, 2))
    assert model.training


def test_params_evaluate_a_snapshot_without_loading_it():
    model = build_model("mlp", seed=0, n_features=3, n_classes=4, hidden=(8,))
    other = build_model("mlp", seed=1, n_features=3, n_classes=4, hidden=(8,))
    x = torch.randn(20, 3)
    own = predict_logits(model, x)
    snapshot = dict(other.named_parameters())
    assert_same_logits(predict_logits(model, x, 8, params=snapshot), predict_logits(other, x))
    assert torch.equal(predict_logits(model, x), own)  # the model's own parameters untouched


def test_forward_replaces_the_call_and_out_device():
    model = build_model("mlp", seed=0, n_features=3, n_classes=4, hidden=(8,))
    x = torch.randn(10, 3)
    doubled = predict_logits(model, x, 4, forward=lambda m, c: 2 * m(c), out_device="cpu")
    assert_same_logits(doubled, 2 * predict_logits(model, x))
    with pytest.raises(ValueError, match="params or forward"):
        predict_logits(model, x, params=dict(model.named_parameters()), forward=lambda m, c: c)


@pytest.mark.parametrize("batch", [0, -1, 1.5, "2"])
def test_bad_batch_size(batch):
    model = build_model("mlp", seed=0, n_features=3, n_classes=4, hidden=(8,))
    with pytest.raises(ValueError, match="batch_size"):
        predict_logits(model, torch.zeros(2, 3), batch)


@pytest.mark.parametrize("x", [torch.zeros(0, 3), torch.tensor(1.0)])
def test_empty_input(x):
    model = build_model("mlp", seed=0, n_features=3, n_classes=4, hidden=(8,))
    with pytest.raises(ValueError, match="at least one row"):
        predict_logits(model, x)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_rows_move_to_the_model_and_back():
    model = build_model("mlp", seed=0, n_features=3, n_classes=4, hidden=(8,)).cuda()
    x = torch.randn(2000, 3)
    out = predict_logits(model, x, out_device="cpu")
    assert out.device.type == "cpu"
    assert torch.allclose(out, predict_logits(model.cpu(), x), atol=1e-5)


def test_one_model_over_data_function():
    """Nothing else under ``src/selfcal`` switches a model to eval mode to run it over data:
    the studies, the loop, checkpoints, BO4SC and the pipeline call :func:`predict_logits`."""
    allowed = {
        "models/inference.py",  # the one function
        "pipeline/model_dir.py",  # a loaded network is left in eval mode for the user
        "posthoc/_base.py",  # a calibrator's torch.nn.Module export, returned in eval mode
        "conformal/split.py",  # a conformal predictor's module export, the same
    }
    pattern = re.compile(r"\.eval\(\)|\.train\(False\)")
    offenders = [
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if str(path.relative_to(SRC)) not in allowed and pattern.search(path.read_text())
    ]
    assert offenders == []


def test_params_evaluate_a_template_on_the_meta_device():
    """The BO4SC study's models are templates on ``meta``; the rows go where the params are."""
    real = build_model("mlp", seed=0, n_features=3, n_classes=4, hidden=(8,))
    with torch.device("meta"):
        template = build_model("mlp", n_features=3, n_classes=4, hidden=(8,))
    x = torch.randn(10, 3)
    out = predict_logits(template, x, params=dict(real.named_parameters()))
    assert torch.equal(out, predict_logits(real, x))
