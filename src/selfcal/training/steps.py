"""Step strategies: how one training minibatch moves the model, inside the one training loop.

:func:`selfcal.training.fit` owns everything around a step -- data checks, seeding, epochs and
shuffling, the optimizer and its learning-rate schedule, validation, history, early stopping,
checkpoints, divergence -- and asks a :class:`TrainStep` to take each minibatch step. A step:

* :meth:`TrainStep.start` receives the run (:class:`Run`: model, optimizer, config, the
  validated data, the augmentation generator) once, before the first epoch, inside the run's
  seeded RNG context: a step that creates parameters (γ-Net) draws them there;
* :meth:`TrainStep.start_epoch` is told each epoch before its first minibatch;
* :meth:`TrainStep.step` takes one minibatch ``(x, y)`` (raw: the step applies the run's
  ``augment``) and returns the loss it trained on, detached, as a 0-d tensor on the run's
  device: the loop sums the step losses on the device and reads the sum once an epoch, so a
  step never waits for the device (a NaN/inf sum is reported as divergence);
* :meth:`TrainStep.end_epoch` runs after the epoch's validation (records of its own);
* :meth:`TrainStep.history` turns the loop's :class:`~selfcal.training.History` into the
  step's own (e.g. with meta-learning curves).

The strategies: :class:`LossStep` (plain training on a loss), :class:`MixupStep` (mixup) and
:class:`selfcal.bilevel.MetaStep` (a meta-learned regulariser: γ-Net or unit-wise L2, one
lookahead per minibatch).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from selfcal._inputs import Labels
from selfcal._validation import check_nonnegative
from selfcal.losses.mixup import mixup_batch, mixup_loss
from selfcal.training.config import TrainConfig
from selfcal.training.history import History

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Pair = tuple[torch.Tensor, torch.Tensor]


@dataclass
class Run:
    """What the loop gives its step: the model, its optimizer and config, the validated
    training and validation data (on ``device``, ``x`` in the model's float dtype), the
    augmentation generator and ``augment`` (the run's ``batch_transform`` bound to it, the
    identity without one), and ``prepare(data, name)``, which validates another ``(x, y)``
    pair by the same rules (e.g. a meta-validation set)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    config: TrainConfig
    device: torch.device
    train: Pair
    validation: Pair | None
    generator: torch.Generator
    augment: Callable[[torch.Tensor], torch.Tensor]
    prepare: Callable[[Any, str], Pair]
    n_classes: int
    """The model's class count ``C``: every label of the run's data lies in ``[0, C)``."""

    def labels(self, rows: torch.Tensor) -> Labels:
        """``rows`` -- labels of the run's data, checked once when the run was prepared -- as
        :class:`~selfcal._inputs.Labels`, so a loss reads none of them again."""
        return Labels(rows, self.n_classes)

    def forward(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """The training forward pass ``model(x)``: under bfloat16 autocast with float32
        logits out when ``config.autocast == "bf16"``, as it is otherwise."""
        if self.config.autocast is None:
            return model(x)
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            logits = model(x)
        return logits.float()


class TrainStep:
    """Base class of the step strategies (module doc). Subclasses implement :meth:`step`."""

    run: Run
    speed_options = True
    """Whether the step runs its forward passes through :meth:`Run.forward` and so supports
    ``TrainConfig(compile=True)`` and ``autocast``."""

    def start(self, run: Run) -> None:
        """Called once before the first epoch, inside the run's seeded RNG context."""
        self.run = run

    def start_epoch(self, epoch: int) -> None:
        """Called before each epoch's first minibatch (epochs are numbered from 0)."""

    def step(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One minibatch step; returns the loss it trained on, detached (module doc)."""
        raise NotImplementedError

    def end_epoch(self, model: nn.Module, validation: Pair | None) -> None:
        """Called after each epoch's validation (analysis only: must not train)."""

    def history(self, base: History) -> History:
        """The run's history as this step reports it (``base`` itself by default)."""
        return base


def checked_loss(loss: Any) -> torch.Tensor:
    """``loss`` detached, once it is known to be a scalar tensor. Its value is not read here
    (that would wait for the device): the loop checks the epoch's sum for NaN/inf."""
    if not isinstance(loss, torch.Tensor) or loss.ndim != 0:
        raise ValueError("loss_fn must return a scalar tensor")
    return loss.detach()


def descend(model: nn.Module, loss: torch.Tensor, run: Run) -> torch.Tensor:
    """The optimizer step on ``loss`` (its gradients clipped to the global L2 norm
    ``config.grad_clip`` if set); returns the loss, detached. The caller has zeroed the
    gradients before computing ``loss``."""
    value = checked_loss(loss)
    loss.backward()
    if run.config.grad_clip is not None:
        nn.utils.clip_grad_norm_(model.parameters(), run.config.grad_clip)
    run.optimizer.step()
    return value


class LossStep(TrainStep):
    """Plain training: zero the gradients, ``loss_fn(model(augment(x)), y)``, backward,
    optional clipping, the optimizer step. ``loss_fn(logits, labels) -> scalar`` defaults to
    mean cross-entropy; a loss with a ``set_epoch(epoch)`` method (a schedule such as FLSD-53)
    is told each epoch."""

    def __init__(self, loss_fn: LossFn | None = None) -> None:
        self.loss_fn: LossFn = F.cross_entropy if loss_fn is None else loss_fn

    def start_epoch(self, epoch: int) -> None:
        set_epoch = getattr(self.loss_fn, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)

    def step(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.run.optimizer.zero_grad(set_to_none=True)
        return descend(model, self.loss(model, x, y), self.run)

    def loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The minibatch's training loss."""
        return self.loss_on(self.run.forward(model, self.run.augment(x)), y)

    def loss_on(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``loss_fn(logits, y)``, the labels ``y`` as checked :class:`~selfcal._inputs.Labels`
        where the loss takes them (``accepts_labels``: selfcal's loss modules), so it does not
        scan them again each minibatch."""
        if getattr(self.loss_fn, "accepts_labels", False):
            return self.loss_fn(logits, self.run.labels(y))  # type: ignore[arg-type]
        return self.loss_fn(logits, y)


class MixupStep(LossStep):
    """Mixup (Zhang et al. 2018; [MetaReg] uses ``alpha = 1``): per minibatch, after the
    run's ``augment``, one ``lam ~ Beta(alpha, alpha)`` and a permutation ``pi`` drawn from the
    run's augmentation generator (:func:`selfcal.losses.mixup_batch`), and the loss
    ``lam * loss_fn(z, y) + (1 - lam) * loss_fn(z, y[pi])`` with
    ``z = model(lam x + (1 - lam) x[pi])``. Needs floating-point inputs."""

    def __init__(self, loss_fn: LossFn | None = None, alpha: float = 1.0) -> None:
        super().__init__(loss_fn)
        self.alpha = check_nonnegative("mixup_alpha", alpha)

    def start(self, run: Run) -> None:
        if not run.train[0].is_floating_point():
            raise ValueError(f"mixup needs floating-point inputs, got dtype {run.train[0].dtype}")
        super().start(run)

    def loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        mixed, y_a, y_b, lam = mixup_batch(self.run.augment(x), y, self.alpha, self.run.generator)
        return mixup_loss(self.loss_on, self.run.forward(model, mixed), y_a, y_b, lam)
