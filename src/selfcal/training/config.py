"""Training configuration (validated on construction)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch


@dataclass(frozen=True)
class TrainConfig:
    """Everything :func:`~selfcal.training.fit` needs besides the model, data and loss.

    The defaults are the [BO4SC] "Standard" protocol: Adam, full batch, plain mean CE. The
    papers' CIFAR protocol (spec §0) is ``TrainConfig(epochs=350, optimizer="sgd", lr=0.1,
    momentum=0.9, weight_decay=5e-4, batch_size=128, milestones=(150, 250), grad_clip=2.0)``
    with ``loss_fn=torch.nn.CrossEntropyLoss(reduction="sum")``.

    * ``epochs``: number of passes over the training set (epochs are numbered from 0).
    * ``optimizer``: ``"adam"`` (:class:`torch.optim.Adam`, betas (0.9, 0.999), L2-coupled
      ``weight_decay`` as in PyTorch) or ``"sgd"`` (:class:`torch.optim.SGD` with ``momentum``;
      ``momentum`` is used by SGD only).
    * ``batch_size``: ``None`` = one full-batch step per epoch in data order; otherwise the
      data are reshuffled every epoch and the last, smaller batch is kept.
    * ``milestones`` / ``lr_decay``: :class:`torch.optim.lr_scheduler.MultiStepLR`, stepped
      *after* each epoch ([GRA]); epoch ``e`` trains with ``lr * lr_decay ** #{m <= e}``.
      [FLC]/[MC] stepped before each epoch: pass ``milestones`` minus one to match them.
    * ``grad_clip``: maximum global L2 norm of the gradient (``clip_grad_norm_``), or ``None``.
    * ``best_by``: which validation epoch is best: ``"nll"`` (lowest validation NLL, the
      first one) or ``"accuracy"`` (highest validation accuracy, the first one: the
      [MC] / [MetaReg] reference code's checkpoint rule, which keeps the model whose error is
      lowest however over-confident it has become).
    * ``early_stopping``: patience in epochs since the best epoch (needs validation data).
    * ``restore_best``: load the parameters of the best epoch at the end.
    * ``seed``: seeds the minibatch shuffling and any randomness inside the model (dropout).
    """

    epochs: int = 100
    optimizer: Literal["adam", "sgd"] = "adam"
    lr: float = 1e-3
    momentum: float = 0.9
    weight_decay: float = 0.0
    batch_size: int | None = None
    milestones: tuple[int, ...] = ()
    lr_decay: float = 0.1
    grad_clip: float | None = None
    best_by: Literal["nll", "accuracy"] = "nll"
    early_stopping: int | None = None
    restore_best: bool = False
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        _check_counts(self)
        _check_rates(self)
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"optimizer must be 'adam' or 'sgd', got {self.optimizer!r}")
        if self.best_by not in ("nll", "accuracy"):
            raise ValueError(f"best_by must be 'nll' or 'accuracy', got {self.best_by!r}")
        milestones = tuple(self.milestones)
        if not all(_is_int(m) and m >= 1 for m in milestones) or list(milestones) != sorted(
            set(milestones)
        ):
            raise ValueError(
                f"milestones must be strictly increasing positive integers, got {self.milestones!r}"
            )
        object.__setattr__(self, "milestones", milestones)
        try:
            torch.device(self.device)
        except (RuntimeError, TypeError) as err:
            raise ValueError(f"device {self.device!r} is not a valid torch device") from err


def _check_counts(config: TrainConfig) -> None:
    if not _is_int(config.epochs) or config.epochs < 1:
        raise ValueError(f"epochs must be a positive integer, got {config.epochs!r}")
    if config.batch_size is not None and (not _is_int(config.batch_size) or config.batch_size < 1):
        raise ValueError(
            f"batch_size must be None or a positive integer, got {config.batch_size!r}"
        )
    patience = config.early_stopping
    if patience is not None and (not _is_int(patience) or patience < 1):
        raise ValueError(f"early_stopping must be None or a positive integer, got {patience!r}")
    if not _is_int(config.seed) or config.seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {config.seed!r}")


def _check_rates(config: TrainConfig) -> None:
    if not (config.lr > 0 and math.isfinite(config.lr)):
        raise ValueError(f"lr must be positive and finite, got {config.lr!r}")
    if not 0 <= config.momentum < 1:
        raise ValueError(f"momentum must lie in [0, 1), got {config.momentum!r}")
    if not (config.weight_decay >= 0 and math.isfinite(config.weight_decay)):
        raise ValueError(f"weight_decay must be finite and >= 0, got {config.weight_decay!r}")
    if not 0 < config.lr_decay <= 1:
        raise ValueError(f"lr_decay must lie in (0, 1], got {config.lr_decay!r}")
    if config.grad_clip is not None and not config.grad_clip > 0:
        raise ValueError(f"grad_clip must be None or positive, got {config.grad_clip!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
