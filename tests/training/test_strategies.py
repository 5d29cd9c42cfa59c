"""The loop's step strategies: the shortcuts are the strategies, a custom strategy is driven
through every hook in order, and misuse is refused."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from selfcal.exceptions import TrainingDiverged
from selfcal.losses import build_loss
from selfcal.models import build_model
from selfcal.training import (
    History,
    LossStep,
    MixupStep,
    Run,
    TrainConfig,
    fit,
    prepare_run,
)

CONFIG = TrainConfig(epochs=3, optimizer="sgd", lr=0.1, batch_size=16, seed=4)


def model() -> nn.Module:
    return build_model("mlp", seed=0, n_features=2, n_classes=3, hidden=(8,))


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_the_shortcuts_are_the_strategies(make_blobs, same_params, alpha):
    train = make_blobs(60, seed=1)
    loss = build_loss("focal", gamma=2.0)
    shortcut, explicit = model(), model()
    a = fit(shortcut, train, config=CONFIG, loss_fn=loss, mixup_alpha=alpha)
    step = MixupStep(loss, alpha) if alpha else LossStep(loss)
    b = fit(explicit, train, config=CONFIG, step=step)
    assert same_params(shortcut, explicit)
    assert a.train_loss == b.train_loss


class Recording(LossStep):
    """A plain step that records the hooks the loop calls, and reports it in its history."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    def start(self, run: Run) -> None:
        super().start(run)
        self.calls.append(("start", len(run.train[1]), run.validation is not None))

    def start_epoch(self, epoch: int) -> None:
        self.calls.append(("epoch", epoch))

    def step(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.calls.append(("step", len(y)))
        return super().step(model, x, y)

    def end_epoch(self, model: nn.Module, validation: tuple | None) -> None:
        self.calls.append(("end", model.training))

    def history(self, base: History) -> History:
        return History(train_loss=base.train_loss, lr=base.lr, stop_reason=base.stop_reason)


def test_a_custom_step_is_driven_through_every_hook_in_order(make_blobs):
    train, val = make_blobs(40, seed=1), make_blobs(20, seed=2)
    step = Recording()
    history = fit(model(), train, val, config=CONFIG, step=step)
    per_epoch = [("step", 16), ("step", 16), ("step", 8), ("end", True)]
    expected = [("start", 40, True)]
    for epoch in range(3):
        expected += [("epoch", epoch), *per_epoch]
    assert step.calls == expected
    assert history.val_nll == () and len(history.train_loss) == 3  # the step's own history


class NanFromEpochOne(Recording):
    """A step whose loss becomes NaN in epoch 1."""

    def start_epoch(self, epoch: int) -> None:
        super().start_epoch(epoch)
        self.epoch = epoch

    def loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        value = super().loss(model, x, y)
        return value * math.nan if self.epoch >= 1 else value


def test_a_diverging_step_is_reported_with_the_steps_history(make_blobs):
    with pytest.raises(TrainingDiverged, match="epoch 1: the training loss is nan") as caught:
        fit(model(), make_blobs(40, seed=1), config=CONFIG, step=NanFromEpochOne())
    history = caught.value.history
    assert caught.value.epoch == 1 and len(history.train_loss) == 1
    assert history.val_nll == ()  # the step's history() shaped it


def test_misuse_is_refused(make_blobs):
    train = make_blobs(20, seed=1)
    with pytest.raises(ValueError, match="not both"):
        fit(model(), train, config=CONFIG, step=LossStep(), loss_fn=build_loss("ce"))
    with pytest.raises(ValueError, match="not both"):
        fit(model(), train, config=CONFIG, step=LossStep(), mixup_alpha=1.0)
    with pytest.raises(ValueError, match="step must be a TrainStep"):
        fit(model(), train, config=CONFIG, step=lambda m, x, y: 0.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mixup_alpha must be a finite number"):
        MixupStep(None, -1.0)


def test_prepare_run_sets_up_what_fit_trains_with(make_blobs):
    x, y = make_blobs(20, seed=1)
    net = model().double()
    run = prepare_run(net, (x.numpy(), y.numpy()), config=CONFIG)
    assert run.model is net and run.validation is None
    assert run.train[0].dtype == torch.float64 and run.train[1].dtype == torch.int64
    assert isinstance(run.optimizer, torch.optim.SGD)
    assert torch.equal(run.augment(x), x)  # no batch_transform: the identity
    step = LossStep()
    step.start(run)
    before = [p.detach().clone() for p in net.parameters()]
    value = float(step.step(net, *run.train))
    assert math.isfinite(value)
    assert any(not torch.equal(p, q) for p, q in zip(before, net.parameters()))
