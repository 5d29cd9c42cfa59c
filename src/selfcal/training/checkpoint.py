"""The checkpoint with the lowest validation NLL (or refinement loss), kept beside a run that
goes on to its end."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from selfcal.exceptions import DegenerateCalibration
from selfcal.models.inference import PREDICT_BATCH, predict_logits
from selfcal.predictions import Predictions
from selfcal.recalibration import refinement_loss

CRITERIA = ("nll", "refinement")
"""What a checkpoint can be selected by: the validation NLL, or the refinement loss -- the
validation NLL after a temperature fitted on the same predictions
(:func:`selfcal.recalibration.refinement_loss`; Berta et al., 2025, stop there, then
recalibrate)."""


@dataclass
class Kept:
    """The lowest score offered so far under one criterion, its epoch and its parameters."""

    score: float = math.inf
    epoch: int = -1
    state: dict[str, torch.Tensor] | None = None


class BestCheckpoint:
    """The parameters with the lowest validation NLL offered so far (the first of equals; a
    non-finite NLL is never kept): early stopping with unlimited patience, without stopping,
    so one run gives both its last iterate and its best checkpoint.

    ``criteria`` (default ``("nll",)``): the criteria of :data:`CRITERIA` to keep a best
    checkpoint for, all from one forward pass over the validation rows per offer; ``nll``,
    ``epoch``, ``state`` and :meth:`restore` read the first criterion's, ``kept[name]`` and
    ``restore(model, name)`` any of them.

    ``after_epoch(epoch, model, history)`` is :func:`selfcal.training.fit`'s ``on_epoch``
    callback; :meth:`offer` also takes functional parameters (BO4SC's ``theta``, applied to
    the module with :func:`torch.func.functional_call`). The NLL is
    ``cross_entropy(logits.double(), y)`` of the eval-mode logits, in chunks of ``chunk`` rows.
    """

    def __init__(
        self,
        x_val: torch.Tensor,
        y_val: torch.Tensor,
        chunk: int = PREDICT_BATCH,
        criteria: tuple[str, ...] = ("nll",),
    ) -> None:
        unknown = [c for c in criteria if c not in CRITERIA]
        if not criteria or unknown:
            raise ValueError(f"criteria must be some of {CRITERIA}, got {criteria!r}")
        self.x, self.y, self.chunk = x_val, y_val, chunk
        self.kept = {c: Kept() for c in criteria}
        self._first = self.kept[criteria[0]]

    @property
    def nll(self) -> float:
        """The first criterion's lowest score (the validation NLL by default)."""
        return self._first.score

    @property
    def epoch(self) -> int:
        return self._first.epoch

    @property
    def state(self) -> dict[str, torch.Tensor] | None:
        return self._first.state

    def after_epoch(self, epoch: int, model: nn.Module, _: Any = None) -> bool:
        self.offer(epoch, model)
        return False

    def offer(self, epoch: int, model: nn.Module, params: Mapping[str, Any] | None = None) -> None:
        """Keep the model's state (with ``params`` in place of its parameters) under every
        criterion whose validation score is the lowest so far."""
        logits = self._logits(model, params).double()
        state = None
        for criterion, kept in self.kept.items():
            score = self._score(criterion, logits)
            if score < kept.score:  # NaN never is
                if state is None:
                    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                    state.update({k: v.detach().clone() for k, v in (params or {}).items()})
                kept.score, kept.epoch, kept.state = score, epoch, state

    def _score(self, criterion: str, logits: torch.Tensor) -> float:
        nll = float(torch.nn.functional.cross_entropy(logits, self.y))
        if criterion == "nll" or not math.isfinite(nll):
            return nll
        with warnings.catch_warnings():  # all correct: T = 1, the NLL itself; that is right
            warnings.simplefilter("ignore", DegenerateCalibration)
            return float(refinement_loss(Predictions.from_logits(logits, self.y)))

    def restore(self, model: nn.Module, criterion: str | None = None) -> None:
        """Load the kept parameters (of ``criterion``; default the first) into ``model``; a
        ``RuntimeError`` when none was kept (every validation score was NaN or infinite)."""
        kept = self._first if criterion is None else self.kept[criterion]
        if kept.state is None:
            raise RuntimeError("no checkpoint had a finite validation score")
        model.load_state_dict(kept.state)

    def _logits(self, model: nn.Module, params: Mapping[str, Any] | None) -> torch.Tensor:
        return predict_logits(model, self.x, self.chunk, params=params)
