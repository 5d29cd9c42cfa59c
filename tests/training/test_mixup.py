"""``fit(..., mixup_alpha=...)``: mixup training drawn from the augmentation generator."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from selfcal.losses import sample_mixup_lambda
from selfcal.models import build_model
from selfcal.training import TrainConfig, fit


def augmentation_generator(seed: int, device: str = "cpu") -> torch.Generator:
    """The generator ``fit`` derives from ``config.seed`` for the batch pipeline."""
    derived = int(np.random.SeedSequence([seed, 1]).generate_state(1, dtype=np.uint64)[0])
    return torch.Generator(device=device).manual_seed(derived)


def noisy(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    return x + 0.5 * torch.randn(x.shape, generator=generator, device=generator.device)


def mlp(seed: int = 0) -> torch.nn.Module:
    return build_model("mlp", n_features=2, n_classes=3, hidden=(8,), seed=seed)


def test_mixup_training_is_deterministic_seeded_and_changes_training(make_blobs, same_params):
    x, y = make_blobs(60, seed=0)
    runs = []
    for seed, alpha in ((0, 1.0), (0, 1.0), (1, 1.0), (0, 0.0)):
        model = mlp()
        rng = torch.random.get_rng_state()
        config = TrainConfig(epochs=3, lr=1e-2, batch_size=16, seed=seed)
        history = fit(model, (x, y), config=config, mixup_alpha=alpha)
        assert torch.equal(torch.random.get_rng_state(), rng)  # caller's RNG untouched
        runs.append((model, history.train_loss))
    assert same_params(runs[0][0], runs[1][0]) and runs[0][1] == runs[1][1]
    assert not same_params(runs[0][0], runs[2][0])  # another seed, other draws
    assert not same_params(runs[0][0], runs[3][0])  # mixing changes the training


@pytest.mark.parametrize("transform", [None, noisy])
def test_alpha_zero_is_plain_training_bit_for_bit(make_blobs, same_params, transform):
    (x, y), val = make_blobs(50, seed=1), make_blobs(30, seed=2)
    config = TrainConfig(
        epochs=4,
        optimizer="sgd",
        lr=0.05,
        batch_size=16,
        seed=3,
        early_stopping=2,
        restore_best=True,
    )
    plain, zero = mlp(1), mlp(1)
    h_plain = fit(plain, (x, y), val, config=config, batch_transform=transform)
    h_zero = fit(zero, (x, y), val, config=config, batch_transform=transform, mixup_alpha=0)
    assert same_params(plain, zero)
    assert h_plain.train_loss == h_zero.train_loss and h_plain.val_nll == h_zero.val_nll


def test_the_loss_seen_is_the_mixup_formula_on_the_batch(make_blobs):
    """One full batch: the recorded training loss is ``lam CE(z, y) + (1 - lam) CE(z, y[pi])``
    with ``z`` the initial model's logits of ``lam x + (1 - lam) x[pi]``."""
    x, y = make_blobs(40, seed=4)
    model = mlp(2)
    initial = copy.deepcopy(model)
    history = fit(model, (x, y), config=TrainConfig(epochs=1, seed=5), mixup_alpha=1.0)

    g = augmentation_generator(5)
    lam = sample_mixup_lambda(1.0, g)
    perm = torch.randperm(40, generator=g)
    with torch.no_grad():
        z = initial(lam * x + (1 - lam) * x[perm])
    ce_a = -torch.log_softmax(z.double(), 1)[torch.arange(40), y].mean()
    ce_b = -torch.log_softmax(z.double(), 1)[torch.arange(40), y[perm]].mean()
    expected = float(lam * ce_a + (1 - lam) * ce_b)
    assert 0 < lam < 1 and not torch.equal(y, y[perm])
    assert math.isclose(history.train_loss[0], expected, rel_tol=1e-6)
    with torch.no_grad():
        unmixed = float(F.cross_entropy(initial(x), y))
    assert not math.isclose(history.train_loss[0], unmixed, rel_tol=1e-3)


def test_training_equals_a_hand_written_mixup_loop(make_blobs, same_params):
    """Transform first, then ``lam`` and the permutation, all from the one derived generator;
    sum-reduced loss, minibatches, SGD."""
    x, y = make_blobs(50, seed=6)
    config = TrainConfig(epochs=2, optimizer="sgd", lr=0.01, batch_size=20, seed=7)
    loss_fn = torch.nn.CrossEntropyLoss(reduction="sum")
    model = mlp(3)
    twin = copy.deepcopy(model)
    fit(model, (x, y), config=config, loss_fn=loss_fn, batch_transform=noisy, mixup_alpha=0.4)

    optimizer = torch.optim.SGD(twin.parameters(), lr=0.01, momentum=0.9)
    order, g = torch.Generator().manual_seed(7), augmentation_generator(7)
    for _ in range(2):
        for batch in torch.randperm(50, generator=order).split(20):
            xb = noisy(x[batch], g)
            lam = sample_mixup_lambda(0.4, g)
            perm = torch.randperm(len(batch), generator=g)
            z = twin(lam * xb + (1 - lam) * xb[perm])
            optimizer.zero_grad()
            (lam * loss_fn(z, y[batch]) + (1 - lam) * loss_fn(z, y[batch][perm])).backward()
            optimizer.step()
    assert same_params(model, twin)


@pytest.mark.parametrize("alpha", [-1.0, float("nan"), float("inf"), True, "1", None])
def test_bad_alpha_raises(make_blobs, alpha):
    x, y = make_blobs(20, seed=0)
    with pytest.raises(ValueError, match="mixup_alpha"):
        fit(mlp(), (x, y), config=TrainConfig(epochs=1), mixup_alpha=alpha)


def test_mixup_needs_floating_point_inputs():
    """Token ids (an embedding model) train plainly but cannot be mixed."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Embedding(3, 4), torch.nn.Flatten(), torch.nn.Linear(8, 3)
        )
    x, y = torch.randint(0, 3, (10, 2)), torch.randint(0, 3, (10,))
    with pytest.raises(ValueError, match="floating-point"):
        fit(model, (x, y), config=TrainConfig(epochs=1), mixup_alpha=1.0)
    fit(model, (x, y), config=TrainConfig(epochs=1))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_mixup_draws_on_the_cuda_generator(make_blobs):
    x, y = make_blobs(40, seed=8)
    config = TrainConfig(epochs=2, lr=1e-2, batch_size=16, device="cuda")
    models = [mlp(4), mlp(4)]
    for model in models:
        fit(model, (x, y), config=config, batch_transform=noisy, mixup_alpha=1.0)
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        assert a.device.type == "cuda" and torch.equal(a, b)
