"""What a training run leaves behind: a frozen :class:`History` (or, on NaN/inf,
:class:`~selfcal.exceptions.TrainingDiverged`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

StopReason = Literal["completed", "early_stopping", "callback"]


@dataclass(frozen=True)
class History:
    """Per-epoch record of a :func:`~selfcal.training.fit` run (epoch ``e`` is index ``e``).

    ``train_loss[e]`` is the mean of the epoch's minibatch losses weighted by batch size (for
    a mean-reduced loss: the mean per-sample loss seen during the epoch, before each step).
    ``lr[e]`` is the learning rate the epoch trained with. Validation entries (empty without
    validation data) are computed after the epoch in eval mode: NLL, accuracy and 15-bin ECE
    from :mod:`selfcal.metrics`, and with ``best_by="refinement"`` the refinement loss (the
    NLL after temperature scaling fitted on those validation predictions,
    :func:`selfcal.recalibration.refinement_loss`; empty otherwise: a fit per epoch is not free).
    ``best_epoch`` is the first epoch of lowest validation NLL -- or, by
    ``TrainConfig(best_by=...)``, of highest accuracy, lowest ECE or lowest refinement loss
    (``None`` without validation data). ``wall_time`` is in seconds.
    """

    train_loss: tuple[float, ...] = ()
    lr: tuple[float, ...] = ()
    val_nll: tuple[float, ...] = ()
    val_accuracy: tuple[float, ...] = ()
    val_ece: tuple[float, ...] = ()
    val_refinement: tuple[float, ...] = ()
    epoch_time: tuple[float, ...] = ()
    best_epoch: int | None = None
    stop_reason: StopReason = "completed"
    restored_best: bool = False
    wall_time: float = 0.0

    @property
    def epochs_run(self) -> int:
        return len(self.train_loss)

    @property
    def best_val_nll(self) -> float | None:
        return None if self.best_epoch is None else self.val_nll[self.best_epoch]

    def __repr__(self) -> str:
        parts = [f"epochs_run={self.epochs_run}", f"stop_reason={self.stop_reason!r}"]
        if self.train_loss:
            parts.append(f"final_train_loss={self.train_loss[-1]:.4g}")
        if self.best_epoch is not None:
            parts.append(f"best_epoch={self.best_epoch}")
            parts.append(f"best_val_nll={self.best_val_nll:.4g}")
            parts.append(f"val_accuracy={self.val_accuracy[self.best_epoch]:.4g}")
        parts.append(f"wall_time={self.wall_time:.3g}s")
        return f"History({', '.join(parts)})"


@dataclass
class HistoryRecorder:
    """Mutable accumulator behind the frozen :class:`History` snapshots."""

    train_loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    val_nll: list[float] = field(default_factory=list)
    val_accuracy: list[float] = field(default_factory=list)
    val_ece: list[float] = field(default_factory=list)
    val_refinement: list[float] = field(default_factory=list)
    epoch_time: list[float] = field(default_factory=list)
    best_epoch: int | None = None
    best_by: str = "nll"

    def add_validation(
        self, epoch: int, nll: float, accuracy: float, ece: float, refinement: float | None
    ) -> bool:
        """Record validation numbers (``refinement``: ``None`` when not computed); return
        whether ``epoch`` is a new best: strictly better by ``best_by`` -- lower ``"nll"``,
        ``"ece"`` or ``"refinement"``, higher ``"accuracy"``."""
        self.val_nll.append(nll)
        self.val_accuracy.append(accuracy)
        self.val_ece.append(ece)
        if refinement is not None:
            self.val_refinement.append(refinement)
        series = {
            "nll": self.val_nll,
            "accuracy": [-a for a in self.val_accuracy],
            "ece": self.val_ece,
            "refinement": self.val_refinement,
        }[self.best_by]
        best = self.best_epoch
        improved = best is None or series[epoch] < series[best]
        if improved:
            self.best_epoch = epoch
        return improved

    def snapshot(
        self, wall_time: float, stop_reason: StopReason = "completed", restored: bool = False
    ) -> History:
        return History(
            train_loss=tuple(self.train_loss),
            lr=tuple(self.lr),
            val_nll=tuple(self.val_nll),
            val_accuracy=tuple(self.val_accuracy),
            val_ece=tuple(self.val_ece),
            val_refinement=tuple(self.val_refinement),
            epoch_time=tuple(self.epoch_time),
            best_epoch=self.best_epoch,
            stop_reason=stop_reason,
            restored_best=restored,
            wall_time=wall_time,
        )
