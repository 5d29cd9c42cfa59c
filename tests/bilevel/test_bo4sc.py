"""BO4SC: Boltzmann confidence, losses, the functional core and the estimator face."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers.bilevel import classification_data, mlp, noisy_blobs, params_of, tanh_net
from torch import nn
from torch.func import vmap

from selfcal.bilevel import (
    BO4SC,
    Adam,
    BO4SCConfig,
    BO4SCData,
    BO4SCState,
    Unrolled,
    bo4sc_init,
    bo4sc_inner_loss,
    bo4sc_outer_loss,
    bo4sc_step,
    boltzmann_confidence,
)
from selfcal.bilevel._tree import tree_leaves, tree_map
from selfcal.exceptions import NotFittedError


# ------------------------------------------------------------------ Boltzmann operator
@pytest.mark.parametrize(
    "probs, beta, expected, decimals",
    [
        ([0.6, 0.1, 0.1, 0.1, 0.1], 10.0, 0.587, 3),
        ([0.6, 0.1, 0.1, 0.1, 0.1], 5.0, 0.48, 2),
        ([0.5, 0.5], 3.0, 0.5, 12),
        ([0.5, 0.5], 100.0, 0.5, 12),
    ],
)
def test_boltzmann_spec_examples(probs, beta, expected, decimals):
    """Methods §4.2's examples, to the digits it gives."""
    value = boltzmann_confidence(torch.tensor(probs, dtype=torch.float64), beta)
    assert round(float(value), decimals) == expected


def test_boltzmann_limits_bounds_and_gradient():
    gen = torch.Generator().manual_seed(0)
    probs = torch.softmax(3 * torch.randn(50, 4, generator=gen, dtype=torch.float64), dim=1)
    torch.testing.assert_close(boltzmann_confidence(probs, 0.0), probs.mean(1))
    torch.testing.assert_close(boltzmann_confidence(probs, 1e5), probs.amax(1), atol=1e-6, rtol=0)
    for beta in (1.0, 20.0, 50.0):
        value = boltzmann_confidence(probs, beta)
        assert bool((value >= probs.mean(1) - 1e-15).all())
        assert bool((value <= probs.amax(1) + 1e-15).all())
    # d boltz / d p_k = s_k (1 + beta (p_k - boltz)), s = softmax(beta p)
    beta, row = 7.0, probs[0].clone().requires_grad_()
    value = boltzmann_confidence(row, beta)
    (grad,) = torch.autograd.grad(value, row)
    s = torch.softmax(beta * row.detach(), 0)
    torch.testing.assert_close(grad, s * (1 + beta * (row.detach() - value.detach())))


@pytest.mark.parametrize(
    "probs, beta",
    [
        (torch.ones(3) / 3, -1.0),
        (torch.ones(3) / 3, math.inf),
        (torch.ones(3) / 3, torch.ones(2)),
        (np.ones(3) / 3, 1.0),
        (torch.ones(3, 0), 1.0),
    ],
)
def test_boltzmann_bad_input_raises(probs, beta):
    with pytest.raises(ValueError):
        boltzmann_confidence(probs, beta)


# --------------------------------------------------------------------------- losses
def test_losses_follow_the_spec_formulas():
    gen = torch.Generator().manual_seed(1)
    logits = 3 * torch.randn(40, 4, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, 4, (40,), generator=gen)
    w = torch.rand(40, generator=gen, dtype=torch.float64)
    p = np.exp(logits.numpy()) / np.exp(logits.numpy()).sum(1, keepdims=True)
    ce = -np.log(p[np.arange(40), labels.numpy()])
    assert abs(float(bo4sc_inner_loss(logits, labels, w)) - (w.numpy() * ce).sum() / 40) < 1e-12

    beta, eps = 20.0, 1e-6
    s = np.exp(beta * p) / np.exp(beta * p).sum(1, keepdims=True)
    conf = np.clip((s * p).sum(1), eps, 1 - eps)
    correct = (p.argmax(1) == labels.numpy()).astype(float)
    bce = -(correct * np.log(conf) + (1 - correct) * np.log(1 - conf)).mean()
    assert abs(float(bo4sc_outer_loss(logits, labels, beta, eps)) - bce) < 1e-12


def test_outer_loss_has_no_gradient_through_the_correctness_label():
    """Two logit rows with the same probabilities give the same gradient whatever argmax
    decides: the target is a constant."""
    logits = torch.tensor([[2.0, 1.0, 0.0]], dtype=torch.float64, requires_grad=True)
    for label, target in ((0, 1.0), (1, 0.0)):
        (grad,) = torch.autograd.grad(bo4sc_outer_loss(logits, torch.tensor([label]), 5.0), logits)
        conf_logits = logits.detach().clone().requires_grad_()
        conf = boltzmann_confidence(torch.softmax(conf_logits, 1), 5.0)
        bce = -(target * torch.log(conf) + (1 - target) * torch.log1p(-conf)).mean()
        torch.testing.assert_close(grad, torch.autograd.grad(bce, conf_logits)[0])


# ------------------------------------------------------------------ functional core
def small_data(seed=0, dtype=torch.float64):
    return BO4SCData(
        *(
            t.to(dtype) if t.is_floating_point() else t
            for t in classification_data(seed=seed, n_train=30, n_val=20)
        )
    )


def test_zero_weight_lr_reproduces_standard_adam_training():
    """eta_w = 0: w stays 1, so theta follows plain (unweighted mean) CE Adam training."""
    model, data = tanh_net(), small_data()
    config = BO4SCConfig(
        estimator=Unrolled(4), inner_optimizer=Adam(0.05, eps_root=0.0), weight_lr=0.0
    )
    state = bo4sc_init(params_of(model), 30, config)
    reference = tanh_net()
    optim = torch.optim.Adam(reference.parameters(), lr=0.05, foreach=False)
    for _ in range(3):
        state, _ = bo4sc_step(model, state, data, config)
        for _ in range(4):
            optim.zero_grad()
            nn.functional.cross_entropy(reference(data.x_train), data.y_train).backward()
            optim.step()
        for name, p in reference.named_parameters():
            torch.testing.assert_close(state.params[name], p.detach(), atol=1e-12, rtol=0)
    torch.testing.assert_close(state.weights, torch.ones(30, dtype=torch.float64))


def test_functional_core_under_vmap_equals_loop():
    model = tanh_net()
    datasets = [small_data(seed) for seed in range(3)]
    data = BO4SCData(*(torch.stack(parts) for parts in zip(*datasets, strict=True)))
    hyper = {
        "lr": torch.tensor([0.01, 0.05, 0.1], dtype=torch.float64),
        "eta": torch.tensor([1.0, 10.0, 30.0], dtype=torch.float64),
        "beta": torch.tensor([10.0, 20.0, 50.0], dtype=torch.float64),
    }

    def config(lr, eta, beta):
        return BO4SCConfig(
            estimator=Unrolled(3), inner_optimizer=Adam(lr), weight_lr=eta, beta=beta
        )

    def two_steps(state, data_, lr, eta, beta):
        state, _ = bo4sc_step(model, state, data_, config(lr, eta, beta))
        return bo4sc_step(model, state, data_, config(lr, eta, beta))

    states = [
        bo4sc_init(params_of(tanh_net(seed)), 30, config(0.01, 1.0, 10.0)) for seed in range(3)
    ]
    stacked = BO4SCState(
        *(tree_map(lambda *xs: torch.stack(xs), *parts) for parts in zip(*states, strict=True))
    )
    batched = vmap(two_steps)(stacked, data, hyper["lr"], hyper["eta"], hyper["beta"])
    for i in range(3):
        single = two_steps(states[i], datasets[i], *(hyper[k][i] for k in ("lr", "eta", "beta")))
        for got, want in zip(tree_leaves(batched), tree_leaves(single), strict=True):
            torch.testing.assert_close(got[i], want, atol=1e-12, rtol=1e-9)
    assert float(batched[0].weights.std()) > 0  # the weights really moved


# ------------------------------------------------------------------- estimator face
def test_label_noise_gets_low_weight_and_the_outer_loss_falls():
    x_train, y_train, x_val, y_val, flipped = noisy_blobs()
    fitted = BO4SC(outer_iterations=40, weight_lr=10.0).fit(
        mlp(), (x_train, y_train), (x_val, y_val)
    )
    w = fitted.weights_.numpy()
    assert w[flipped].mean() < w[~flipped].mean() - 0.3
    assert bool(((fitted.weight_history_ >= 0) & (fitted.weight_history_ <= 1)).all())
    losses = fitted.outer_losses_.numpy()
    assert losses[-5:].mean() < 0.8 * losses[:5].mean()
    standard = BO4SC(outer_iterations=40, weight_lr=0.0).fit(
        mlp(), (x_train, y_train), (x_val, y_val)
    )
    assert losses[-5:].mean() < 0.8 * standard.outer_losses_.numpy()[-5:].mean()


def test_fit_shapes_in_place_update_and_constraint():
    x_train, y_train, x_val, y_val, _ = noisy_blobs(n_train=60, n_val=30)
    model = mlp()
    before = params_of(model)
    fitted = BO4SC(inner_steps=3, outer_iterations=5, weight_lr=100.0).fit(
        model, (x_train, y_train), (x_val, y_val)
    )
    assert fitted.weights_.shape == (60,)
    assert fitted.weight_history_.shape == (6, 60)
    assert fitted.outer_losses_.shape == (5,)
    torch.testing.assert_close(fitted.weight_history_[0], torch.ones(60))
    torch.testing.assert_close(fitted.weight_history_[-1], fitted.weights_)
    assert float(fitted.weights_.min()) >= 0 and float(fitted.weights_.max()) == 1.0
    assert float(fitted.weights_.min()) < 0.9
    assert any(not torch.equal(before[k], p) for k, p in model.named_parameters())
    unclipped = BO4SC(
        inner_steps=3,
        outer_iterations=5,
        weight_lr=100.0,
        constraint="none",
        record_weights=False,
    ).fit(mlp(), (x_train, y_train), (x_val, y_val))
    assert unclipped.weight_history_ is None
    assert float(unclipped.weights_.max()) > 1


def test_predict_confidence_smooth_and_hard():
    x_train, y_train, x_val, y_val, _ = noisy_blobs(n_train=60, n_val=30)
    model = mlp()
    fitted = BO4SC(inner_steps=2, outer_iterations=2, beta=10.0).fit(
        model, (x_train, y_train), (x_val, y_val)
    )
    smooth, hard = fitted.predict_confidence(x_val), fitted.predict_confidence(x_val, False)
    probs = torch.softmax(model(torch.as_tensor(x_val)), 1).detach()
    torch.testing.assert_close(hard, probs.amax(1))
    torch.testing.assert_close(smooth, boltzmann_confidence(probs, 10.0))
    assert bool((smooth <= hard + 1e-6).all() & (smooth >= 1 / 3 - 1e-6).all())


def test_seed_makes_a_random_model_reproducible():
    x_train, y_train, x_val, y_val, _ = noisy_blobs(n_train=40, n_val=20)

    def fit(seed):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3))
        return (
            BO4SC(inner_steps=2, outer_iterations=3, seed=seed)
            .fit(model, (x_train, y_train), (x_val, y_val))
            .weights_
        )

    torch.testing.assert_close(fit(5), fit(5), atol=0, rtol=0)
    assert not torch.equal(fit(5), fit(6))


@pytest.mark.parametrize(
    "kwargs, data_change, match",
    [
        ({"inner_steps": 5, "estimator": Unrolled(5)}, {}, "not both"),
        ({"inner_lr": 0.1, "inner_optimizer": Adam(0.1)}, {}, "not both"),
        ({"constraint": "sigmoid"}, {}, "constraint"),
        ({"outer_iterations": 0}, {}, "outer_iterations"),
        ({"weight_lr": -1.0}, {}, "weight_lr"),
        ({"beta": -2.0}, {}, "beta"),
        ({"initial_weight": 1.5}, {}, "initial_weight"),
        ({}, {"y_train": np.zeros(9, dtype=int)}, "length"),
        ({}, {"y_val": np.full(10, 3)}, r"\[0, 3\)"),
        ({}, {"x_train": np.full((10, 2), np.nan)}, "NaN"),
        ({}, {"x_val": np.zeros((10, 3))}, "rows have shape"),
    ],
)
def test_fit_rejects_bad_input(kwargs, data_change, match):
    data = {
        "x_train": np.zeros((10, 2)),
        "y_train": np.zeros(10, dtype=int),
        "x_val": np.zeros((10, 2)),
        "y_val": np.zeros(10, dtype=int),
    }
    data.update(data_change)
    with pytest.raises(ValueError, match=match):
        BO4SC(outer_iterations=kwargs.pop("outer_iterations", 1), **kwargs).fit(
            mlp(), (data["x_train"], data["y_train"]), (data["x_val"], data["y_val"])
        )


def test_predict_before_fit_raises():
    with pytest.raises(NotFittedError):
        BO4SC().predict_confidence(np.zeros((2, 2)))


def test_fit_rejects_a_model_without_class_logits():
    x = np.zeros((10, 2))
    with pytest.raises(ValueError, match="C >= 2"):
        BO4SC(outer_iterations=1).fit(
            nn.Linear(2, 1), (x, np.zeros(10, dtype=int)), (x, np.zeros(10, dtype=int))
        )
