"""``build_loss`` by name, and every loss plugged into ``selfcal.training.fit``."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F

import selfcal.losses
from selfcal.losses import (
    BSCELoss,
    DualFocalLoss,
    FocalLoss,
    available_losses,
    build_loss,
    register_loss,
)
from selfcal.models import build_model
from selfcal.training import TrainConfig, fit

REQUIRED = {"focal": {"gamma": 2.0}, "focal-gra": {"gamma": 2.0}, "ls": {"eps": 0.1}}
NAMES = [
    "ce",
    "focal",
    "flsd53",
    "dfl",
    "bsce",
    "brier",
    "mmce",
    "ls",
    "focal-gra",
    "flsd53-gra",
    "dfl-gra",
    "bsce-gra",
    "dfl-gra-partial",
]


def test_the_issue_names_are_registered():
    assert sorted(NAMES) == available_losses()


@pytest.mark.parametrize(
    ("name", "kwargs", "expected"),
    [
        ("bsce-gra", {}, BSCELoss(4, 2, gra=True)),
        ("bsce", {"gamma": 3, "norm": 1}, BSCELoss(3, 1)),
        ("focal-gra", {"gamma": 1}, FocalLoss(1, gra=True)),
        ("dfl", {}, DualFocalLoss(5)),
        ("dfl-gra", {"gamma": 3}, DualFocalLoss(3, gra=True)),
        ("dfl-gra-partial", {}, DualFocalLoss(5, detach_runner_up=True)),
    ],
)
def test_names_build_the_configurations(name, kwargs, expected):
    logits = torch.randn(16, 4, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 4, (16,))
    built = build_loss(name, **kwargs)
    assert repr(built) == repr(expected)
    got = torch.autograd.grad(built(logits, labels), logits)[0]
    want = torch.autograd.grad(expected(logits, labels), logits)[0]
    assert torch.equal(got, want)


@pytest.mark.parametrize("name", NAMES)
def test_every_loss_defaults_to_the_batch_mean(name):
    """Like ``fit``'s default cross-entropy: the default value is the batch sum over ``N``."""
    gen = torch.Generator().manual_seed(NAMES.index(name))
    logits = torch.randn(16, 4, dtype=torch.float64, generator=gen)
    labels = torch.randint(0, 4, (16,), generator=gen)
    options = REQUIRED.get(name, {})
    mean = build_loss(name, **options)(logits, labels)
    total = build_loss(name, **options, reduction="sum")(logits, labels)
    assert build_loss(name, **options).reduction == "mean"
    torch.testing.assert_close(mean, total / 16, rtol=1e-12, atol=0)


def test_every_public_loss_defaults_to_the_mean():
    """Every class and function of ``selfcal.losses`` with a ``reduction`` defaults to "mean"."""
    defaults = {}
    for name in selfcal.losses.__all__:
        parameters = inspect.signature(getattr(selfcal.losses, name)).parameters
        if "reduction" in parameters:
            defaults[name] = parameters["reduction"].default
    assert len(defaults) == 18, sorted(defaults)  # 9 classes and their 9 function twins
    assert set(defaults.values()) == {"mean"}, defaults


def test_build_loss_errors():
    with pytest.raises(ValueError, match="unknown loss 'fl'; known: brier, bsce"):
        build_loss("fl")
    with pytest.raises(ValueError, match="bad arguments for loss 'focal'"):
        build_loss("focal")  # gamma is required
    with pytest.raises(ValueError, match="gra is fixed by the name"):
        build_loss("bsce-gra", gra=False)
    with pytest.raises(ValueError, match="bad arguments"):
        build_loss("ce", gamma=1.0)
    with pytest.raises(ValueError, match="already registered"):
        register_loss("ce")(lambda: None)


def blobs(seed: int, n: int = 300):
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (n,), generator=gen)
    x = 2.0 * F.one_hot(y, 3).float() @ torch.randn(3, 5, generator=gen) + torch.randn(
        n, 5, generator=gen
    )
    return x, y


@pytest.mark.parametrize("name", NAMES)
def test_every_loss_trains_a_model_with_fit(name):
    """The papers' protocol in miniature: SGD, sum reduction, clipping at 2."""
    x, y = blobs(0)
    model = build_model("mlp", n_features=5, n_classes=3, hidden=(16,), seed=0)
    config = TrainConfig(epochs=15, optimizer="sgd", lr=0.01, batch_size=64, grad_clip=2.0)
    loss = build_loss(name, **REQUIRED.get(name, {}), reduction="sum")
    history = fit(model, (x, y), config=config, loss_fn=loss)
    with torch.no_grad():
        accuracy = (model(x).argmax(1) == y).float().mean().item()
    assert len(history.train_loss) == 15
    assert accuracy > 0.8, (name, accuracy)


@pytest.mark.parametrize(
    ("name", "options"), [("ce", {}), ("focal", {"gamma": 2.0}), ("bsce-gra", {}), ("mmce", {})]
)
def test_labels_are_scanned_per_call_except_where_the_caller_checked_them(
    name, options, monkeypatch
):
    """Out-of-range labels are a one-line error; given checked
    :class:`~selfcal._inputs.Labels` (the training loop, which checked every label of its data
    once, passes its steps' losses those) the losses read no label value, so a step never waits
    for the device."""
    from selfcal._inputs import as_labels

    logits = torch.randn(8, 3)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\); row 3 has label 3"):
        build_loss(name, **options)(logits, torch.tensor([0, 1, 2, 3, 0, 1, 2, 0]))
    good = torch.tensor([0, 1, 2, 2, 0, 1, 2, 0])
    expected = build_loss(name, **options)(logits, good)
    checked = as_labels(good, 8, 3)

    def no_scan(*args, **kwargs):
        raise AssertionError("the labels were scanned")

    monkeypatch.setattr(torch, "aminmax", no_scan)
    assert torch.equal(build_loss(name, **options)(logits, checked), expected)
    with pytest.raises(AssertionError, match="scanned"):
        build_loss(name, **options)(logits, good)  # a raw tensor: scanned again
