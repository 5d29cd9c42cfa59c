"""The checkpoint with the lowest validation NLL, kept beside a run that goes on to its end."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

EVAL_CHUNK = 1000
"""Rows per forward pass when scoring the validation set."""


class BestCheckpoint:
    """The parameters with the lowest validation NLL offered so far (the first of equals; a
    non-finite NLL is never kept): early stopping with unlimited patience, without stopping,
    so one run gives both its last iterate and its best checkpoint.

    ``after_epoch(epoch, model, history)`` is :func:`selfcal.training.fit`'s ``on_epoch``
    callback; :meth:`offer` also takes functional parameters (BO4SC's ``theta``, applied to
    the module with :func:`torch.func.functional_call`). The NLL is
    ``cross_entropy(logits.double(), y)`` of the eval-mode logits, in chunks of ``chunk`` rows.
    """

    def __init__(self, x_val: torch.Tensor, y_val: torch.Tensor, chunk: int = EVAL_CHUNK) -> None:
        self.x, self.y, self.chunk = x_val, y_val, chunk
        self.nll, self.epoch = math.inf, -1
        self.state: dict[str, torch.Tensor] | None = None

    def after_epoch(self, epoch: int, model: nn.Module, _: Any = None) -> bool:
        self.offer(epoch, model)
        return False

    def offer(self, epoch: int, model: nn.Module, params: Mapping[str, Any] | None = None) -> None:
        """Keep the model's state (with ``params`` in place of its parameters) if its
        validation NLL is the lowest so far."""
        nll = float(torch.nn.functional.cross_entropy(self._logits(model, params).double(), self.y))
        if nll < self.nll:
            state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            state.update({k: v.detach().clone() for k, v in (params or {}).items()})
            self.nll, self.epoch, self.state = nll, epoch, state

    def restore(self, model: nn.Module) -> None:
        """Load the kept parameters into ``model``; a ``RuntimeError`` when none was kept
        (every validation NLL was NaN or infinite)."""
        if self.state is None:
            raise RuntimeError("no checkpoint had a finite validation NLL")
        model.load_state_dict(self.state)

    def _logits(self, model: nn.Module, params: Mapping[str, Any] | None) -> torch.Tensor:
        from torch.func import functional_call

        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                return torch.cat(
                    [
                        model(c) if params is None else functional_call(model, dict(params), (c,))
                        for c in self.x.split(self.chunk)
                    ]
                )
        finally:
            model.train(was_training)
