"""Training configuration (validated on construction)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from selfcal._validation import (
    check_choice,
    check_int,
    check_nonnegative,
    check_optional_int,
    check_positive,
    check_real,
    is_int,
)


@dataclass(frozen=True)
class TrainConfig:
    """Everything :func:`~selfcal.training.fit` needs besides the model, data and loss.

    The defaults are the [BO4SC] "Standard" protocol: Adam, full batch, plain mean CE. The
    papers' CIFAR protocol (methods §0) is ``TrainConfig(epochs=350, optimizer="sgd", lr=0.1,
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
    * ``best_by``: which validation epoch is best (the first one that is): ``"nll"`` (lowest
      validation NLL), ``"accuracy"`` (highest validation accuracy: the [MC] / [MetaReg]
      reference code's checkpoint rule, which keeps the model whose error is lowest however
      over-confident it has become), ``"ece"`` (lowest 15-bin ECE) or ``"refinement"``
      (lowest refinement loss: the validation NLL after temperature scaling fitted on the
      validation predictions -- Berta et al. (2025) stop there, then recalibrate).
    * ``early_stopping``: patience in epochs since the best epoch (needs validation data).
    * ``restore_best``: load the parameters of the best epoch at the end.
    * ``seed``: seeds the minibatch shuffling and any randomness inside the model (dropout).
    * ``deterministic``: on a CUDA device, run with cuDNN's deterministic kernels
      (``cudnn.deterministic = True``, ``cudnn.benchmark = False``) and
      ``torch.use_deterministic_algorithms(True)`` for the run (restored afterwards), so two
      runs on one GPU give bit-identical parameters, at some cost in speed; an operation with
      no deterministic kernel then raises instead of running. It needs
      ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` in the environment before Python starts (a one-line
      error says so otherwise). On the CPU, runs are deterministic already and it changes
      nothing.
    * ``compile``: compile the model in place (:meth:`torch.nn.Module.compile`, TorchInductor)
      before the first epoch; it stays compiled after :func:`~selfcal.training.fit`. The first
      epoch pays the compilation (tens of seconds); the numbers equal the eager run's to
      float32 rounding (``tests/training/test_speed_options.py``; ``SELFCAL_SLOW_TESTS=1``
      runs it with TorchInductor's generated code, otherwise with the code-free
      ``aot_eager`` backend).
    * ``autocast``: ``"bf16"`` runs the training forward pass under
      ``torch.autocast(dtype=torch.bfloat16)`` (the loss is computed on float32 logits; the
      parameters, their gradients and the optimizer stay float32); ``None`` (default) runs in
      the model's dtype. bfloat16 keeps 8 bits of mantissa: one SGD step's update differs
      from float32's by about 0.5%, and a small MLP's test NLL after 15 epochs by 0.001 nat
      (``tests/training/test_speed_options.py`` bounds them at 2% and 0.02 nat). Validation
      and prediction run in full precision. Plain and mixup steps only; the meta step refuses
      both options.
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
    best_by: Literal["nll", "accuracy", "ece", "refinement"] = "nll"
    early_stopping: int | None = None
    restore_best: bool = False
    seed: int = 0
    device: str = "cpu"
    deterministic: bool = False
    compile: bool = False
    autocast: Literal["bf16"] | None = None

    def __post_init__(self) -> None:
        check_int("epochs", self.epochs)
        check_optional_int("batch_size", self.batch_size)
        check_optional_int("early_stopping", self.early_stopping)
        check_int("seed", self.seed, minimum=0)
        check_positive("lr", self.lr)
        check_real("momentum", self.momentum, 0.0, 1.0, high_open=True)
        check_nonnegative("weight_decay", self.weight_decay)
        check_real("lr_decay", self.lr_decay, 0.0, 1.0, low_open=True)
        if self.grad_clip is not None:
            check_positive("grad_clip", self.grad_clip)
        for flag in ("deterministic", "compile"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag} must be True or False, got {getattr(self, flag)!r}")
        if self.autocast is not None:
            check_choice("autocast", self.autocast, ("bf16",))
        check_choice("optimizer", self.optimizer, ("adam", "sgd"))
        check_choice("best_by", self.best_by, ("nll", "accuracy", "ece", "refinement"))
        milestones = tuple(self.milestones)
        if not all(is_int(m) and m >= 1 for m in milestones) or list(milestones) != sorted(
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
