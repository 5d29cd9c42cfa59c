from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from selfcal.models import MLP, batched_logits, build_model, functional_logits, stack_models


def seeded_mlps(count: int, **kwargs) -> list[nn.Module]:
    arguments = {"n_features": 3, "n_classes": 4, "hidden": (8, 8)} | kwargs
    return [build_model("mlp", seed=s, **arguments) for s in range(count)]


def test_vmapped_logits_equal_a_python_loop():
    models = seeded_mlps(4)
    params, buffers = stack_models(models)
    x = torch.randn(10, 3)
    expected = torch.stack([m(x) for m in models])
    torch.testing.assert_close(batched_logits(models[0], params, x, buffers), expected)
    per_model = torch.randn(4, 10, 3)
    expected = torch.stack([m(xi) for m, xi in zip(models, per_model)])
    got = batched_logits(models[0], params, per_model, shared_input=False)
    torch.testing.assert_close(got, expected)


def test_vmapped_gradients_equal_a_python_loop():
    models = seeded_mlps(3)
    params, buffers = stack_models(models)
    x, y = torch.randn(12, 3), torch.randint(0, 4, (12,))

    def loss(p: dict, b: dict) -> torch.Tensor:
        return F.cross_entropy(functional_logits(models[0], p, x, b), y)

    grads = torch.func.vmap(torch.func.grad(loss))(params, buffers)
    for i, model in enumerate(models):
        model.zero_grad()
        F.cross_entropy(model(x), y).backward()
        for name, p in model.named_parameters():
            torch.testing.assert_close(grads[name][i], p.grad)


def test_functional_logits_use_the_given_parameters():
    template, other = seeded_mlps(2)
    x = torch.randn(5, 3)
    params = {name: p.detach() for name, p in other.named_parameters()}
    torch.testing.assert_close(functional_logits(template, params, x), other(x))
    assert not torch.allclose(template(x), other(x))


def test_buffers_are_stacked_and_used():
    def net(seed: int) -> nn.Module:
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(3, 6), nn.BatchNorm1d(6), nn.Linear(6, 2))
        model(torch.randn(32, 3) * (seed + 1))  # train-mode pass: distinct running stats
        return model.eval()

    models = [net(s) for s in range(3)]
    params, buffers = stack_models(models)
    assert buffers["1.running_mean"].shape == (3, 6)
    x = torch.randn(7, 3)
    expected = torch.stack([m(x) for m in models])
    torch.testing.assert_close(batched_logits(models[0], params, x, buffers), expected)


def test_dropout_randomness_is_forwarded_to_vmap():
    model = MLP(3, 2, hidden=(64,), dropout=0.5).train()
    params, buffers = stack_models([model, model, model])
    x = torch.randn(4, 3)
    same = batched_logits(model, params, x, buffers, randomness="same")
    assert torch.equal(same[0], same[1]) and torch.equal(same[1], same[2])
    different = batched_logits(model, params, x, buffers, randomness="different")
    assert not torch.equal(different[0], different[1])


def test_mismatched_inputs_raise():
    with pytest.raises(ValueError, match="at least one"):
        stack_models([])
    with pytest.raises(ValueError, match="architecture"):
        stack_models([MLP(3, 2, hidden=(4,)), MLP(3, 2, hidden=(5,))])
    with pytest.raises(ValueError, match="train/eval mode"):
        stack_models([MLP(3, 2), MLP(3, 2).eval()])
    model = MLP(3, 2, hidden=(4,))
    params = {name: p for name, p in model.named_parameters() if name != "head.bias"}
    with pytest.raises(ValueError, match="missing .*head.bias"):
        functional_logits(model, params, torch.zeros(1, 3))
    with pytest.raises(ValueError, match="unknown .*typo"):
        functional_logits(
            model, params | {"head.bias": torch.zeros(2), "typo": torch.zeros(1)}, torch.zeros(1, 3)
        )
