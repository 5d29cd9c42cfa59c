"""The papers' SGD recipe and its regimes (the :mod:`selfcal.studies._images` package doc), a
training recipe of any study (:class:`Recipe`) and what is built from one: its
:class:`~selfcal.training.TrainConfig`, and minibatch BO4SC with the recipe's optimizer as its
inner step."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from selfcal.experiments.selection import Grid, candidates
from selfcal.experiments.study import StudyProtocol

DECAY = 0.1
"""The learning-rate factor at each milestone (MultiStepLR's ``gamma``)."""
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


@dataclass(frozen=True)
class Recipe:
    """How a method trains on a dataset: the backbone (``hidden``: the MLP's widths) and
    the optimizer and schedule (:class:`selfcal.training.TrainConfig`'s fields;
    ``batch_size=None``: full batch)."""

    model: str
    epochs: int
    optimizer: str
    lr: float
    batch_size: int | None
    milestones: tuple[int, ...] = ()
    momentum: float = 0.9
    weight_decay: float = 0.0
    grad_clip: float | None = None
    hidden: tuple[int, ...] | None = None


def device_for(dataset: str) -> str:
    """CIFAR on the GPU when there is one; the CPU datasets stay on the CPU, so their runs are
    reproduced bit for bit."""
    return "cuda" if dataset in CIFAR and torch.cuda.is_available() else "cpu"


def train_config(recipe: Recipe, seed: int, device: str = "cpu", **extra: Any) -> Any:
    """The :class:`~selfcal.training.TrainConfig` of ``recipe`` for one seed on ``device``."""
    from selfcal.training import TrainConfig

    return TrainConfig(
        epochs=recipe.epochs,
        optimizer=recipe.optimizer,  # type: ignore[arg-type]
        lr=recipe.lr,
        momentum=recipe.momentum,
        weight_decay=recipe.weight_decay,
        batch_size=recipe.batch_size,
        milestones=recipe.milestones,
        grad_clip=recipe.grad_clip,
        seed=seed,
        device=device,
        **extra,
    )


def augmentation(data: Any, dataset: str) -> Any:
    """CIFAR: RandomCrop(32, padding 4) + horizontal flip, padding with black as the reference
    code (which pads before normalising); nothing elsewhere."""
    if dataset not in CIFAR:
        return None
    from selfcal.data.augment import black_fill, random_crop_flip

    return partial(random_crop_flip, padding=4, fill=black_fill(data))


def mean_loss_sgd(
    lr: float, momentum: float, weight_decay: float, grad_clip: float | None, rows: int
) -> Any:
    """The recipe's SGD step on a loss summed over ``rows`` rows, rewritten for the mean of that
    loss (BO4SC's inner loss): learning rate ``rows lr``, weight decay ``wd / rows`` and clipping
    at ``c / rows`` give the same step (a differentiable :class:`selfcal.bilevel.SGD`)."""
    from selfcal.bilevel import SGD

    return SGD(
        lr * rows,
        momentum=momentum,
        weight_decay=weight_decay / rows,
        max_norm=None if grad_clip is None else grad_clip / rows,
    )


def recipe_bo4sc(
    recipe: Recipe,
    n_train: int,
    options: dict[str, Any],
    *,
    val_batch_size: int | None,
    transform: Any,
    seed: int,
    **extra: Any,
) -> Any:
    """Minibatch (or, with ``batch_size=None``, full-batch) BO4SC with the recipe's optimizer as
    its inner step and the recipe's budget of ``epochs x steps per epoch`` inner steps, ``T``
    (``options["inner_steps"]``) per outer iteration; ``options`` also give ``weight_lr`` and
    ``beta``. The recipe's losses are sums over a batch of ``B`` rows and BO4SC's is the mean,
    so SGD's learning rate, weight decay and clipping norm become ``B lr``, ``wd / B`` and
    ``c / B`` (:func:`mean_loss_sgd`: the same step; Adam is invariant to the loss scale). The
    inner learning rate drops x0.1 at the recipe's milestones, counted in outer iterations.
    ``extra``: further :class:`~selfcal.bilevel.BO4SC` arguments. Returns the unfitted
    estimator."""
    from selfcal.bilevel import BO4SC, Adam, Unrolled

    steps = int(options["inner_steps"])
    rows = n_train if recipe.batch_size is None else recipe.batch_size
    per_epoch = n_train // rows
    milestones = [m * per_epoch // steps for m in recipe.milestones]
    inner: Any = (
        Adam(recipe.lr, weight_decay=recipe.weight_decay)
        if recipe.optimizer == "adam"
        else mean_loss_sgd(recipe.lr, recipe.momentum, recipe.weight_decay, recipe.grad_clip, rows)
    )
    schedule: Callable[[int], float] = lambda i: DECAY ** sum(i >= m for m in milestones)  # noqa: E731
    return BO4SC(
        batch_size=recipe.batch_size,
        val_batch_size=val_batch_size,
        estimator=Unrolled(steps),
        inner_optimizer=inner,
        outer_iterations=recipe.epochs * per_epoch // steps,
        weight_lr=float(options["weight_lr"]),
        beta=float(options["beta"]),
        inner_lr_schedule=schedule,
        batch_transform=transform,
        seed=seed,
        **extra,
    )
