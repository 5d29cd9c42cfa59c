"""Meta-learning step on the bilevel engine (spec §5.2, §6.4): hypergradients against float64
central finite differences of an independent plain-autograd lookahead, detached γ in the
real step, the reference-code quirk switch, and a short training run."""

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from selfcal.bilevel import (
    AutogradLookahead,
    GammaNet,
    MetaBatch,
    MetaCalibrationTrainer,
    OneStepLookahead,
    UnitL2,
    fit_meta,
    meta_calibration,
    meta_hypergradient,
    meta_objective,
)
from selfcal.bilevel._tree import tree_leaves
from selfcal.bilevel.meta_calibration import training_loss
from selfcal.losses import focal_loss
from selfcal.models import MLP
from selfcal.training import TrainConfig

LR = 0.3


def tiny_setup(method: str):
    """A 2-layer MLP (4 -> 5 -> head 3), 8 train and 8 meta-val samples, float64, and a meta
    module whose parameters are all active (γ-Net read-out and L2 coefficients non-zero)."""
    torch.manual_seed(0)
    model = MLP(4, 3, hidden=(5,), activation="tanh").double()
    x, xm = torch.randn(8, 4, dtype=torch.float64), torch.randn(8, 4, dtype=torch.float64)
    y, ym = torch.randint(0, 3, (8,)), torch.randint(0, 3, (8,))
    if method == "gamma-net":
        meta = GammaNet(5, 3, tau=0.5).double()
        with torch.no_grad():
            meta.readout.weight.normal_(0, 0.5)
            meta.prototypes.mul_(3)
    else:
        meta = UnitL2(model.head).double()
        with torch.no_grad():
            for p in meta.parameters():
                p.uniform_(0.05, 0.4)
    return model, meta, (x, y), (xm, ym)


def batch_for(model, train, meta_val, with_meta_features=True):
    with torch.no_grad():
        features = model.features(train[0])
        meta_features = model.features(meta_val[0]) if with_meta_features else None
    return MetaBatch(*train, features, *meta_val, meta_features)


def reference_meta_loss(model, meta, train, meta_val, objective, *, whole=False, backbone=None):
    """F = objective(meta-val logits at theta' = theta - LR grad g) by plain torch.autograd
    (create_graph), independent of torch.func and the engine; ``backbone`` overrides the
    body's parameters (for the leak)."""
    params = {k: p.detach().clone() for k, p in model.named_parameters()}
    if backbone is not None:
        params.update(backbone)
    names = list(params) if whole else ["head.weight", "head.bias"]
    for k in names:
        params[k].requires_grad_(True)

    def forward(x, p):
        h = torch.tanh(x @ p["body.0.weight"].T + p["body.0.bias"])
        return h, h @ p["head.weight"].T + p["head.bias"]

    feats, logits = forward(train[0], params)
    fixed_feats = model.features(train[0]).detach()
    if isinstance(meta, GammaNet):
        loss = focal_loss(logits, train[1], meta(fixed_feats), reduction="sum")
    else:
        loss = F.cross_entropy(logits, train[1], reduction="sum") + sum(
            (lam * params[f"head.{k}"] ** 2).sum() for k, lam in meta.named_parameters()
        )
    grads = torch.autograd.grad(loss, [params[k] for k in names], create_graph=True)
    stepped = dict(params)
    stepped.update({k: params[k] - LR * g for k, g in zip(names, grads)})
    return objective(forward(meta_val[0], stepped)[1], meta_val[1])


def central_differences(fn, tensors, eps=1e-6):
    """d fn / d t for every element of every tensor in ``tensors`` (perturbed in place)."""
    out = []
    for t in tensors:
        g = torch.zeros_like(t)
        flat, gflat = t.data.view(-1), g.view(-1)
        for i in range(flat.numel()):
            old = flat[i].item()
            flat[i] = old + eps
            up = float(fn().detach())
            flat[i] = old - eps
            down = float(fn().detach())
            flat[i] = old
            gflat[i] = (up - down) / (2 * eps)
        out.append(g)
    return out


def assert_matches_fd(grads, params, fn):
    expected = central_differences(fn, params)
    flat = torch.cat([g.reshape(-1) for g in grads])
    flat_fd = torch.cat([g.reshape(-1) for g in expected])
    assert flat.abs().max() > 1e-6, "the hypergradient must not be zero"
    torch.testing.assert_close(flat, flat_fd, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize(
    "method,objective",
    [("gamma-net", "sece"), ("gamma-net", "dece"), ("unit-l2", "dece"), ("unit-l2", "ce+dece")],
)
@pytest.mark.parametrize("lookahead", ["head", "all"])
def test_hypergradient_matches_finite_differences(method, objective, lookahead):
    model, meta, train, meta_val = tiny_setup(method)
    fn = meta_objective(objective)
    batch = batch_for(model, train, meta_val, with_meta_features=lookahead == "head")
    result = meta_hypergradient(model, meta, batch, lr=LR, objective=fn, lookahead=lookahead)
    names = [k for k, _ in meta.named_parameters()]
    assert_matches_fd(
        [result.grad[k] for k in names],
        list(meta.parameters()),
        lambda: reference_meta_loss(model, meta, train, meta_val, fn, whole=lookahead == "all"),
    )
    torch.testing.assert_close(
        result.outer_loss,
        reference_meta_loss(model, meta, train, meta_val, fn, whole=lookahead == "all").detach(),
    )


def test_whole_network_and_head_lookahead_differ():
    model, meta, train, meta_val = tiny_setup("gamma-net")
    fn = meta_objective("sece")
    head = meta_hypergradient(
        model, meta, batch_for(model, train, meta_val), lr=LR, objective=fn, lookahead="head"
    )
    whole = meta_hypergradient(
        model, meta, batch_for(model, train, meta_val, False), lr=LR, objective=fn, lookahead="all"
    )
    diff = (head.grad["readout.weight"] - whole.grad["readout.weight"]).abs().max()
    assert diff > 1e-6 * head.grad["readout.weight"].abs().max()


def test_backbone_leak_equals_finite_differences_of_meta_loss_in_backbone():
    model, meta, train, meta_val = tiny_setup("unit-l2")
    fn = meta_objective("dece")
    result = meta_hypergradient(
        model,
        meta,
        batch_for(model, train, meta_val, False),
        lr=LR,
        objective=fn,
        backbone_leak=True,
    )
    backbone = {
        k: p.detach().clone() for k, p in model.named_parameters() if not k.startswith("head.")
    }
    assert_matches_fd(
        [result.grad["backbone"][k] for k in backbone],
        list(backbone.values()),
        lambda: reference_meta_loss(model, meta, train, meta_val, fn, backbone=backbone),
    )
    plain = meta_hypergradient(model, meta, batch_for(model, train, meta_val), lr=LR, objective=fn)
    torch.testing.assert_close(result.grad["meta"], plain.grad)


@pytest.mark.parametrize(
    "method,objective",
    [("gamma-net", "sece"), ("gamma-net", "dece"), ("unit-l2", "dece"), ("unit-l2", "ce+dece")],
)
@pytest.mark.parametrize("leak", [False, True], ids=["plain", "leak"])
def test_autograd_fast_path_equals_the_engine(method, objective, leak):
    """The head lookahead's fast path (plain autograd) against the engine's torch.func
    OneStepLookahead, float64, with and without the reference-code backbone leak."""
    model, meta, train, meta_val = tiny_setup(method)
    batch = batch_for(model, train, meta_val, with_meta_features=not leak)
    kwargs = {"lr": LR, "objective": meta_objective(objective), "backbone_leak": leak}
    fast = meta_hypergradient(model, meta, batch, estimator=AutogradLookahead(), **kwargs)
    engine = meta_hypergradient(model, meta, batch, estimator=OneStepLookahead(), **kwargs)
    assert float(max(g.abs().max() for g in tree_leaves(fast.grad))) > 1e-6
    if leak:
        assert set(fast.grad) == {"meta", "backbone"}
    for got, want in zip(tree_leaves(tuple(fast)), tree_leaves(tuple(engine)), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_head_lookahead_defaults_to_the_fast_path_and_whole_network_to_the_engine(monkeypatch):
    calls = []

    class Spy(AutogradLookahead):
        def __call__(self, *args):
            calls.append(args)
            return super().__call__(*args)

    monkeypatch.setattr(meta_calibration, "AutogradLookahead", Spy)
    model, meta, train, meta_val = tiny_setup("gamma-net")
    fn = meta_objective("sece")
    meta_hypergradient(model, meta, batch_for(model, train, meta_val), lr=LR, objective=fn)
    meta_hypergradient(
        model,
        meta,
        batch_for(model, train, meta_val, False),
        lr=LR,
        objective=fn,
        backbone_leak=True,
    )
    assert len(calls) == 2
    meta_hypergradient(
        model, meta, batch_for(model, train, meta_val, False), lr=LR, objective=fn, lookahead="all"
    )
    assert len(calls) == 2


def one_step(quirks: bool):
    model, meta, train, meta_val = tiny_setup("gamma-net")
    trainer = MetaCalibrationTrainer(
        meta_objective="sece",
        replicate_reference_quirks=quirks,
        config=TrainConfig(optimizer="sgd", lr=LR),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    meta_optimizer = torch.optim.Adam(meta.parameters(), lr=1e-3)
    trainer.step(model, meta, *train, *meta_val, optimizer, meta_optimizer, LR)
    return model, meta, train


def test_quirk_switch_changes_backbone_gradient_only_by_the_leak():
    off, on = one_step(False)[0], one_step(True)[0]
    assert not torch.allclose(off.body[0].weight.grad, on.body[0].weight.grad)
    torch.testing.assert_close(off.head.weight.grad, on.head.weight.grad)


def test_real_step_uses_detached_gamma_from_the_updated_gamma_net():
    model, meta, train, meta_val = tiny_setup("gamma-net")
    before = {k: p.detach().clone() for k, p in meta.named_parameters()}
    model, meta, _ = one_step(False)
    assert any(not torch.equal(before[k], p) for k, p in meta.named_parameters())
    meta.zero_grad(set_to_none=True)
    model.zero_grad(set_to_none=True)
    features = model.features(train[0])
    logits = model.head(features)
    loss = training_loss(
        meta, logits, train[1], features.detach(), dict(model.head.named_parameters())
    )
    loss.backward()
    assert all(p.grad is None for p in meta.parameters())  # no path into γ-Net
    expected = focal_loss(logits, train[1], meta(features.detach()).detach(), reduction="sum")
    torch.testing.assert_close(loss, expected)
    with torch.no_grad():
        meta.readout.bias.add_(0.3)
    changed = training_loss(meta, logits, train[1], features.detach(), {})
    assert not torch.isclose(changed, loss)


def test_step_returns_the_focal_loss_with_the_updated_gamma_net():
    """The real step's loss uses γ from the γ-Net *after* its Adam step (evaluated once, for
    the finiteness check, and reused), on the train features before the real step."""
    model, meta, train, meta_val = tiny_setup("gamma-net")
    before = copy.deepcopy(model)
    trainer = MetaCalibrationTrainer(meta_objective="sece", config=TrainConfig(lr=LR))
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    meta_optimizer = torch.optim.Adam(meta.parameters(), lr=0.1)
    gamma_before = meta(before.features(train[0])).detach()
    value, _, gamma = trainer.step(model, meta, *train, *meta_val, optimizer, meta_optimizer, LR)
    torch.testing.assert_close(gamma, gamma_before)
    with torch.no_grad():
        features = before.features(train[0])
        updated = meta(features)
        expected = focal_loss(before.head(features), train[1], updated, reduction="sum")
        stale = focal_loss(before.head(features), train[1], gamma_before, reduction="sum")
    assert (updated - gamma_before).abs().max() > 1e-3  # the meta step moved γ
    assert value == pytest.approx(float(expected), rel=1e-12)
    assert value != pytest.approx(float(stale), rel=1e-6)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="meta_objective"):
        meta_objective("ece")
    with pytest.raises(ValueError, match="method"):
        MetaCalibrationTrainer(method="gamma", config=TrainConfig())
    with pytest.raises(ValueError, match="lookahead"):
        MetaCalibrationTrainer(
            lookahead="all", replicate_reference_quirks=True, config=TrainConfig()
        )


def test_ce_objective_is_mean_cross_entropy_in_float64():
    """The "FLγ" ablation's meta-objective: mean CE alone, float64, differentiable."""
    g = torch.Generator().manual_seed(0)
    logits, labels = 3 * torch.randn(16, 5, generator=g), torch.randint(0, 5, (16,), generator=g)
    logits.requires_grad_(True)
    value = meta_objective("ce")(logits, labels)
    assert value.dtype == torch.float64
    torch.testing.assert_close(value, F.cross_entropy(logits.double(), labels))
    torch.testing.assert_close(value.float(), F.cross_entropy(logits, labels))
    (grad,) = torch.autograd.grad(value, logits)
    expected = (logits.double().softmax(1) - F.one_hot(labels, 5)) / 16  # d mean CE / d z
    torch.testing.assert_close(grad, expected.float())


@pytest.mark.parametrize("method,objective", [("gamma-net", "sece"), ("unit-l2", "dece")])
def test_short_training_run_on_digits(method, objective):
    from selfcal.data import load_dataset
    from selfcal.models import build_model

    data = load_dataset("digits-images", 0)
    half = len(data.val.y) // 2
    model = build_model("cnn2d", seed=0, n_classes=data.n_classes)
    config = TrainConfig(
        epochs=2,
        optimizer="sgd",
        lr=0.1,
        momentum=0.9,
        weight_decay=5e-4,
        batch_size=128,
        grad_clip=2.0,
    )
    history = fit_meta(
        model,
        (data.train.x, data.train.y),
        (data.val.x[half:], data.val.y[half:]),
        (data.val.x[:half], data.val.y[:half]),
        method=method,
        meta_objective=objective,
        config=config,
    )
    assert history.epochs_run == 2 and len(history.meta_loss) == 2
    assert all(math.isfinite(v) for v in history.train_loss + history.meta_loss)
    assert history.val_accuracy[-1] > 0.3
    if method == "gamma-net":
        stats = history.train_gamma_mean + history.train_gamma_std + history.val_gamma_mean
        assert len(history.val_gamma_std) == 2 and all(math.isfinite(v) for v in stats)
        assert history.val_gamma_std[-1] > 0  # γ varies across samples after training
    else:
        assert history.train_gamma_mean == ()


def test_gamma_net_dece_on_mnist1d_does_not_diverge():
    """Regression: gamma-Net + DECE on MNIST-1D (seed 0, the papers' SGD recipe) produced a NaN
    hypergradient in epoch 4 while the focal weight clamped 1 - p_y at the smallest normal
    float; with the clamp at machine epsilon it trains on."""
    from selfcal.bilevel import fit_meta
    from selfcal.data import load_dataset
    from selfcal.models import build_model
    from selfcal.studies.meta_reg.execute import meta_split
    from selfcal.training import TrainConfig

    data = load_dataset("mnist1d", 0)
    train, meta = meta_split(data, 0)
    model = build_model("cnn1d", seed=0, n_classes=10)
    config = TrainConfig(
        epochs=5,
        optimizer="sgd",
        lr=0.1,
        momentum=0.9,
        weight_decay=5e-4,
        batch_size=128,
        grad_clip=2.0,
        seed=0,
    )
    history = fit_meta(
        model,
        train,
        (data.val.x, data.val.y),
        meta,
        method="gamma-net",
        meta_objective="dece",
        config=config,
    )
    assert history.epochs_run == 5 and all(math.isfinite(g) for g in history.val_gamma_mean)


def test_hooks_on_epoch_and_batch_transform():
    """``on_epoch(epoch, model, meta)`` runs once per epoch with the trained γ-Net and changes
    nothing; ``batch_transform`` sees only the training minibatches (never meta-val or
    validation), draws from fit's augmentation generator, and does change the training."""
    from selfcal.data import load_dataset
    from selfcal.models import build_model

    data = load_dataset("digits-images", 0)
    half = len(data.val.y) // 2
    config = TrainConfig(
        epochs=2,
        optimizer="sgd",
        lr=0.1,
        momentum=0.9,
        weight_decay=5e-4,
        batch_size=128,
        grad_clip=2.0,
        seed=3,
    )

    def train(**hooks):
        model = build_model("cnn2d", seed=0, n_classes=data.n_classes)
        history = fit_meta(
            model,
            (data.train.x, data.train.y),
            (data.val.x[half:], data.val.y[half:]),
            (data.val.x[:half], data.val.y[:half]),
            config=config,
            **hooks,
        )
        return model, history

    calls = []

    def record(epoch, model, meta):
        with torch.no_grad():
            gamma = float(meta(model.features(data.val.x[half:])).mean())
        calls.append((epoch, model.training, isinstance(meta, GammaNet), gamma))

    plain, history = train()
    hooked, _ = train(on_epoch=record)
    assert [c[:3] for c in calls] == [(0, True, True), (1, True, True)]
    assert [c[3] for c in calls] == pytest.approx(list(history.val_gamma_mean), rel=1e-5)
    for a, b in zip(plain.parameters(), hooked.parameters(), strict=True):
        assert torch.equal(a, b)
    sizes, draws = [], []

    def flip(batch, generator):
        sizes.append(len(batch))
        draws.append(float(torch.rand((), generator=generator, device=batch.device)))
        return batch.flip(-1)

    flipped, _ = train(batch_transform=flip)
    n = len(data.train.y)
    assert sorted(sizes) == sorted([128] * (n // 128) * 2 + [n % 128] * 2)
    derived = int(np.random.SeedSequence([3, 1]).generate_state(1, dtype=np.uint64)[0])
    assert draws[0] == float(torch.rand((), generator=torch.Generator().manual_seed(derived)))
    assert not torch.equal(plain.head.weight, flipped.head.weight)
