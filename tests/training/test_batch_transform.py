"""``fit(..., batch_transform=...)``: train batches only, its own seeded generator, checks."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from selfcal.models import build_model
from selfcal.training import TrainConfig, fit


class RecordingTransform:
    """Identity transform that records the first column (a sample id) of every batch."""

    def __init__(self) -> None:
        self.seen: list[torch.Tensor] = []

    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        assert isinstance(generator, torch.Generator)
        self.seen.append(x[:, 0].clone())
        return x


def noisy(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    return x + 0.5 * torch.randn(x.shape, generator=generator)


def test_transform_sees_every_training_minibatch_and_no_validation_row(make_blobs):
    (x, y), (x_val, y_val) = make_blobs(40, seed=0), make_blobs(30, seed=1)
    ids = torch.cat([torch.arange(40.0)[:, None], x], dim=1)
    val_ids = torch.cat([-1 - torch.arange(30.0)[:, None], x_val], dim=1)  # negative ids
    record = RecordingTransform()
    model = build_model("mlp", n_features=3, n_classes=3, hidden=(8,), seed=0)
    config = TrainConfig(epochs=2, batch_size=16)
    fit(model, (ids, y), (val_ids, y_val), config=config, batch_transform=record)
    assert [len(b) for b in record.seen] == [16, 16, 8] * 2
    for epoch in range(2):
        seen = torch.cat(record.seen[3 * epoch : 3 * epoch + 3])
        assert torch.equal(seen.sort().values, torch.arange(40.0))


def test_training_equals_a_hand_written_loop_with_the_derived_generator(make_blobs, same_params):
    x, y = make_blobs(50, seed=2)
    config = TrainConfig(epochs=3, optimizer="sgd", lr=0.05, batch_size=20, seed=7)
    model = build_model("mlp", n_features=2, n_classes=3, hidden=(8,), seed=1)
    twin = copy.deepcopy(model)
    fit(model, (x, y), config=config, batch_transform=noisy)

    optimizer = torch.optim.SGD(twin.parameters(), lr=0.05, momentum=0.9)
    order = torch.Generator().manual_seed(7)
    seed = int(np.random.SeedSequence([7, 1]).generate_state(1, dtype=np.uint64)[0])
    augment = torch.Generator().manual_seed(seed)
    for _ in range(3):
        for batch in torch.randperm(50, generator=order).split(20):
            optimizer.zero_grad()
            F.cross_entropy(twin(noisy(x[batch], augment)), y[batch]).backward()
            optimizer.step()
    assert same_params(model, twin)


def test_an_identity_transform_changes_nothing(make_blobs, same_params):
    x, y = make_blobs(50, seed=3)
    config = TrainConfig(epochs=3, lr=1e-2, batch_size=16)
    plain = build_model("mlp", n_features=2, n_classes=3, seed=0)
    with_identity = build_model("mlp", n_features=2, n_classes=3, seed=0)
    fit(plain, (x, y), config=config)
    fit(with_identity, (x, y), config=config, batch_transform=lambda batch, g: batch)
    assert same_params(plain, with_identity)


def random_flip(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Mirror each image left-right with probability 1/2 (draws on the generator's device)."""
    mirrored = torch.rand(len(x), generator=generator, device=generator.device) < 0.5
    return torch.where(mirrored[:, None, None, None], x.flip(-1), x)


def images(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 3, (n,), generator=g)


def test_augmented_training_is_deterministic_and_seeded(same_params):
    x, y = images(48, seed=0)
    runs = []
    for seed in (0, 0, 1):
        model = build_model("cnn2d", n_classes=3, seed=5)
        rng = torch.random.get_rng_state()
        config = TrainConfig(epochs=2, lr=1e-2, batch_size=16, seed=seed)
        fit(model, (x, y), config=config, batch_transform=random_flip)
        assert torch.equal(torch.random.get_rng_state(), rng)
        runs.append(model)
    assert same_params(runs[0], runs[1]) and not same_params(runs[0], runs[2])
    unaugmented = build_model("cnn2d", n_classes=3, seed=5)
    fit(unaugmented, (x, y), config=TrainConfig(epochs=2, lr=1e-2, batch_size=16))
    assert not same_params(runs[0], unaugmented)


@pytest.mark.parametrize(
    "transform, match",
    [
        (lambda batch, g: batch[1:], "rows"),
        (lambda batch, g: batch.numpy(), "tensor"),
        ("crop", "callable"),
    ],
)
def test_bad_transforms_raise(make_blobs, transform, match):
    x, y = make_blobs(20, seed=0)
    model = build_model("mlp", n_features=2, n_classes=3, seed=0)
    with pytest.raises(ValueError, match=match):
        fit(model, (x, y), config=TrainConfig(epochs=1), batch_transform=transform)
