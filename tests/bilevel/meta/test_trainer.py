"""Training with a meta-learned regulariser (methods §6.4): the meta step (detached γ from the
updated γ-Net in the real step, the reference-code quirk switch), the trainer's options, and
short training runs through the one training loop."""

import copy
import math

import numpy as np
import pytest
import torch
from helpers.bilevel import META_LR_STEP as LR
from helpers.bilevel import tiny_meta_setup
from helpers.training import papers_recipe

from selfcal.bilevel import GammaNet, MetaStep, MetaTrainer, fit_meta, meta_objective
from selfcal.losses import focal_loss
from selfcal.training import TrainConfig, fit, prepare_run


def started_step(model, meta, train, meta_val, *, quirks=False, meta_lr=1e-3):
    """A :class:`MetaStep` started on a plain SGD run (lr ``LR``, no momentum) with ``meta`` as
    its meta module (the tiny set-up's, whose parameters are all active), ready for one step."""
    step = MetaStep(
        meta_val,
        meta_module=meta,
        meta_objective="sece",
        replicate_reference_quirks=quirks,
        meta_lr=meta_lr,
    )
    step.start(prepare_run(model, train, config=TrainConfig(optimizer="sgd", lr=LR, momentum=0.0)))
    assert step.meta_module is meta
    step.start_epoch(0)
    return step


def one_step(quirks: bool):
    model, meta, train, meta_val = tiny_meta_setup("gamma-net")
    started_step(model, meta, train, meta_val, quirks=quirks).step(model, *train)
    return model, meta, train


def test_quirk_switch_changes_backbone_gradient_only_by_the_leak():
    off, on = one_step(False)[0], one_step(True)[0]
    assert not torch.allclose(off.body[0].weight.grad, on.body[0].weight.grad)
    torch.testing.assert_close(off.head.weight.grad, on.head.weight.grad)


def test_real_step_uses_detached_gamma_from_the_updated_gamma_net():
    model, meta, train, meta_val = tiny_meta_setup("gamma-net")
    before = {k: p.detach().clone() for k, p in meta.named_parameters()}
    model, meta, _ = one_step(False)
    assert any(not torch.equal(before[k], p) for k, p in meta.named_parameters())
    meta.zero_grad(set_to_none=True)
    model.zero_grad(set_to_none=True)
    features = model.features(train[0])
    logits = model.head(features)
    head = dict(model.head.named_parameters())
    loss = meta.training_loss(logits, train[1], features=features.detach(), head=head)
    loss.backward()
    assert all(p.grad is None for p in meta.parameters())  # no path into γ-Net
    expected = focal_loss(logits, train[1], meta(features.detach()).detach(), reduction="sum")
    torch.testing.assert_close(loss, expected)
    with torch.no_grad():
        meta.readout.bias.add_(0.3)
    changed = meta.training_loss(logits, train[1], features=features.detach(), head={})
    assert not torch.isclose(changed, loss)


def test_step_returns_the_focal_loss_with_the_updated_gamma_net():
    """The real step's loss uses γ from the γ-Net *after* its Adam step (evaluated once, for
    the finiteness check, and reused), on the train features before the real step."""
    model, meta, train, meta_val = tiny_meta_setup("gamma-net")
    before = copy.deepcopy(model)
    gamma_before = meta(before.features(train[0])).detach()
    step = started_step(model, meta, train, meta_val, meta_lr=0.1)
    value = float(step.step(model, *train))
    torch.testing.assert_close(step.gammas[-1], gamma_before)
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
        MetaTrainer(method="gamma", config=TrainConfig())
    with pytest.raises(ValueError, match="lookahead"):
        MetaTrainer(lookahead="all", replicate_reference_quirks=True, config=TrainConfig())
    with pytest.raises(ValueError, match="meta_lr must be a finite number"):
        MetaStep((torch.zeros(2, 2), torch.zeros(2)), meta_lr=0.0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'gamma'"):
        fit_meta(
            torch.nn.Linear(4, 3),
            (torch.randn(8, 4), torch.randint(0, 3, (8,))),
            None,
            (torch.randn(8, 4), torch.randint(0, 3, (8,))),
            config=TrainConfig(epochs=1),
            gamma=2.0,
        )
    with pytest.raises(ValueError, match="features\\(x\\) and a final nn.Linear"):
        fit(
            torch.nn.Linear(4, 3),
            (torch.randn(8, 4), torch.randint(0, 3, (8,))),
            config=TrainConfig(epochs=1),
            step=MetaStep((torch.randn(8, 4), torch.randint(0, 3, (8,)))),
        )


@pytest.mark.parametrize("method,objective", [("gamma-net", "sece"), ("unit-l2", "dece")])
def test_short_training_run_on_digits(method, objective):
    from selfcal.data import load_dataset
    from selfcal.models import build_model

    data = load_dataset("digits-images", 0)
    half = len(data.val.y) // 2
    model = build_model("cnn2d", seed=0, n_classes=data.n_classes)
    config = papers_recipe(2)
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

    data = load_dataset("mnist1d", 0)
    train, meta = meta_split(data, 0)
    model = build_model("cnn1d", seed=0, n_classes=10)
    config = papers_recipe(5, seed=0)
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
    """``on_epoch(epoch, model, history)`` runs once per epoch with the meta history so far and
    changes nothing (through a :class:`MetaStep` in ``fit`` it can read the γ-Net being
    trained); ``batch_transform`` sees only the training minibatches (never meta-val or
    validation), draws from fit's augmentation generator, and does change the training."""
    from selfcal.data import load_dataset
    from selfcal.models import build_model

    data = load_dataset("digits-images", 0)
    half = len(data.val.y) // 2
    config = papers_recipe(2, seed=3)
    train_pair, val_pair = (data.train.x, data.train.y), (data.val.x[half:], data.val.y[half:])
    meta_val = (data.val.x[:half], data.val.y[:half])

    def train(**hooks):
        model = build_model("cnn2d", seed=0, n_classes=data.n_classes)
        history = fit_meta(model, train_pair, val_pair, meta_val, config=config, **hooks)
        return model, history

    seen = []
    plain, history = train()
    hooked, _ = train(on_epoch=lambda e, m, h: seen.append((e, m.training, len(h.meta_loss))))
    assert seen == [(0, True, 1), (1, True, 2)]
    for a, b in zip(plain.parameters(), hooked.parameters(), strict=True):
        assert torch.equal(a, b)

    calls = []
    step = MetaStep(meta_val)

    def record(epoch, model, _history):
        with torch.no_grad():
            gamma = float(step.meta_module(model.features(data.val.x[half:])).mean())
        calls.append((epoch, model.training, isinstance(step.meta_module, GammaNet), gamma))

    model = build_model("cnn2d", seed=0, n_classes=data.n_classes)
    stepped = fit(model, train_pair, val_pair, config=config, step=step, on_epoch=record)
    assert [c[:3] for c in calls] == [(0, True, True), (1, True, True)]
    assert [c[3] for c in calls] == pytest.approx(list(history.val_gamma_mean), rel=1e-5)
    assert stepped.train_loss == history.train_loss
    assert stepped.val_gamma_mean == history.val_gamma_mean
    for a, b in zip(plain.parameters(), model.parameters(), strict=True):
        assert torch.equal(a, b)  # fit_meta is fit with a MetaStep
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
