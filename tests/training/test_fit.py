"""Stopping, restoring, determinism, divergence, validation and prediction."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from selfcal.exceptions import TrainingDiverged
from selfcal.models import MLP, build_model
from selfcal.training import History, TrainConfig, fit, predict_logits


def overfitting_problem(seed: int = 0):
    """Separable training data (weights grow without bound under CE) and a validation set
    with 20% flipped labels: validation NLL first falls, then rises with the confidence."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(200, 2, generator=g)
    y = (x[:, 0] > 0).long()
    x_val = torch.randn(200, 2, generator=g)
    y_val = (x_val[:, 0] > 0).long()
    flip = torch.rand(200, generator=g) < 0.2
    return (x, y), (x_val, torch.where(flip, 1 - y_val, y_val))


def test_early_stopping_stops_and_restores_the_best_epoch(same_params):
    train, val = overfitting_problem()
    config = TrainConfig(epochs=400, lr=0.05, early_stopping=5, restore_best=True)
    model = build_model("mlp", n_features=2, n_classes=2, hidden=(), seed=0)
    history = fit(model, train, val, config=config)

    best = history.best_epoch
    assert history.stop_reason == "early_stopping" and history.restored_best
    assert 0 < best < 395 and history.epochs_run == best + 6
    assert history.val_nll[best] == min(history.val_nll)
    assert all(v >= history.val_nll[best] for v in history.val_nll[best + 1 :])
    logits = predict_logits(model, val[0]).double()
    assert float(F.cross_entropy(logits, val[1])) == pytest.approx(history.val_nll[best], 1e-12)
    rerun = build_model("mlp", n_features=2, n_classes=2, hidden=(), seed=0)
    fit(rerun, train, config=TrainConfig(epochs=best + 1, lr=0.05))
    assert same_params(model, rerun)


def test_best_by_accuracy_restores_the_first_most_accurate_epoch(same_params):
    """The reference code's checkpoint: highest validation accuracy (first of equals), here
    later than the NLL optimum, when the model has grown over-confident."""
    train, val = overfitting_problem()
    model = build_model("mlp", n_features=2, n_classes=2, hidden=(), seed=0)
    config = TrainConfig(epochs=120, lr=0.05, restore_best=True, best_by="accuracy")
    history = fit(model, train, val, config=config)
    best = history.best_epoch
    assert history.val_accuracy[best] == max(history.val_accuracy)
    assert all(a < history.val_accuracy[best] for a in history.val_accuracy[:best])
    assert best != int(np.argmin(history.val_nll))
    rerun = build_model("mlp", n_features=2, n_classes=2, hidden=(), seed=0)
    fit(rerun, train, config=TrainConfig(epochs=best + 1, lr=0.05))
    assert same_params(model, rerun)
    with pytest.raises(ValueError, match="best_by"):
        TrainConfig(best_by="loss")


@pytest.mark.parametrize("best_by", ["refinement", "ece"])
def test_best_by_refinement_or_ece_restores_the_first_lowest_epoch(same_params, best_by):
    """With ``best_by="refinement"`` every epoch records the refinement loss (the validation
    NLL after temperature scaling fitted on that epoch's validation predictions,
    ``selfcal.recalibration.refinement_loss``) and the checkpoint is chosen by it (Berta et al.,
    2025); other rules do not pay for it. ``"ece"`` chooses by the ECE."""
    from selfcal import Predictions
    from selfcal.recalibration import refinement_loss

    train, val = overfitting_problem()
    model = build_model("mlp", n_features=2, n_classes=2, hidden=(), seed=0)
    config = TrainConfig(epochs=60, lr=0.05, restore_best=True, best_by=best_by)
    history = fit(model, train, val, config=config)
    series = history.val_refinement if best_by == "refinement" else history.val_ece
    best = history.best_epoch
    assert len(series) == history.epochs_run == 60
    assert series[best] == min(series) and all(v > series[best] for v in series[:best])
    if best_by == "ece":
        assert history.val_refinement == ()
        return
    logits = predict_logits(model, val[0]).double()
    after_ts = refinement_loss(Predictions.from_logits(logits, val[1]))
    assert float(after_ts) == pytest.approx(history.val_refinement[best], rel=1e-9)
    assert all(r <= n + 1e-12 for r, n in zip(history.val_refinement, history.val_nll))


def test_without_restore_the_last_parameters_stay(same_params):
    train, val = overfitting_problem()
    model = build_model("mlp", n_features=2, n_classes=2, hidden=(), seed=0)
    history = fit(model, train, val, config=TrainConfig(epochs=400, lr=0.05, early_stopping=5))
    rerun = build_model("mlp", n_features=2, n_classes=2, hidden=(), seed=0)
    fit(rerun, train, config=TrainConfig(epochs=history.epochs_run, lr=0.05))
    assert not history.restored_best and same_params(model, rerun)


def test_validation_numbers_are_the_metrics_of_the_model(make_blobs):
    train, val = make_blobs(100, seed=0), make_blobs(80, seed=1)
    model = MLP(2, 3, hidden=(8,))
    seen = []
    history = fit(
        model,
        train,
        val,
        config=TrainConfig(epochs=3, lr=1e-2),
        on_epoch=lambda e, m, h: seen.append(predict_logits(m, val[0]).double()),
    )
    for logits, nll_value, acc in zip(seen, history.val_nll, history.val_accuracy):
        assert nll_value == pytest.approx(float(F.cross_entropy(logits, val[1])), rel=1e-12)
        assert acc == pytest.approx(float((logits.argmax(1) == val[1]).double().mean()))
    assert len(history.val_ece) == 3 and all(0 <= e <= 1 for e in history.val_ece)
    assert len(history.epoch_time) == 3 and history.wall_time >= sum(history.epoch_time)


def test_callback_sees_the_history_and_can_stop():
    seen: list[int] = []

    def stop_at_two(epoch: int, model, history: History) -> bool:
        seen.append(history.epochs_run)
        return epoch == 2

    history = fit(MLP(2, 2), overfitting_problem()[0], config=TrainConfig(), on_epoch=stop_at_two)
    assert seen == [1, 2, 3] and history.stop_reason == "callback" and history.epochs_run == 3
    assert history.best_epoch is None and history.val_nll == ()


def test_mlp_learns_a_separable_nonlinear_problem(make_xor):
    model = build_model("mlp", n_features=2, n_classes=2, hidden=(32, 32), seed=0)
    fit(model, make_xor(300, seed=0), config=TrainConfig(epochs=150, lr=1e-2))
    x_test, y_test = make_xor(1000, seed=1)
    accuracy = (predict_logits(model, x_test).argmax(1) == y_test).float().mean()
    assert accuracy > 0.95


def test_same_seed_gives_bit_identical_parameters(make_blobs, same_params):
    data = make_blobs(90, seed=4)
    config = TrainConfig(epochs=4, optimizer="sgd", lr=0.05, batch_size=16, seed=3)
    start = MLP(2, 3, hidden=(16,), dropout=0.3)
    runs = [copy.deepcopy(start) for _ in range(3)]
    rng_state = torch.random.get_rng_state()
    fit(runs[0], data, config=config)
    fit(runs[1], data, config=config)
    fit(runs[2], data, config=TrainConfig(epochs=4, optimizer="sgd", lr=0.05, batch_size=16))
    assert torch.equal(torch.random.get_rng_state(), rng_state)  # global RNG untouched
    assert same_params(runs[0], runs[1])
    assert not same_params(runs[0], runs[2])


class NanFromEpoch:
    def __init__(self, epoch: int) -> None:
        self.bad_epoch, self.epoch = epoch, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __call__(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(logits, labels)
        return loss * float("nan") if self.epoch >= self.bad_epoch else loss


def test_nan_loss_raises_naming_the_epoch(make_blobs):
    with pytest.raises(TrainingDiverged, match="epoch 3") as caught:
        fit(
            MLP(2, 3),
            make_blobs(30, seed=0),
            config=TrainConfig(epochs=10),
            loss_fn=NanFromEpoch(3),
        )
    assert isinstance(caught.value, ValueError)
    assert caught.value.epoch == 3 and caught.value.history.epochs_run == 3


def test_huge_learning_rate_diverges(make_blobs):
    config = TrainConfig(epochs=50, optimizer="sgd", lr=1e6)
    with pytest.raises(TrainingDiverged, match="diverged in epoch"):
        fit(MLP(2, 3), make_blobs(60, seed=0), config=config)


def test_numpy_inputs_are_accepted_and_cast_to_the_model_dtype(make_blobs, same_params):
    x, y = make_blobs(40, seed=0)
    a = MLP(2, 3, hidden=(4,))
    b = copy.deepcopy(a)
    fit(a, (x, y), config=TrainConfig(epochs=2))
    fit(b, (x.double().numpy(), y.numpy()), config=TrainConfig(epochs=2))
    assert same_params(a, b)


@pytest.mark.parametrize(
    "train, message",
    [
        ((torch.zeros(5, 2), torch.zeros(4, dtype=torch.long)), "one label per row"),
        ((torch.zeros(5, 2), torch.full((5,), 3)), r"\[0, 3\); row 0 has label 3"),
        ((torch.zeros(5, 2), torch.tensor([0, 1, -1, 0, 1])), "row 2 has label -1"),
        ((torch.zeros(5, 2), torch.full((5,), 0.5)), "must be integers; row 0 has 0.5"),
        ((torch.full((5, 2), float("nan")), torch.zeros(5, dtype=torch.long)), "NaN"),
        ((torch.zeros(0, 2), torch.zeros(0, dtype=torch.long)), "N >= 1"),
        ((torch.zeros(5), torch.zeros(5, dtype=torch.long)), r"shape \(N, ...\)"),
        ((torch.zeros(5, 2),), "pair"),
    ],
)
def test_bad_training_data_raises(train, message):
    with pytest.raises(ValueError, match=message):
        fit(MLP(2, 3), train, config=TrainConfig(epochs=1))


def test_bad_usage_raises(make_blobs):
    data = make_blobs(20, seed=0)
    with pytest.raises(ValueError, match="need validation data"):
        fit(MLP(2, 3), data, config=TrainConfig(early_stopping=3))
    with pytest.raises(ValueError, match="need validation data"):
        fit(MLP(2, 3), data, config=TrainConfig(restore_best=True))
    with pytest.raises(ValueError, match="scalar"):
        fit(
            MLP(2, 3),
            data,
            config=TrainConfig(epochs=1),
            loss_fn=lambda z, y: F.cross_entropy(z, y, reduction="none"),
        )
    with pytest.raises(ValueError, match="val labels"):
        fit(MLP(2, 3), data, (data[0], data[1] + 3), config=TrainConfig(epochs=1))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"epochs": 0},
        {"optimizer": "rmsprop"},
        {"lr": 0.0},
        {"lr": float("inf")},
        {"momentum": 1.0},
        {"weight_decay": -1.0},
        {"batch_size": 0},
        {"milestones": (5, 5)},
        {"milestones": (0,)},
        {"lr_decay": 0.0},
        {"grad_clip": 0.0},
        {"early_stopping": 0},
        {"seed": -1},
        {"device": "not-a-device"},
    ],
)
def test_bad_config_raises(kwargs):
    with pytest.raises(ValueError):
        TrainConfig(**kwargs)


def test_predict_logits_is_eval_mode_chunked_and_gradient_free():
    torch.manual_seed(0)
    model = MLP(2, 3, hidden=(32,), dropout=0.5).train()
    x = torch.randn(50, 2)
    logits = predict_logits(model, x, batch_size=7)
    assert model.training  # mode restored
    assert not logits.requires_grad
    torch.testing.assert_close(logits, model.eval()(x).detach())
    torch.testing.assert_close(predict_logits(model, np.asarray(x)), logits)
    with pytest.raises(ValueError, match="batch_size"):
        predict_logits(model, x, batch_size=0)
    with pytest.raises(ValueError, match="at least one row"):
        predict_logits(model, x[:0])


def test_history_repr_is_short(make_blobs):
    train, val = make_blobs(40, seed=0), make_blobs(40, seed=1)
    text = repr(fit(MLP(2, 3), train, val, config=TrainConfig(epochs=30)))
    assert text.startswith("History(epochs_run=30") and "best_epoch=" in text and len(text) < 250


def test_ties_keep_the_first_best_epoch(make_blobs):
    """A zero-gradient loss leaves the parameters (and so validation NLL) unchanged."""
    data = make_blobs(20, seed=0)
    history = fit(
        MLP(2, 3),
        data,
        data,
        config=TrainConfig(epochs=50, early_stopping=4),
        loss_fn=lambda z, y: 0.0 * z.sum(),
    )
    assert len(set(history.val_nll)) == 1
    assert history.best_epoch == 0 and history.epochs_run == 5
