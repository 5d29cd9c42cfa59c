"""Minibatch BO4SC: the hypergradient of a weight table, untouched rows, the full-batch special
case, BatchNorm / dropout / augmentation, Datasets, the weight record and bad input."""

from __future__ import annotations

import copy
import functools
import math
from pathlib import Path

import pytest
import torch
from helpers.bilevel import (
    central_differences,
    classification_data,
    mlp,
    noisy_blobs,
    params_of,
    tanh_net,
)
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from selfcal.bilevel import (
    BO4SC,
    BO4SCBatch,
    BO4SCConfig,
    Implicit,
    OneStepLookahead,
    Unrolled,
    bo4sc_init,
    bo4sc_minibatch_step,
    bo4sc_problem,
    update_running_stats,
)
from selfcal.bilevel._batches import QUANTILE_LEVELS, EpochSampler, as_batch_transform
from selfcal.data.augment import random_crop_flip
from selfcal.optim import SGD, Adam
from selfcal.training.seeding import augmentation_generator

FIXTURE = Path(__file__).parent / "fixtures" / "bo4sc_full_batch_e513caa.pt"


def tiny_batch(rows: torch.Tensor, seed: int = 0) -> tuple[BO4SCBatch, int]:
    """Twelve float64 rows of three blobs; the minibatches ``rows [T, B]``; validation = 16."""
    x, y, x_val, y_val = classification_data(seed, n_train=12)
    return BO4SCBatch(x[rows], y[rows], rows, x_val, y_val), 12


def outer_after_steps(model, batch, config, params, table):
    """``F(w)``: the outer loss after the ``T`` inner steps with the rows' weights from
    ``table``."""
    problem = bo4sc_problem(model, batch, config)
    theta, _ = problem.run_inner(
        params, table[batch.rows], config.inner_optimizer.init(params), batch.rows.shape[0]
    )
    return problem.outer_loss(theta, table[batch.rows])


@pytest.mark.parametrize("optimizer", [SGD(0.3, momentum=0.9), Adam(0.05)])
def test_minibatch_hypergradient_equals_central_differences(optimizer):
    """batch 4 < N = 12, T = 3; row 5 is drawn twice (its derivative is the sum of both), rows
    never drawn have derivative 0 and are not updated."""
    rows = torch.tensor([[0, 5, 7, 2], [5, 9, 1, 3], [11, 4, 8, 10]])
    batch, n = tiny_batch(rows)
    model = tanh_net()
    params = params_of(model)
    config = BO4SCConfig(estimator=Unrolled(3), inner_optimizer=optimizer, weight_lr=0.5, beta=5.0)
    table = torch.linspace(0.2, 0.9, n, dtype=torch.float64)
    expected = central_differences(
        lambda w: outer_after_steps(model, batch, config, params, w), table.clone()
    )
    state = bo4sc_init(params, n, config)
    state = state._replace(weights=table.clone())
    new, info = bo4sc_minibatch_step(model, state, batch, config)
    drawn = torch.unique(rows)
    torch.testing.assert_close(info.rows, drawn)
    torch.testing.assert_close(info.weight_grad, expected[drawn], rtol=1e-6, atol=1e-9)
    untouched = torch.ones(n, dtype=torch.bool)
    untouched[drawn] = False
    assert int(untouched.sum()) == 1 and float(expected[untouched].abs().max()) == 0.0
    assert torch.equal(new.weights[untouched], table[untouched])
    torch.testing.assert_close(
        new.weights[drawn], (table[drawn] - 0.5 * expected[drawn]).clamp(0, 1), rtol=1e-6, atol=1e-9
    )


def test_every_estimator_takes_one_minibatch_per_step():
    rows = torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7]])
    batch, n = tiny_batch(rows)
    model = tanh_net()
    for estimator in (Unrolled(2), OneStepLookahead(2), Implicit(2)):
        config = BO4SCConfig(estimator=estimator, inner_optimizer=SGD(0.1))
        state = bo4sc_init(params_of(model), n, config)
        _, info = bo4sc_minibatch_step(model, state, batch, config)
        assert bool(torch.isfinite(info.weight_grad).all())
        # the one-step estimators reach only the last step's rows
        reached = info.rows[info.weight_grad != 0]
        assert set(reached.tolist()) <= set(range(8))
    config = BO4SCConfig(estimator=Unrolled(3), inner_optimizer=SGD(0.1))
    with pytest.raises(ValueError, match="2 inner losses"):
        bo4sc_minibatch_step(model, bo4sc_init(params_of(model), n, config), batch, config)


def test_full_batch_reproduces_e513caa():
    """``batch_size=None`` is today's BO4SC: the weights, outer losses, weight history and
    parameters of the fixture, saved by the full-batch code at commit e513caa (before minibatch
    BO4SC), are reproduced to float32 rounding. (Bit for bit on the CPU kind that saved it;
    on a CPU with other SIMD kernels -- AVX-512 against AVX2 -- PyTorch sums in another order,
    and 12 outer iterations of unrolled training carry that rounding to about 1e-6.)"""
    golden = torch.load(FIXTURE)

    def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)

    x_train, y_train, x_val, y_val, _ = noisy_blobs()
    for name, extra in {"unrolled": {}, "lookahead": {"estimator": OneStepLookahead(3)}}.items():
        model = mlp()
        fitted = BO4SC(outer_iterations=12, weight_lr=10.0, **extra).fit(
            model, (x_train, y_train), (x_val, y_val)
        )
        expected = golden[name]
        close(fitted.weights_, expected["weights"])
        close(fitted.outer_losses_, expected["outer_losses"])
        close(fitted.weight_history_, expected["history"])
        for key, value in model.named_parameters():
            close(value, expected["params"][key])


def test_only_drawn_rows_change_through_the_estimator_face():
    x_train, y_train, x_val, y_val, _ = noisy_blobs(n_train=300, n_val=60)
    fitted = BO4SC(batch_size=8, inner_steps=2, outer_iterations=1, weight_lr=50.0, seed=0).fit(
        mlp(), (x_train, y_train), (x_val, y_val)
    )
    changed = int((fitted.weights_ != 1.0).sum())
    assert 0 < changed <= 16
    assert fitted.weights_.shape == (300,) and fitted.outer_losses_.shape == (1,)


class BatchNormNet(nn.Module):
    """A convolution, BatchNorm, dropout and a linear head on ``[N, 1, 16]`` sequences."""

    def __init__(self, seed: int = 0, dropout: float = 0.2) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.body = nn.Sequential(
            nn.Conv1d(1, 4, 3, padding=1),
            nn.BatchNorm1d(4),
            nn.ReLU(),
            nn.Flatten(),
            nn.Dropout(dropout),
            nn.Linear(64, 3),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def sequences(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (n,), generator=gen)
    x = torch.randn(n, 1, 16, generator=gen) + y.float().view(-1, 1, 1)
    return x, y


def test_batchnorm_running_stats_and_finite_hypergradients():
    """The differentiated steps leave the running statistics alone; update_running_stats
    moves them exactly as a plain training-mode forward of each batch; the hypergradient is
    finite and not zero."""
    x, y = sequences(64)
    model = BatchNormNet(dropout=0.0)
    rows = EpochSampler(64, 16, torch.Generator().manual_seed(0)).draw(3)
    batch = BO4SCBatch(x[rows], y[rows], rows, x[:20], y[:20])
    config = BO4SCConfig(estimator=Unrolled(3), inner_optimizer=SGD(0.1, momentum=0.9))
    state = bo4sc_init(params_of(model), 64, config)
    buffers = {k: b.clone() for k, b in model.named_buffers()}
    _, info = bo4sc_minibatch_step(model, state, batch, config)
    assert all(torch.equal(b, buffers[k]) for k, b in model.named_buffers())
    assert bool(torch.isfinite(info.weight_grad).all()) and float(info.weight_grad.abs().max()) > 0
    plain = copy.deepcopy(model).train()
    with torch.no_grad():
        for xb in batch.x_train:
            plain(xb)
    update_running_stats(model, state.params, batch.x_train)
    for (key, ours), theirs in zip(model.named_buffers(), plain.buffers(), strict=True):
        assert torch.equal(ours, theirs), key


def test_batchnorm_dropout_augmented_fit_is_seeded_and_finite():
    x, y = sequences(256)
    x_val, y_val = sequences(64, seed=1)

    def jitter(batch: torch.Tensor) -> torch.Tensor:
        return batch + 0.1 * torch.randn_like(batch)

    def fit(seed: int, data=None) -> BO4SC:
        model = BatchNormNet()
        args = data if data is not None else ((x, y), (x_val, y_val))
        return BO4SC(
            batch_size=32,
            val_batch_size=32,
            inner_steps=3,
            outer_iterations=4,
            weight_lr=5.0,
            inner_optimizer=SGD(0.05, 0.9),
            batch_transform=jitter,
            seed=seed,
        ).fit(model, *args)

    first, again, other = fit(3), fit(3), fit(4)
    assert torch.equal(first.weights_, again.weights_)
    assert torch.equal(first.outer_losses_, again.outer_losses_)
    assert not torch.equal(first.weights_, other.weights_)
    assert bool(torch.isfinite(first.weights_).all() & torch.isfinite(first.outer_losses_).all())
    assert int(first.model_.body[1].num_batches_tracked) == 4 * 3
    datasets = fit(3, (TensorDataset(x, y), TensorDataset(x_val, y_val)))
    assert torch.equal(datasets.weights_, first.weights_)


def test_the_training_loops_batch_transform_fits_bo4sc_too():
    """A ``batch_transform(x, generator)`` of :func:`selfcal.training.fit` (here
    :func:`~selfcal.data.augment.random_crop_flip`) augments BO4SC's batches, drawing from the
    run's augmentation generator (seeded from ``seed`` as the loop's): seeded fits repeat, the
    seed changes the draws, and the global generators are left as they were."""
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(96, 1, 4, 4, generator=gen), torch.randint(0, 3, (96,), generator=gen)
    seen: list[int] = []

    def crop_flip(batch: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        seen.append(generator.initial_seed())
        return random_crop_flip(batch, generator, padding=1)

    def fit(seed: int, transform=crop_flip) -> tuple[BO4SC, torch.Tensor]:
        """The fit, and the global generator's next draws after it (seeded 5 before it)."""
        torch.manual_seed(0)
        model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
        torch.manual_seed(5)
        fitted = BO4SC(
            batch_size=16,
            inner_steps=2,
            outer_iterations=3,
            weight_lr=5.0,
            batch_transform=transform,
            seed=seed,
        ).fit(model, (x, y), (x[:24], y[:24]))
        return fitted, torch.rand(2)

    (first, after), (again, _), (other, _), (plain, _) = fit(3), fit(3), fit(4), fit(3, None)
    streams = {augmentation_generator(s, torch.device("cpu")).initial_seed() for s in (3, 4)}
    assert len(seen) == 3 * 3 * 2 and set(seen) == streams  # the augmented fits' 6 batches each
    torch.manual_seed(5)
    assert torch.equal(torch.rand(2), after)  # the global generator is restored after fit
    assert torch.equal(first.weights_, again.weights_)
    assert not torch.equal(first.weights_, other.weights_)
    assert not torch.equal(first.weights_, plain.weights_)


def test_a_one_argument_batch_transform_is_the_older_form():
    """``transform(x)`` (no generator) is still accepted, wrapped to ignore the generator;
    a two-argument transform (or one whose generator is optional) is taken as it is."""
    assert as_batch_transform(None) is None

    def two(batch, generator):
        return batch

    def optional(batch, generator=None):
        return batch

    assert as_batch_transform(two) is two
    assert as_batch_transform(optional) is optional
    crop = functools.partial(random_crop_flip, padding=2)
    assert as_batch_transform(crop) is crop
    calls = []
    wrapped = as_batch_transform(lambda batch: calls.append(batch) or batch + 1)
    out = wrapped(torch.zeros(2), torch.Generator())
    assert torch.equal(out, torch.ones(2)) and len(calls) == 1


def test_an_interrupted_fit_leaves_the_model_as_it_was():
    """Parameters, BatchNorm running statistics and the mode are those from before the fit
    when it raises midway (here the augmentation, on its fourth batch)."""
    x, y = sequences(128)
    model = BatchNormNet().eval()
    before = {k: t.clone() for k, t in model.state_dict().items()}
    calls = []

    def failing(batch: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return batch

    with pytest.raises(KeyboardInterrupt):
        BO4SC(
            batch_size=16,
            inner_steps=3,
            outer_iterations=3,
            batch_transform=failing,
            inner_optimizer=SGD(0.1),
        ).fit(model, (x, y), (x[:32], y[:32]))
    assert len(calls) == 4 and not model.training
    assert all(torch.equal(t, before[k]) for k, t in model.state_dict().items())


def test_weight_record_samples_rows_and_tracks_quantiles():
    x_train, y_train, x_val, y_val, _ = noisy_blobs(n_train=500, n_val=60)
    fitted = BO4SC(
        batch_size=20,
        inner_steps=2,
        outer_iterations=6,
        weight_lr=100.0,
        history_rows=50,
        seed=1,
    ).fit(mlp(), (x_train, y_train), (x_val, y_val))
    assert fitted.weight_history_.shape == (7, 50) and fitted.history_rows_.shape == (50,)
    torch.testing.assert_close(fitted.weight_history_[-1], fitted.weights_[fitted.history_rows_])
    assert fitted.weight_quantiles_.shape == (7, len(QUANTILE_LEVELS))
    ordered = torch.sort(fitted.weights_.double()).values
    ranks = [max(1, math.ceil(q * 500)) for q in QUANTILE_LEVELS]
    exact = torch.floor(ordered[torch.tensor(ranks) - 1] * 1000) / 1000
    torch.testing.assert_close(fitted.weight_quantiles_[-1], exact)
    assert float(fitted.weight_quantiles_[-1, 0]) < 1.0 == float(fitted.weight_quantiles_[0, 0])
    unclipped = BO4SC(
        batch_size=20,
        inner_steps=2,
        outer_iterations=3,
        weight_lr=100.0,
        constraint="none",
        seed=1,
    ).fit(mlp(), (x_train, y_train), (x_val, y_val))
    ordered = torch.sort(unclipped.weights_.double()).values
    torch.testing.assert_close(unclipped.weight_quantiles_[-1], ordered[torch.tensor(ranks) - 1])


def test_inner_lr_schedule_scales_the_inner_steps():
    """A schedule of 1 changes nothing; a schedule that is 0 after the first iteration freezes
    the parameters from then on (the momentum state is carried, but a zero lr moves nothing)."""
    x_train, y_train, x_val, y_val, _ = noisy_blobs(n_train=120, n_val=30)

    def fit(schedule, iterations=3):
        model = mlp()
        BO4SC(
            batch_size=20,
            inner_steps=2,
            outer_iterations=iterations,
            inner_optimizer=SGD(0.1, momentum=0.9),
            inner_lr_schedule=schedule,
            seed=0,
        ).fit(model, (x_train, y_train), (x_val, y_val))
        return params_of(model)

    plain, ones = fit(None), fit(lambda i: 1.0)
    assert all(torch.equal(plain[k], ones[k]) for k in plain)
    first, frozen = fit(None, iterations=1), fit(lambda i: 1.0 if i == 0 else 0.0)
    assert all(torch.equal(first[k], frozen[k]) for k in first)


def test_callback_sees_every_iterate_and_can_stop_the_fit():
    """``callback(i, theta)`` after each outer iteration: the last call's ``theta`` is the fitted
    model's; a fit stopped at iteration 2 equals a 3-iteration fit and records 3 iterations."""
    x_train, y_train, x_val, y_val, _ = noisy_blobs(n_train=120, n_val=30)
    seen = []

    def fit(iterations, callback):
        model = mlp()
        fitted = BO4SC(
            batch_size=20,
            inner_steps=2,
            outer_iterations=iterations,
            weight_lr=100.0,
            seed=0,
            callback=callback,
        ).fit(model, (x_train, y_train), (x_val, y_val))
        return model, fitted

    model, fitted = fit(
        5, lambda i, theta: seen.append((i, {k: v.detach().clone() for k, v in theta.items()}))
    )
    assert [i for i, _ in seen] == [0, 1, 2, 3, 4]
    assert all(torch.equal(seen[-1][1][k], v) for k, v in params_of(model).items())
    assert not torch.equal(seen[0][1]["0.weight"], seen[-1][1]["0.weight"])
    stopped_model, stopped = fit(5, lambda i, theta: i == 2)
    three_model, three = fit(3, None)
    assert stopped.outer_losses_.shape == (3,) and stopped.weight_quantiles_.shape[0] == 4
    assert torch.equal(stopped.weights_, three.weights_)
    assert all(
        torch.equal(v, params_of(three_model)[k]) for k, v in params_of(stopped_model).items()
    )


def test_progress_bar_reports_on_stderr(capsys):
    x_train, y_train, x_val, y_val, _ = noisy_blobs(n_train=60, n_val=20)
    BO4SC(batch_size=10, inner_steps=1, outer_iterations=2, progress=True).fit(
        mlp(), (x_train, y_train), (x_val, y_val)
    )
    assert "BO4SC" in capsys.readouterr().err


class PairsOfThree(Dataset):
    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int):
        return torch.zeros(2), 0, 1


@pytest.mark.parametrize(
    "kwargs, data, match",
    [
        ({"batch_size": 61}, None, "batch_size .61. exceeds the 60 training rows"),
        ({"batch_size": 0}, None, "batch_size must be an integer >= 1"),
        ({"batch_size": 10, "val_batch_size": 21}, None, "val_batch_size .21. exceeds"),
        ({"batch_size": 10, "estimator": Implicit(0)}, None, "at least one inner step"),
        ({"batch_size": 10, "batch_transform": lambda x: x[:, :1]}, None, "batch_transform"),
        ({"history_rows": 0}, None, "history_rows must be an integer >= 1"),
        ({"batch_size": 5}, "datasets", r"\(x, y\) pair"),
        ({}, "mixed", "both as Datasets or both as"),
        ({}, "triple", r"train must be a pair \(x, y\) or a Dataset"),
    ],
)
def test_bad_input_gets_a_clear_error(kwargs, data, match):
    x_train, y_train, x_val, y_val, _ = noisy_blobs(n_train=60, n_val=20)
    args = ((x_train, y_train), (x_val, y_val))
    if data == "datasets":
        args = (PairsOfThree(), PairsOfThree())
    elif data == "triple":
        args = ((x_train, y_train, y_train), (x_val, y_val))
    elif data == "mixed":
        args = (TensorDataset(torch.as_tensor(x_train), torch.as_tensor(y_train)), (x_val, y_val))
    steps = {} if "estimator" in kwargs else {"inner_steps": 1}
    with pytest.raises(ValueError, match=match):
        BO4SC(outer_iterations=1, **steps, **kwargs).fit(mlp(), *args)


@pytest.mark.parametrize("head", [nn.Linear(2, 1), nn.Sequential(nn.Linear(2, 3), nn.Flatten(0))])
def test_a_model_with_the_wrong_output_shape_is_rejected(head):
    x_train, y_train, x_val, y_val, _ = noisy_blobs(n_train=30, n_val=10)
    with pytest.raises(ValueError, match=r"logits of shape \(N, C\)"):
        BO4SC(batch_size=5, outer_iterations=1).fit(head, (x_train, y_train), (x_val, y_val))


def test_dataset_labels_are_checked_batch_by_batch():
    x, y = sequences(40)
    y[7] = 9
    with pytest.raises(ValueError, match="label"):
        BO4SC(batch_size=40, inner_steps=1, outer_iterations=1).fit(
            BatchNormNet(), TensorDataset(x, y), TensorDataset(x, y.clamp(max=2))
        )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_minibatch_fit_on_cuda_matches_the_cpu_closely():
    x, y = sequences(256)
    x_val, y_val = sequences(64, seed=1)
    fits = {}
    for device in ("cpu", "cuda"):
        model = BatchNormNet(dropout=0.0).to(device)
        fits[device] = BO4SC(
            batch_size=32,
            inner_steps=3,
            outer_iterations=4,
            weight_lr=5.0,
            inner_optimizer=SGD(0.05, 0.9),
            seed=0,
        ).fit(model, (x, y), (x_val, y_val))
    assert fits["cuda"].weights_.device.type == "cuda"
    torch.testing.assert_close(fits["cuda"].weights_.cpu(), fits["cpu"].weights_, atol=1e-4, rtol=0)
