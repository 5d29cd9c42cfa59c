"""The plain training loop: :func:`fit` and :func:`predict_logits`, and the pieces another loop
over the same protocol reuses (:func:`prepare_pair`, :func:`epoch_batches`,
:func:`validation_scores`, :func:`check_parameters`, :func:`loss_value`,
:func:`seeded_global_rng`, :func:`augmentation_generator`, :func:`bind_transform`; e.g.
:mod:`selfcal.bilevel.meta_calibration`).

One epoch = (``loss_fn.set_epoch(epoch)`` if the loss has it) -> minibatch steps
(zero grad, forward, loss, backward, optional global-norm clipping, optimizer step) -> one
``MultiStepLR`` step -> validation (NLL, accuracy, ECE) -> callback -> early-stopping check.
Any NaN/inf loss, parameter or validation logit raises :class:`TrainingDiverged`.

Determinism: the minibatch order of epoch ``e`` is the ``e``-th ``torch.randperm`` of a
``torch.Generator`` seeded with ``config.seed``; randomness inside the model (dropout) draws
from the global RNG, which ``fit`` seeds with ``config.seed`` inside
:func:`torch.random.fork_rng`, so the caller's RNG state is left as it was. The training batch
pipeline -- an optional ``batch_transform`` (data augmentation), then mixup if
``mixup_alpha > 0`` -- draws from a third, *augmentation* ``torch.Generator``, on
``config.device`` (where the batches are), whose seed is derived from ``config.seed`` by
:class:`numpy.random.SeedSequence` (``[seed, 1]``): its stream is independent of the shuffling
stream, and the shuffling is the same with or without augmentation. Per minibatch the transform
draws first, then mixup draws ``lam`` and then its permutation. On the CPU two runs with equal
inputs and config give bit-identical parameters.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from selfcal._validation import check_nonnegative, check_optional_int
from selfcal.exceptions import NonFinite, TrainingDiverged
from selfcal.losses.mixup import mixup_batch, mixup_loss
from selfcal.metrics import accuracy, ece, nll
from selfcal.predictions import Predictions
from selfcal.training.config import TrainConfig
from selfcal.training.history import History, HistoryRecorder, StopReason

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
EpochCallback = Callable[[int, nn.Module, History], bool | None]
BatchTransform = Callable[[torch.Tensor, torch.Generator], torch.Tensor]
BatchLoss = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
Batch = torch.Tensor | slice


def fit(
    model: nn.Module,
    train: tuple[torch.Tensor, torch.Tensor],
    val: tuple[torch.Tensor, torch.Tensor] | None = None,
    *,
    config: TrainConfig,
    loss_fn: LossFn | None = None,
    on_epoch: EpochCallback | None = None,
    batch_transform: BatchTransform | None = None,
    mixup_alpha: float = 0.0,
) -> History:
    """Train ``model`` in place on ``train = (x, y)``; return the run's :class:`History`.

    ``loss_fn(logits, labels) -> scalar`` defaults to mean cross-entropy; pass
    ``nn.CrossEntropyLoss(reduction="sum")`` for the papers' sum reduction. A loss object with
    a ``set_epoch(epoch)`` method is told the epoch before the epoch's first step.
    ``on_epoch(epoch, model, history)`` runs after each epoch; returning ``True`` stops.
    ``batch_transform(x_batch, generator) -> x_batch`` (e.g.
    :func:`selfcal.data.augment.random_crop_flip`) is applied to every training minibatch, never
    to validation data, drawing its randomness from ``generator`` (on ``config.device``, seeded
    from ``config.seed``; see the module doc); it must keep the batch's rows.
    ``mixup_alpha > 0`` trains with mixup (Zhang et al. 2018; [MetaReg] uses 1): per minibatch
    (after ``batch_transform``) one ``lam ~ Beta(alpha, alpha)`` and a permutation ``pi`` of the
    batch, drawn from the same generator (:func:`selfcal.losses.mixup_batch`), and the step
    minimises ``lam * loss_fn(z, y) + (1 - lam) * loss_fn(z, y[pi])`` with
    ``z = model(lam x + (1 - lam) x[pi])``; the history's ``train_loss`` is this mixed loss.
    ``mixup_alpha = 0`` (default) is plain training, with no draws. Validation is never mixed.
    The model is moved to ``config.device`` and left in training mode; with
    ``config.restore_best`` it ends with the parameters of the best validation epoch
    (``config.best_by``).
    """
    device = torch.device(config.device)
    model.to(device)
    x, y = prepare_pair(model, train, "train", device)
    validation = None if val is None else prepare_pair(model, val, "val", device)
    if validation is None and (config.early_stopping is not None or config.restore_best):
        raise ValueError("early_stopping and restore_best need validation data (val=...)")
    loss_fn = F.cross_entropy if loss_fn is None else loss_fn
    batch_loss = _batch_loss(
        loss_fn, batch_transform, _mixup_alpha(mixup_alpha, x), config.seed, device
    )
    optimizer = make_optimizer(model, config)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(
        optimizer, list(config.milestones), gamma=config.lr_decay
    )
    shuffle = torch.Generator().manual_seed(config.seed)
    record = HistoryRecorder(best_by=config.best_by)
    best_state: dict[str, torch.Tensor] | None = None
    stop: StopReason = "completed"
    start = time.perf_counter()
    with seeded_global_rng(config.seed, device):
        for epoch in range(config.epochs):
            epoch_start, lr = time.perf_counter(), optimizer.param_groups[0]["lr"]
            try:
                batches = epoch_batches(len(y), config.batch_size, shuffle, device)
                _set_epoch(loss_fn, epoch)
                loss = _train_epoch(model, x, y, batches, batch_loss, optimizer, config)
                scheduler.step()
                check_parameters(model)
                scores = None if validation is None else validation_scores(model, *validation)
            except NonFinite as err:
                history = record.snapshot(time.perf_counter() - start)
                raise TrainingDiverged(epoch, str(err), history) from None
            record.train_loss.append(loss)
            record.lr.append(lr)
            if scores is not None and record.add_validation(epoch, *scores) and config.restore_best:
                best_state = _copy_state(model)
            record.epoch_time.append(time.perf_counter() - epoch_start)
            stop = _stop_reason(record, epoch, config, on_epoch, model, start)
            if stop != "completed":
                break
    if best_state is not None:
        model.load_state_dict(best_state)
    return record.snapshot(time.perf_counter() - start, stop, restored=best_state is not None)


def predict_logits(
    model: nn.Module, x: torch.Tensor, batch_size: int | None = None
) -> torch.Tensor:
    """``model(x)`` in eval mode without gradients, in chunks of ``batch_size`` rows.

    ``x`` is moved to the model's device; the logits stay there. The model's train/eval mode
    is restored afterwards."""
    x = _as_tensor(x, "x")
    if x.ndim < 1 or x.shape[0] == 0:
        raise ValueError(f"x must have at least one row, got shape {tuple(x.shape)}")
    check_optional_int("batch_size", batch_size)
    device = next((p.device for p in model.parameters()), x.device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            chunks = [x] if batch_size is None else list(x.split(batch_size))
            return torch.cat([model(chunk.to(device)) for chunk in chunks])
    finally:
        model.train(was_training)


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """Adam or SGD (with momentum) over the parameters that require grad."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters")
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay)
    return torch.optim.SGD(
        params, lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay
    )


def _train_epoch(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    batches: list[Batch],
    batch_loss: BatchLoss,
    optimizer: torch.optim.Optimizer,
    config: TrainConfig,
) -> float:
    """One pass over ``batches``; returns the batch-size-weighted mean of the batch losses
    ``batch_loss(model, x[batch], y[batch])``."""
    model.train()
    total = 0.0
    for batch in batches:
        optimizer.zero_grad(set_to_none=True)
        loss = batch_loss(model, x[batch], y[batch])
        value = loss_value(loss)
        loss.backward()
        if config.grad_clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        total += value * len(y[batch])
    return total / len(y)


def _set_epoch(loss_fn: LossFn, epoch: int) -> None:
    """Tell a loss with a ``set_epoch(epoch)`` method (a schedule) the epoch."""
    set_epoch = getattr(loss_fn, "set_epoch", None)
    if callable(set_epoch):
        set_epoch(epoch)


def _batch_loss(
    loss_fn: LossFn,
    transform: BatchTransform | None,
    mixup_alpha: float,
    seed: int,
    device: torch.device,
) -> BatchLoss:
    """``(model, x_batch, y_batch) -> loss`` of one training minibatch: ``transform``, then
    (``mixup_alpha > 0``) ``x <- lam x + (1 - lam) x[pi]`` and
    ``loss = lam * loss_fn(z, y) + (1 - lam) * loss_fn(z, y[pi])``; else ``loss_fn(z, y)``.
    Both draw from one augmentation generator (see the module doc)."""
    generator = augmentation_generator(seed, device)
    augment = bind_transform(transform, generator)

    def plain(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return loss_fn(model(augment(x)), y)

    def mixed(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x_mixed, y_a, y_b, lam = mixup_batch(augment(x), y, mixup_alpha, generator)
        return mixup_loss(loss_fn, model(x_mixed), y_a, y_b, lam)

    return plain if mixup_alpha == 0 else mixed


def _mixup_alpha(alpha: Any, x: torch.Tensor) -> float:
    """A finite ``alpha >= 0``; mixing (``alpha > 0``) needs floating-point inputs."""
    alpha = check_nonnegative("mixup_alpha", alpha)
    if alpha > 0 and not x.is_floating_point():
        raise ValueError(f"mixup needs floating-point inputs, got dtype {x.dtype}")
    return alpha


def augmentation_generator(seed: int, device: torch.device) -> torch.Generator:
    """The augmentation stream of a run seeded ``seed`` (see the module doc): a generator on
    ``device`` seeded from ``SeedSequence([seed, 1])``, independent of the shuffling stream."""
    derived = int(np.random.SeedSequence([seed, 1]).generate_state(1, dtype=np.uint64)[0])
    return torch.Generator(device=device).manual_seed(derived)


def bind_transform(
    transform: BatchTransform | None, generator: torch.Generator
) -> Callable[[torch.Tensor], torch.Tensor]:
    """Bind ``transform`` (identity if ``None``) to ``generator`` and check what it returns."""
    if transform is None:
        return lambda batch: batch
    if not callable(transform):
        raise ValueError(f"batch_transform must be callable, got {type(transform).__name__}")

    def augment(batch: torch.Tensor) -> torch.Tensor:
        out = transform(batch, generator)
        if not isinstance(out, torch.Tensor) or out.shape[:1] != batch.shape[:1]:
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(
                f"batch_transform must return a tensor with the batch's {batch.shape[0]} rows, "
                f"got {shape}"
            )
        return out

    return augment


def loss_value(loss: Any) -> float:
    if not isinstance(loss, torch.Tensor) or loss.ndim != 0:
        raise ValueError("loss_fn must return a scalar tensor")
    value = float(loss.detach())
    if not torch.isfinite(loss.detach()):
        raise NonFinite(f"the training loss is {value}")
    return value


def epoch_batches(
    n: int, batch_size: int | None, generator: torch.Generator, device: torch.device
) -> list[Batch]:
    """Full batch in data order, or a fresh permutation split into ``batch_size`` chunks."""
    if batch_size is None:
        return [slice(None)]
    return list(torch.randperm(n, generator=generator).to(device).split(batch_size))


def check_parameters(model: nn.Module) -> None:
    params = list(model.parameters())
    if params and not bool(torch.stack([torch.isfinite(p).all() for p in params]).all()):
        name = next(n for n, p in model.named_parameters() if not torch.isfinite(p).all())
        raise NonFinite(f"parameter {name!r} is not finite")


def validation_scores(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor
) -> tuple[float, float, float]:
    """Validation NLL, accuracy and 15-bin ECE (float64, via :mod:`selfcal.metrics`)."""
    logits = predict_logits(model, x)
    if not bool(torch.isfinite(logits).all()):
        raise NonFinite("validation logits are not finite")
    pred = Predictions.from_logits(logits, y)
    return float(nll(pred)), float(accuracy(pred)), float(ece(pred))


def _stop_reason(
    record: HistoryRecorder,
    epoch: int,
    config: TrainConfig,
    on_epoch: EpochCallback | None,
    model: nn.Module,
    start: float,
) -> StopReason:
    snapshot = record.snapshot(time.perf_counter() - start)
    if on_epoch is not None and on_epoch(epoch, model, snapshot):
        return "callback"
    best, patience = record.best_epoch, config.early_stopping
    if patience is not None and best is not None and epoch - best >= patience:
        return "early_stopping"
    return "completed"


def _copy_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: t.detach().clone() for name, t in model.state_dict().items()}


@contextlib.contextmanager
def seeded_global_rng(seed: int, device: torch.device) -> Iterator[None]:
    """Seed the global RNG(s) for in-model randomness; restore the caller's state after."""
    devices = list(range(torch.cuda.device_count())) if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def prepare_pair(
    model: nn.Module, data: Any, name: str, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate ``(x, y)``; return them on ``device`` (``x`` in the model's float dtype)."""
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise ValueError(f"{name} must be a pair (x, y)")
    x, y = _as_tensor(data[0], f"{name} x"), _as_tensor(data[1], f"{name} y")
    if x.ndim < 2 or x.shape[0] == 0:
        raise ValueError(f"{name} x must have shape (N, ...) with N >= 1, got {tuple(x.shape)}")
    if y.ndim != 1 or y.shape[0] != x.shape[0]:
        raise ValueError(
            f"{name} y must be 1-D with one label per row of x ({x.shape[0]}), got {tuple(y.shape)}"
        )
    if y.is_floating_point() or y.is_complex():
        raise ValueError(f"{name} y must hold integer class labels, got dtype {y.dtype}")
    if x.is_floating_point():
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{name} x contains NaN or infinity")
        x = x.to(_float_dtype(model, x.dtype))
    x, y = x.to(device), y.to(device=device, dtype=torch.long)
    _check_label_range(model, x, y, name)
    return x, y


def _check_label_range(model: nn.Module, x: torch.Tensor, y: torch.Tensor, name: str) -> None:
    probe = predict_logits(model, x[:1])
    if probe.ndim != 2 or probe.shape[1] < 2:
        raise ValueError(
            f"the model must return logits (N, C) with C >= 2, got {tuple(probe.shape)}"
        )
    n_classes = probe.shape[1]
    bad = (y < 0) | (y >= n_classes)
    if bool(bad.any()):
        row = int(torch.nonzero(bad)[0, 0])
        raise ValueError(
            f"{name} labels must lie in [0, {n_classes}); row {row} has label {int(y[row])}"
        )


def _float_dtype(model: nn.Module, default: torch.dtype) -> torch.dtype:
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), default)


def _as_tensor(value: Any, name: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ValueError(f"{name} must be a tensor or array, got {type(value).__name__}") from err
