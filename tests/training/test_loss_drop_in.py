"""A loss of ``build_loss`` is a drop-in for ``fit``'s default cross-entropy: same reduction
(the batch mean), so the same config trains the same way (the user trial: SGD lr 0.1, batch 128,
no clipping, diverged with the old sum default)."""

from __future__ import annotations

import math

import torch
from helpers.training import blobs

from selfcal.losses import build_loss
from selfcal.models import build_model
from selfcal.training import TrainConfig, fit

CONFIG = TrainConfig(epochs=2, optimizer="sgd", lr=0.1, batch_size=128, seed=0)
DATA = blobs(600, seed=0, classes=3)


def train(loss_fn):
    model = build_model("mlp", n_features=2, n_classes=3, hidden=(32,), seed=0)
    history = fit(model, DATA, config=CONFIG, loss_fn=loss_fn)
    return model, history


def test_build_loss_ce_trains_exactly_like_the_default(same_params):
    """``torch.equal``, not a tolerance: both call ``F.cross_entropy(reduction="mean")`` on the
    same minibatches, so every step is the same floating-point computation."""
    default, default_history = train(None)
    built, built_history = train(build_loss("ce"))
    assert same_params(default, built)
    assert built_history.train_loss == default_history.train_loss


def test_focal_with_the_same_config_does_not_diverge():
    """The old sum default multiplied each step by the batch size (a training loss of ~1e7 in
    epoch 0 here); the mean trains like cross-entropy."""
    model, history = train(build_loss("focal", gamma=2.0))
    assert all(math.isfinite(v) for v in history.train_loss)
    assert history.train_loss[-1] < history.train_loss[0] < math.log(3)
    with torch.no_grad():
        accuracy = (model(DATA[0]).argmax(1) == DATA[1]).float().mean().item()
    assert accuracy > 0.9
    _, summed = train(build_loss("focal", gamma=2.0, reduction="sum"))
    assert summed.train_loss[-1] > 1e6  # the reference reduction needs the recipe's clipping
