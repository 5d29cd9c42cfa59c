"""The training loop: :func:`fit` and the set-up it shares (:func:`prepare_run`); its
validation pass runs :func:`selfcal.models.inference.predict_logits`.

Every way selfcal trains a network on a loss runs this loop; what differs is the *step
strategy* (:mod:`selfcal.training.steps`): plain training on a loss (:class:`LossStep`), mixup
(:class:`MixupStep`), or a meta-learned regulariser (:class:`selfcal.bilevel.MetaStep`). The
one exception is BO4SC (:class:`selfcal.bilevel.BO4SC`), whose outer loop of bilevel
iterations stays its own (:mod:`selfcal.bilevel.bo4sc_estimator` says why); it shares this
loop's random streams and batch-transform protocol (:mod:`selfcal.training.seeding`) and its
prediction pass.

One epoch = ``step.start_epoch(epoch)`` (a loss schedule is told the epoch) -> one
``step.step`` per minibatch (for :class:`LossStep`: zero grad, forward, loss, backward, optional
global-norm clipping, optimizer step) -> one ``MultiStepLR`` step -> validation (NLL, accuracy,
ECE) -> ``step.end_epoch`` -> callback -> early-stopping check. Any NaN/inf loss, parameter or
validation logit raises :class:`~selfcal.exceptions.TrainingDiverged`.

Determinism: the minibatch order of epoch ``e`` is the ``e``-th ``torch.randperm`` of a
``torch.Generator`` seeded with ``config.seed``; randomness inside the model (dropout) draws
from the global RNG, which ``fit`` seeds with ``config.seed`` inside
:func:`torch.random.fork_rng`, so the caller's RNG state is left as it was (a step's own
initialisation, e.g. γ-Net's, draws from it first). The training batch pipeline -- an optional
``batch_transform`` (data augmentation), then mixup -- draws from a third, *augmentation*
``torch.Generator``, on ``config.device`` (where the batches are), whose seed is derived from
``config.seed`` by :class:`numpy.random.SeedSequence` (``[seed, 1]``): its stream is independent
of the shuffling stream, and the shuffling is the same with or without augmentation. Per
minibatch the transform draws first, then mixup draws ``lam`` and then its permutation. On the
CPU two runs with equal inputs and config give bit-identical parameters. The three streams are
made by :mod:`selfcal.training.seeding`.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from selfcal._inputs import as_features, as_labels, to_tensor
from selfcal._validation import check_nonnegative
from selfcal.exceptions import DegenerateCalibration, NonFinite, TrainingDiverged
from selfcal.metrics import accuracy, ece, nll
from selfcal.models.inference import predict_logits
from selfcal.predictions import Predictions
from selfcal.recalibration import refinement_loss
from selfcal.training.config import TrainConfig
from selfcal.training.history import History, HistoryRecorder, StopReason
from selfcal.training.seeding import (
    BatchTransform,
    augmentation_generator,
    bind_transform,
    seeded_global_rng,
    shuffle_generator,
)
from selfcal.training.steps import LossFn, LossStep, MixupStep, Pair, Run, TrainStep

EpochCallback = Callable[[int, nn.Module, History], bool | None]
Batch = torch.Tensor | slice


def fit(
    model: nn.Module,
    train: Pair,
    val: Pair | None = None,
    *,
    config: TrainConfig,
    loss_fn: LossFn | None = None,
    mixup_alpha: float = 0.0,
    step: TrainStep | None = None,
    on_epoch: EpochCallback | None = None,
    batch_transform: BatchTransform | None = None,
) -> History:
    """Train ``model`` in place on ``train = (x, y)``; return the run's :class:`History`.

    How each minibatch trains is ``step`` (:mod:`selfcal.training.steps`), or, as shortcuts
    for the two plain strategies: ``loss_fn(logits, labels) -> scalar`` (default mean
    cross-entropy; pass ``nn.CrossEntropyLoss(reduction="sum")`` for the papers' sum reduction;
    a loss with a ``set_epoch(epoch)`` method is told the epoch), trained plainly
    (:class:`LossStep`) or, with ``mixup_alpha > 0``, with mixup (:class:`MixupStep`, [MetaReg]
    uses 1: the history's ``train_loss`` is then the mixed loss). Pass ``step`` or the
    shortcuts, not both.
    ``on_epoch(epoch, model, history)`` runs after each epoch; returning ``True`` stops.
    ``batch_transform(x_batch, generator) -> x_batch`` (e.g.
    :func:`selfcal.data.augment.random_crop_flip`) is applied to every training minibatch, never
    to validation data, drawing its randomness from ``generator`` (on ``config.device``, seeded
    from ``config.seed``; see the module doc); it must keep the batch's rows.
    The model is moved to ``config.device`` and left in training mode; with
    ``config.restore_best`` it ends with the parameters of the best validation epoch
    (``config.best_by``).
    """
    step = _strategy(step, loss_fn, mixup_alpha)
    if not step.speed_options and (config.compile or config.autocast is not None):
        raise ValueError(f"{type(step).__name__} does not support compile= or autocast=")
    run = prepare_run(model, train, val, config=config, batch_transform=batch_transform)
    with (
        seeded_global_rng(config.seed, run.device),
        deterministic_mode(config.deterministic, run.device),
    ):
        step.start(run)
        return _epochs(run, step, on_epoch)


def prepare_run(
    model: nn.Module,
    train: Pair,
    val: Pair | None = None,
    *,
    config: TrainConfig,
    batch_transform: BatchTransform | None = None,
) -> Run:
    """What :func:`fit` sets up before its first epoch: the model moved to ``config.device``,
    the data validated (``x`` in the model's float dtype, labels in range), the optimizer, the
    augmentation generator and the bound ``batch_transform`` -- a :class:`Run` that a step
    strategy can also be started on and driven by hand (e.g. to time one step)."""
    device = torch.device(config.device)
    model.to(device)
    x, y, n_classes = _prepare_pair(model, train, "train", device)
    validation = None if val is None else _prepare_pair(model, val, "val", device)[:2]
    if config.compile:  # after the one-row probes of _prepare_pair: no graph compiled for them
        model.compile()
    if validation is None and (config.early_stopping is not None or config.restore_best):
        raise ValueError("early_stopping and restore_best need validation data (val=...)")
    generator = augmentation_generator(config.seed, device)
    return Run(
        model=model,
        optimizer=make_optimizer(model, config),
        config=config,
        device=device,
        train=(x, y),
        validation=validation,
        generator=generator,
        augment=bind_transform(batch_transform, generator),
        prepare=lambda data, name: _prepare_pair(model, data, name, device)[:2],
        n_classes=n_classes,
    )


def _strategy(step: TrainStep | None, loss_fn: LossFn | None, mixup_alpha: float) -> TrainStep:
    """``step``, or the plain / mixup strategy the shortcuts describe."""
    alpha = check_nonnegative("mixup_alpha", mixup_alpha)
    if step is None:
        return MixupStep(loss_fn, alpha) if alpha > 0 else LossStep(loss_fn)
    if loss_fn is not None or alpha > 0:
        raise ValueError("pass a step strategy or loss_fn / mixup_alpha, not both")
    if not isinstance(step, TrainStep):
        raise ValueError(f"step must be a TrainStep, got {type(step).__name__}")
    return step


def _epochs(run: Run, step: TrainStep, on_epoch: EpochCallback | None) -> History:
    """The epochs of a run (module doc); returns the step's history of it."""
    model, config, (x, y) = run.model, run.config, run.train
    scheduler = torch.optim.lr_scheduler.MultiStepLR(
        run.optimizer, list(config.milestones), gamma=config.lr_decay
    )
    shuffle = shuffle_generator(config.seed)
    record = HistoryRecorder(best_by=config.best_by)
    best_state: dict[str, torch.Tensor] | None = None
    stop: StopReason = "completed"
    start = time.perf_counter()
    for epoch in range(config.epochs):
        epoch_start, lr = time.perf_counter(), run.optimizer.param_groups[0]["lr"]
        try:
            batches = _epoch_batches(len(y), config.batch_size, shuffle, run.device)
            step.start_epoch(epoch)
            loss = _train_epoch(model, x, y, batches, step)
            scheduler.step()
            _check_parameters(model)
            scores = None
            if run.validation is not None:
                by_refinement = config.best_by == "refinement"
                scores = _validation_scores(model, *run.validation, refinement=by_refinement)
            step.end_epoch(model, run.validation)
        except NonFinite as err:
            history = step.history(record.snapshot(time.perf_counter() - start))
            raise TrainingDiverged(epoch, str(err), history) from None
        record.train_loss.append(loss)
        record.lr.append(lr)
        if scores is not None and record.add_validation(epoch, *scores) and config.restore_best:
            best_state = _copy_state(model)
        record.epoch_time.append(time.perf_counter() - epoch_start)
        stop = _stop_reason(record, epoch, config, on_epoch, model, start, step)
        if stop != "completed":
            break
    if best_state is not None:
        model.load_state_dict(best_state)
    return step.history(
        record.snapshot(time.perf_counter() - start, stop, restored=best_state is not None)
    )


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
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, batches: list[Batch], step: TrainStep
) -> float:
    """One pass over ``batches``; returns the batch-size-weighted mean of the step losses,
    summed on the device and read once (:class:`NonFinite` if it is NaN or infinite)."""
    model.train()
    dtype = torch.float32 if y.device.type == "mps" else torch.float64  # MPS has no float64
    total = torch.zeros((), dtype=dtype, device=y.device)
    for batch in batches:
        rows = y[batch]
        loss = step.step(model, x[batch], rows)
        total = total + torch.as_tensor(loss, dtype=dtype, device=y.device) * rows.shape[0]
    mean = float(total) / len(y)
    if not math.isfinite(mean):
        raise NonFinite(f"the training loss is {mean}")
    return mean


def _epoch_batches(
    n: int, batch_size: int | None, generator: torch.Generator, device: torch.device
) -> list[Batch]:
    """Full batch in data order, or a fresh permutation split into ``batch_size`` chunks (drawn
    on the CPU and copied without waiting for the device)."""
    if batch_size is None:
        return [slice(None)]
    order = torch.randperm(n, generator=generator).to(device, non_blocking=True)
    return list(order.split(batch_size))


def _check_parameters(model: nn.Module) -> None:
    params = list(model.parameters())
    if params and not bool(torch.stack([torch.isfinite(p).all() for p in params]).all()):
        name = next(n for n, p in model.named_parameters() if not torch.isfinite(p).all())
        raise NonFinite(f"parameter {name!r} is not finite")


def _validation_scores(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, refinement: bool
) -> tuple[float, float, float, float | None]:
    """Validation NLL, accuracy, 15-bin ECE and, if ``refinement``, the refinement loss (the
    NLL after temperature scaling fitted on these predictions; NaN where it cannot be fitted,
    and a degenerate fit -- every prediction correct -- is ``T = 1``, unwarned), float64 via
    :mod:`selfcal.metrics`. The refinement costs a temperature fit per epoch, so only runs
    that select by it pay it."""
    logits = predict_logits(model, x)
    if not bool(torch.isfinite(logits).all()):
        raise NonFinite("validation logits are not finite")
    pred = Predictions.from_logits(logits, y)
    refined = None
    if refinement:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateCalibration)
            try:
                refined = float(refinement_loss(pred))
            except ValueError:  # logits beyond what the likelihood fit can scale
                refined = math.nan
    return float(nll(pred)), float(accuracy(pred)), float(ece(pred)), refined


def _stop_reason(
    record: HistoryRecorder,
    epoch: int,
    config: TrainConfig,
    on_epoch: EpochCallback | None,
    model: nn.Module,
    start: float,
    step: TrainStep,
) -> StopReason:
    snapshot = step.history(record.snapshot(time.perf_counter() - start))
    if on_epoch is not None and on_epoch(epoch, model, snapshot):
        return "callback"
    best, patience = record.best_epoch, config.early_stopping
    if patience is not None and best is not None and epoch - best >= patience:
        return "early_stopping"
    return "completed"


def _copy_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: t.detach().clone() for name, t in model.state_dict().items()}


@contextlib.contextmanager
def deterministic_mode(on: bool, device: torch.device) -> Iterator[None]:
    """``TrainConfig(deterministic=True)`` on CUDA: cuDNN's deterministic kernels and
    ``torch.use_deterministic_algorithms(True)`` inside, the caller's settings restored after.
    Nothing changes on other devices or when ``on`` is false."""
    if not on or device.type != "cuda":
        yield
        return
    if os.environ.get("CUBLAS_WORKSPACE_CONFIG") not in (":4096:8", ":16:8"):
        raise ValueError(
            "deterministic=True on CUDA needs CUBLAS_WORKSPACE_CONFIG=:4096:8 (or :16:8) set "
            "in the environment before Python starts"
        )
    cudnn = torch.backends.cudnn
    before = (cudnn.deterministic, cudnn.benchmark, torch.are_deterministic_algorithms_enabled())
    cudnn.deterministic, cudnn.benchmark = True, False
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        cudnn.deterministic, cudnn.benchmark = before[0], before[1]
        torch.use_deterministic_algorithms(before[2])


def _prepare_pair(
    model: nn.Module, data: Any, name: str, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``(x, y)`` checked by the one feature and label rules (:mod:`selfcal._inputs`) and the
    model's class count ``C``, read from a one-row probe; ``x`` and ``y`` on ``device``
    (floating ``x`` in the model's float dtype, ``y`` int64 in ``[0, C)``)."""
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise ValueError(f"{name} must be a pair (x, y)")
    x = to_tensor(data[0], f"{name} x")
    dtype = _float_dtype(model, x.dtype) if x.is_floating_point() else None
    x = as_features(x, f"{name} x", dtype=dtype, min_ndim=2).to(device)
    n_classes = _model_classes(model, x)
    labels = as_labels(data[1], x.shape[0], n_classes, device=device, name=f"{name} labels")
    return x, labels.values, n_classes


def _model_classes(model: nn.Module, x: torch.Tensor) -> int:
    """``C``, from the model's output on the first row of ``x``."""
    probe = predict_logits(model, x[:1])
    if probe.ndim != 2 or probe.shape[1] < 2:
        raise ValueError(
            f"the model must return logits (N, C) with C >= 2, got {tuple(probe.shape)}"
        )
    return int(probe.shape[1])


def _float_dtype(model: nn.Module, default: torch.dtype) -> torch.dtype:
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), default)
