"""The papers' SGD recipe and its regimes (the :mod:`selfcal.studies._images` package doc), as
a :class:`selfcal.methods.recipe.Recipe` (the one recipe type of ``selfcal train`` and every
study, with its :class:`~selfcal.training.TrainConfig` and minibatch BO4SC)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from selfcal.experiments.study import StudyProtocol
from selfcal.methods import Recipe, train_config
from selfcal.selection import Grid, candidates

CURVE_POINTS = 12
"""Per-epoch curves are recorded at about this many epochs of a regime (each point costs a
test-set pass and a temperature fit, about as much as an epoch on MNIST-1D)."""
CIFAR = ("cifar10", "cifar100")
CIFAR_FOLDERS = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}


@dataclass(frozen=True)
class Regime:
    """A training length: ``epochs`` with the learning rate x0.1 at each of ``milestones``."""

    name: str
    epochs: int
    milestones: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.epochs < 1 or any(not 0 < m < self.epochs for m in self.milestones):
            raise ValueError(f"regime {self.name!r}: milestones must lie inside 1..epochs")

    @property
    def figure_epochs(self) -> tuple[int, ...]:
        """The papers' four snapshot epochs scaled to this schedule: 1/7 of it, each
        milestone, the end (350 epochs: 50, 150, 250, 350)."""
        return tuple(dict.fromkeys((max(1, round(self.epochs / 7)), *self.milestones, self.epochs)))

    @property
    def curve_every(self) -> int:
        return max(1, self.epochs // CURVE_POINTS)


SHORT = Regime("short", 35, (15, 25))
LONG = Regime("long", 105, (45, 75))
PAPER = Regime("paper", 350, (150, 250))
"""The papers' CIFAR schedule (350 epochs, drops at 150 and 250)."""


@dataclass(frozen=True)
class ImageProtocol(StudyProtocol):
    """The recipe's settings, the regimes, the datasets' sizes and the tuned grids."""

    datasets: tuple[str, ...] = ("mnist1d", "digits-images")
    mnist1d_sizes: tuple[int, int, int] = (4000, 2000, 10000)
    regimes: tuple[Regime, ...] = (SHORT, LONG)
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 5e-4
    batch_size: int = 128
    grad_clip: float = 2.0
    n_bins: int = 15
    grids: tuple[Grid, ...] = ()
    cifar_grids: tuple[Grid, ...] = field(default=())
    """The grids on CIFAR (350 GPU epochs a candidate): the papers' own values."""

    def regimes_for(self, dataset: str) -> tuple[Regime, ...]:
        return (PAPER,) if dataset in CIFAR else self.regimes

    def regime(self, name: str) -> Regime:
        return next(r for r in (*self.regimes, PAPER) if r.name == name)

    def candidates(self, dataset: str, method: str) -> list[dict[str, Any]]:
        return candidates(self.cifar_grids if dataset in CIFAR else self.grids, method)

    def train_config(self, regime: Regime, dataset: str, seed: int, **extra: Any) -> Any:
        """The :class:`~selfcal.training.TrainConfig` of :meth:`recipe` for one seed (CIFAR on
        the GPU when there is one, :func:`device_for`)."""
        return train_config(self.recipe(regime), seed, device_for(dataset), **extra)

    def recipe(self, regime: Regime, model: str = "") -> Recipe:
        """The recipe of ``regime``: SGD with the protocol's settings (``model``: the backbone,
        empty where the study picks it per dataset)."""
        return Recipe(
            model,
            regime.epochs,
            "sgd",
            self.lr,
            self.batch_size,
            regime.milestones,
            self.momentum,
            self.weight_decay,
            self.grad_clip,
        )


def device_for(dataset: str) -> str:
    """CIFAR on the GPU when there is one; the CPU datasets stay on the CPU, so their runs are
    reproduced bit for bit."""
    return "cuda" if dataset in CIFAR and torch.cuda.is_available() else "cpu"


def augmentation(data: Any, dataset: str) -> Any:
    """CIFAR: RandomCrop(32, padding 4) + horizontal flip, padding with black as the reference
    code (which pads before normalising); nothing elsewhere."""
    if dataset not in CIFAR:
        return None
    from selfcal.data.augment import black_fill, random_crop_flip

    return partial(random_crop_flip, padding=4, fill=black_fill(data))
