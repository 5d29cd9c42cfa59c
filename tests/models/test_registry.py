from __future__ import annotations

import pytest
import torch
from torch import nn

from selfcal.models import MLP, available_models, build_model, init_model, register_model, registry


def parameters(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def test_seeded_build_is_deterministic_and_leaves_global_rng_alone():
    state = torch.random.get_rng_state()
    first = build_model("mlp", n_features=3, n_classes=4, hidden=(8,), seed=7)
    second = build_model("mlp", n_features=3, n_classes=4, hidden=(8,), seed=7)
    other = build_model("mlp", n_features=3, n_classes=4, hidden=(8,), seed=8)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert isinstance(first, MLP)
    assert same(parameters(first), parameters(second))
    assert not same(parameters(first), parameters(other))


def test_seeded_build_equals_construction_after_manual_seed():
    torch.manual_seed(11)
    reference = MLP(2, 3, hidden=(5, 5), activation="tanh")
    built = build_model("mlp", n_features=2, n_classes=3, hidden=[5, 5], activation="tanh", seed=11)
    assert same(parameters(reference), parameters(built))


def test_reinitialising_a_module_equals_building_it():
    model = MLP(2, 3, hidden=(6, 6))
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(0.5)
    init_model(model, seed=3)
    assert same(parameters(model), parameters(init_model(lambda: MLP(2, 3, hidden=(6, 6)), 3)))


def test_module_without_reset_parameters_cannot_be_reinitialised():
    class Raw(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.ones(3))

    with pytest.raises(ValueError, match="reset_parameters"):
        init_model(Raw(), seed=0)


def test_registry_rejects_unknown_and_duplicate_names(monkeypatch):
    monkeypatch.setattr(registry._MODELS, "_entries", dict(registry._MODELS._entries))
    with pytest.raises(ValueError, match="known: .*mlp"):
        build_model("resnet9000")
    with pytest.raises(ValueError, match="already registered"):
        register_model("mlp")(lambda: nn.Linear(1, 2))

    @register_model("tiny")
    def tiny(n_features: int, n_classes: int) -> nn.Module:
        return nn.Linear(n_features, n_classes)

    assert "tiny" in available_models()
    model = build_model("tiny", n_features=3, n_classes=2, seed=0)
    torch.manual_seed(0)
    assert same(parameters(model), parameters(nn.Linear(3, 2)))


def test_bad_factories_and_seeds_raise():
    with pytest.raises(TypeError, match="not an nn.Module"):
        init_model(lambda: 42, seed=0)  # type: ignore[arg-type, return-value]
    with pytest.raises(ValueError, match="seed"):
        build_model("mlp", n_features=2, n_classes=2, seed=-1)
    with pytest.raises(ValueError, match="seed"):
        init_model(lambda: MLP(2, 2), seed=1.5)  # type: ignore[arg-type]
