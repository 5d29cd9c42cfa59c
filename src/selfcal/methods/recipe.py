"""How a method trains: a :class:`Recipe` (backbone, optimizer, schedule) and what is built
from one -- the backbone, the :class:`~selfcal.training.TrainConfig` of the one training loop,
and minibatch BO4SC with the recipe's optimizer as its inner step.

One recipe type for ``selfcal train`` and every study: :data:`TABULAR` is the benchmark's
tabular recipe and ``selfcal train``'s default, the studies build the papers' SGD recipe
(:mod:`selfcal.studies._images`) from the same class.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

DECAY = 0.1
"""The learning-rate factor at each milestone (MultiStepLR's ``gamma``)."""
FULL_BATCH_MAX_ROWS = 4096
"""Above this many training rows, ``batch_size="auto"`` trains by minibatches."""
AUTO_BATCH_SIZE = 512
"""The minibatch size ``"auto"`` picks above :data:`FULL_BATCH_MAX_ROWS` rows."""


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


TABULAR = Recipe("mlp", 400, "adam", 1e-2, None, hidden=(64, 64, 64))
"""The benchmark's tabular recipe and ``selfcal train``'s: a 3 x 64 ReLU MLP, full-batch Adam at
1e-2 for 400 epochs (the BO4SC study's ``overfit`` regime, where plain cross-entropy over-fits
Blobs 1.7 and Spiral 3.5; results/bo4sc)."""


def resolve_batch_size(batch_size: int | str | None, n_train: int) -> int | None:
    """The batch size for ``n_train`` training rows (``None``: full batch): ``"auto"`` is full
    batch up to :data:`FULL_BATCH_MAX_ROWS` rows and :data:`AUTO_BATCH_SIZE` above; a batch
    of ``n_train`` rows or more is the full batch."""
    if batch_size == "auto":
        return None if n_train <= FULL_BATCH_MAX_ROWS else AUTO_BATCH_SIZE
    if batch_size is None or int(batch_size) >= n_train:
        return None
    return int(batch_size)


def build_network(recipe: Recipe, n_classes: int, seed: int, n_features: int = 0) -> nn.Module:
    """The recipe's backbone for ``n_classes`` (an MLP also needs ``n_features``), initialised
    from ``seed`` (:func:`selfcal.models.build_model`)."""
    from selfcal.models import build_model

    if recipe.model == "mlp":
        return build_model(
            "mlp", seed=seed, n_features=n_features, n_classes=n_classes, hidden=recipe.hidden
        )
    return build_model(recipe.model, seed=seed, n_classes=n_classes)


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


def bo4sc_iterations(recipe: Recipe, n_train: int, inner_steps: int) -> tuple[int, int]:
    """``(outer iterations, steps per epoch)``: the recipe's budget of ``epochs x steps per
    epoch`` inner steps, ``inner_steps`` per outer iteration; a budget below one outer
    iteration is a ``ValueError``."""
    rows = n_train if recipe.batch_size is None else recipe.batch_size
    per_epoch = n_train // rows
    iterations = recipe.epochs * per_epoch // inner_steps
    if iterations < 1:
        raise ValueError(
            f"BO4SC with T = {inner_steps} inner steps needs at least "
            f"{-(-inner_steps // per_epoch)} epochs (got {recipe.epochs})"
        )
    return iterations, per_epoch


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
    its inner step and the recipe's budget (:func:`bo4sc_iterations`), ``T``
    (``options["inner_steps"]``) inner steps per outer iteration; ``options`` also give
    ``weight_lr`` and ``beta``. The recipe's losses are sums over a batch of ``B`` rows and
    BO4SC's is the mean, so SGD's learning rate, weight decay and clipping norm become
    ``B lr``, ``wd / B`` and ``c / B`` (:func:`mean_loss_sgd`: the same step; Adam is invariant
    to the loss scale). The inner learning rate drops x0.1 at the recipe's milestones, counted
    in outer iterations. ``extra``: further :class:`~selfcal.bilevel.BO4SC` arguments. Returns
    the unfitted estimator."""
    from selfcal.bilevel import BO4SC, Adam, AutogradUnrolled

    steps = int(options["inner_steps"])
    rows = n_train if recipe.batch_size is None else recipe.batch_size
    iterations, per_epoch = bo4sc_iterations(recipe, n_train, steps)
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
        estimator=AutogradUnrolled(steps),
        inner_optimizer=inner,
        outer_iterations=iterations,
        weight_lr=float(options["weight_lr"]),
        beta=float(options["beta"]),
        inner_lr_schedule=schedule,
        batch_transform=transform,
        seed=seed,
        **extra,
    )
