from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from selfcal.models import MLP

ACTIVATION_FUNCTIONS = {"relu": F.relu, "tanh": torch.tanh, "gelu": F.gelu}


def linear_layers(model: MLP) -> list[nn.Linear]:
    return [m for m in model.body if isinstance(m, nn.Linear)] + [model.head]


@pytest.mark.parametrize("activation", sorted(ACTIVATION_FUNCTIONS))
def test_forward_matches_hand_computation(activation):
    torch.manual_seed(0)
    model = MLP(3, 4, hidden=(5, 6, 7), activation=activation)
    x = torch.randn(10, 3)
    h = x
    *hidden, head = linear_layers(model)
    for layer in hidden:
        h = ACTIVATION_FUNCTIONS[activation](h @ layer.weight.T + layer.bias)
    torch.testing.assert_close(model(x), h @ head.weight.T + head.bias)
    assert [layer.out_features for layer in hidden] == [5, 6, 7]
    assert head.in_features == 7 and head.out_features == 4


@pytest.mark.parametrize("hidden", [(), (8,), (8, 16)])
def test_head_of_features_is_forward(hidden):
    torch.manual_seed(1)
    model = MLP(2, 3, hidden=hidden, dropout=0.5).eval()
    x = torch.randn(20, 2)
    assert isinstance(model.head, nn.Linear)
    features = model.features(x)
    assert features.shape == (20, hidden[-1] if hidden else 2)
    torch.testing.assert_close(model.head(features), model(x), rtol=0, atol=0)


def test_no_hidden_layer_is_logistic_regression():
    model = MLP(4, 3, hidden=())
    x = torch.randn(6, 4)
    assert torch.equal(model.features(x), x)
    torch.testing.assert_close(model(x), x @ model.head.weight.T + model.head.bias)


def test_dropout_acts_in_train_mode_only():
    torch.manual_seed(2)
    model = MLP(2, 2, hidden=(256,), dropout=0.5)
    assert sum(isinstance(m, nn.Dropout) for m in model.modules()) == 1
    assert not any(isinstance(m, nn.Dropout) for m in MLP(2, 2).modules())
    x = torch.randn(4, 2)
    model.train()
    assert not torch.equal(model.features(x), model.features(x))
    model.eval()
    assert torch.equal(model.features(x), model.features(x))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n_features": 0},
        {"n_features": 2.5},
        {"n_classes": 1},
        {"n_classes": True},
        {"hidden": (8, 0)},
        {"hidden": "64"},
        {"activation": "sigmoid"},
        {"dropout": 1.0},
        {"dropout": -0.1},
    ],
)
def test_invalid_arguments_raise(kwargs):
    arguments = {"n_features": 2, "n_classes": 3} | kwargs
    with pytest.raises(ValueError):
        MLP(**arguments)


def test_wrong_feature_count_raises():
    with pytest.raises(ValueError, match="3 features"):
        MLP(3, 2)(torch.zeros(5, 4))
