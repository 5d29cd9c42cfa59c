"""The loop takes exactly the steps a hand-written PyTorch loop takes."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from selfcal.models import MLP, build_model
from selfcal.training import TrainConfig, fit


def parameters(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_full_batch_adam_epoch_is_one_adam_step(make_blobs, same_params):
    x, y = make_blobs(64, seed=0)
    model = build_model("mlp", n_features=2, n_classes=3, hidden=(16,), seed=0)
    twin, start = copy.deepcopy(model), parameters(model)
    fit(model, (x, y), config=TrainConfig(epochs=1, lr=1e-2, weight_decay=1e-3))

    optimizer = torch.optim.Adam(twin.parameters(), lr=1e-2, weight_decay=1e-3)
    F.cross_entropy(twin(x), y).backward()
    grads = [p.grad + 1e-3 * p.detach() for p in twin.parameters()]
    optimizer.step()
    assert same_params(model, twin)
    # Adam's first step in closed form: m_hat = g, v_hat = g^2 -> theta - lr g / (|g| + eps).
    for p, p0, g in zip(model.parameters(), start, grads):
        torch.testing.assert_close(p.detach(), p0 - 1e-2 * g / (g.abs() + 1e-8))


def test_papers_protocol_equals_a_hand_written_loop(make_blobs, same_params):
    """SGD + momentum + weight decay, summed CE, clipping at 2, MultiStepLR after each epoch,
    reshuffled minibatches with the last partial batch kept."""
    x, y = make_blobs(70, seed=1)
    config = TrainConfig(
        epochs=4,
        optimizer="sgd",
        lr=0.05,
        momentum=0.9,
        weight_decay=5e-4,
        batch_size=16,
        milestones=(2,),
        grad_clip=2.0,
        seed=5,
    )
    model = build_model("mlp", n_features=2, n_classes=3, hidden=(16, 16), seed=1)
    twin = copy.deepcopy(model)
    history = fit(model, (x, y), config=config, loss_fn=nn.CrossEntropyLoss(reduction="sum"))

    optimizer = torch.optim.SGD(twin.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, [2], gamma=0.1)
    order = torch.Generator().manual_seed(5)
    losses = []
    for _ in range(4):
        total = 0.0
        for batch in torch.randperm(70, generator=order).split(16):
            optimizer.zero_grad()
            loss = F.cross_entropy(twin(x[batch]), y[batch], reduction="sum")
            loss.backward()
            nn.utils.clip_grad_norm_(twin.parameters(), 2.0)
            optimizer.step()
            total += loss.item() * len(batch)
        scheduler.step()
        losses.append(total / 70)
    assert same_params(model, twin)
    assert history.train_loss == pytest.approx(losses, rel=1e-12)
    assert history.lr == pytest.approx((0.05, 0.05, 0.005, 0.005))


class RecordInputs(nn.Module):
    """Logistic regression on column 1 that records column 0 (a sample id) while training."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(1, 2)
        self.seen: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.seen.append(x[:, 0].long().clone())
        return self.linear(x[:, 1:])


def test_each_minibatch_epoch_visits_every_sample_once():
    n, batch = 50, 16
    x = torch.stack([torch.arange(n, dtype=torch.float32), torch.randn(n)], dim=1)
    model = RecordInputs()
    fit(model, (x, torch.randint(0, 2, (n,))), config=TrainConfig(epochs=3, batch_size=batch))
    assert [len(b) for b in model.seen] == [16, 16, 16, 2] * 3
    epochs = [torch.cat(model.seen[4 * e : 4 * e + 4]) for e in range(3)]
    for ids in epochs:
        assert torch.equal(ids.sort().values, torch.arange(n))
    assert not torch.equal(epochs[0], epochs[1])  # reshuffled every epoch


def test_full_batch_uses_data_order():
    x = torch.stack([torch.arange(9, dtype=torch.float32), torch.randn(9)], dim=1)
    model = RecordInputs()
    fit(model, (x, torch.randint(0, 2, (9,))), config=TrainConfig(epochs=2))
    assert [b.tolist() for b in model.seen] == [list(range(9))] * 2


class ConstantLogits(nn.Module):
    """Logits = a learnable bias row; with loss = mean of logit 0 the gradient is exactly 1."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bias.expand(len(x), 2)


class FirstLogitLoss:
    def __init__(self) -> None:
        self.epochs: list[int] = []

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)

    def __call__(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return logits[:, 0].mean()


def test_lr_drops_after_each_milestone_epoch():
    model, loss = ConstantLogits(), FirstLogitLoss()
    trace: list[float] = []
    config = TrainConfig(epochs=6, optimizer="sgd", lr=0.1, momentum=0.0, milestones=(2, 4))
    history = fit(
        model,
        (torch.zeros(8, 1), torch.zeros(8, dtype=torch.long)),
        config=config,
        loss_fn=loss,
        on_epoch=lambda e, m, h: trace.append(float(m.bias.detach()[0])),
    )
    steps = [a - b for a, b in zip([0.0, *trace], trace)]  # SGD step = lr * gradient (= 1)
    expected = [0.1, 0.1, 0.01, 0.01, 0.001, 0.001]
    assert steps == pytest.approx(expected, rel=1e-5)
    assert history.lr == pytest.approx(expected)
    assert loss.epochs == list(range(6))


def test_gradient_clipping_bounds_the_global_norm(make_blobs):
    x, y = make_blobs(40, seed=2)
    model = MLP(2, 3, hidden=(8,))
    twin, start = copy.deepcopy(model), parameters(model)
    F.cross_entropy(twin(x), y).backward()
    raw = [p.grad.clone() for p in twin.parameters()]
    raw_norm = torch.linalg.vector_norm(torch.cat([g.reshape(-1) for g in raw]))
    clip = 0.1 * float(raw_norm)
    config = TrainConfig(epochs=1, optimizer="sgd", lr=1.0, momentum=0.0, grad_clip=clip)
    fit(model, (x, y), config=config)
    used = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    assert float(torch.linalg.vector_norm(used)) == pytest.approx(clip, rel=1e-5)
    for p, p0, g in zip(model.parameters(), start, raw):
        torch.testing.assert_close(p.detach(), p0 - g * (clip / raw_norm))


def test_clipping_above_the_norm_changes_nothing(make_blobs, same_params):
    x, y = make_blobs(40, seed=3)
    a = MLP(2, 3, hidden=(8,))
    b = copy.deepcopy(a)
    fit(a, (x, y), config=TrainConfig(epochs=3, grad_clip=1e6))
    fit(b, (x, y), config=TrainConfig(epochs=3))
    assert same_params(a, b)
