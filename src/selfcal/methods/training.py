"""How one candidate of a method trains: :func:`train_method` trains a network in place as
a method of the catalogue (:mod:`selfcal.methods.catalogue`) with a candidate's
hyperparameters and a :class:`~selfcal.methods.recipe.Recipe` -- by the one training loop
(:func:`selfcal.training.fit` with the method's step strategy,
:func:`~selfcal.methods.catalogue.method_step`) or by minibatch BO4SC
(:func:`~selfcal.methods.recipe.recipe_bo4sc`) -- offering its parameters to a checkpoint
after every epoch; :func:`network_logits` reads its predictions.

Used by ``selfcal train`` (:mod:`selfcal.pipeline.fitting`) and by the studies (the benchmark's
executor, the image studies' evaluation).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from selfcal.methods.catalogue import MethodSpec, method_step
from selfcal.methods.recipe import Recipe, bo4sc_iterations, recipe_bo4sc, train_config
from selfcal.training import BestCheckpoint, fit, predict_logits

BO4SC_VAL_BATCH = 1000
"""By minibatches, BO4SC's outer loss reads at most this many meta-validation rows (the
benchmark's ``val_batch_size``)."""


def network_logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Eval-mode logits, float64 on the CPU, :data:`~selfcal.models.inference.PREDICT_BATCH`
    rows at a time."""
    return predict_logits(model, x, out_device="cpu").double()


def train_method(
    spec: MethodSpec,
    options: Mapping[str, Any],
    recipe: Recipe,
    model: nn.Module,
    train: tuple,
    meta_val: tuple,
    checkpoint: BestCheckpoint,
    *,
    seed: int,
    device: str = "cpu",
    transform: Any = None,
    val_batch_size: int = BO4SC_VAL_BATCH,
    on_epochs: Callable[[int], None] | None = None,
    patience: int | None = None,
) -> dict[str, float]:
    """Train ``model`` in place as the method ``spec`` with the candidate's ``options`` and
    the recipe, offering the parameters to ``checkpoint`` after every epoch (for BO4SC after
    the outer iteration that completes each epoch); ``on_epochs(n)`` hears of every ``n``
    epochs done. Training stops once ``patience`` epochs have passed since the checkpoint's
    epoch (``None``: the recipe's every epoch). The training of ``selfcal train`` and of the
    benchmark study (which trains every epoch).

    A loss, mixup or meta-learned method trains in the one training loop
    (:func:`selfcal.training.fit` with :func:`~selfcal.methods.catalogue.method_step`), BO4SC
    by :func:`~selfcal.methods.recipe.recipe_bo4sc` with the recipe's optimizer as its inner
    step, learning from ``meta_val`` (by minibatches, at most ``val_batch_size`` rows an outer
    step). ``transform``: the training batches' augmentation. Returns BO4SC's weight summaries
    (``weight_mean``, ``weight_below_half``; empty for the other methods)."""
    count = on_epochs or (lambda n: None)
    if spec[0] == "bo4sc":
        return _train_bo4sc(
            options,
            recipe,
            model,
            train,
            meta_val,
            checkpoint,
            seed,
            transform,
            val_batch_size,
            count,
            patience,
        )

    def on_epoch(epoch: int, net: nn.Module, history: Any) -> bool:
        checkpoint.after_epoch(epoch, net, history)
        count(1)
        return stalled(checkpoint, epoch, patience)

    step = method_step(spec, options, meta_val)
    config = train_config(recipe, seed, device)
    fit(model, train, None, config=config, step=step, on_epoch=on_epoch, batch_transform=transform)
    return {}


def _train_bo4sc(
    options: Mapping[str, Any],
    recipe: Recipe,
    model: nn.Module,
    train: tuple,
    meta_val: tuple,
    checkpoint: BestCheckpoint,
    seed: int,
    transform: Any,
    val_batch_size: int,
    count: Callable[[int], None],
    patience: int | None,
) -> dict[str, float]:
    """:func:`train_method` for BO4SC."""
    steps, n = int(options["inner_steps"]), len(train[0])
    _, per_epoch = bo4sc_iterations(recipe, n, steps)

    def offer(iteration: int, params: Any) -> bool:
        done, before = (iteration + 1) * steps // per_epoch, iteration * steps // per_epoch
        if done > before:
            checkpoint.offer(done - 1, model, params)
            count(done - before)
        return done > before and stalled(checkpoint, done - 1, patience)

    fitted = recipe_bo4sc(
        recipe,
        n,
        dict(options),
        val_batch_size=None if recipe.batch_size is None else min(len(meta_val[0]), val_batch_size),
        transform=transform,
        seed=seed,
        record_weights=False,
        callback=offer,
    ).fit(model, train, meta_val)
    w = fitted.weights_.detach().double().cpu()
    return {"weight_mean": float(w.mean()), "weight_below_half": float((w < 0.5).double().mean())}


def stalled(checkpoint: BestCheckpoint, epoch: int, patience: int | None) -> bool:
    """Whether ``patience`` epochs have passed since the checkpoint's epoch (epochs from 0;
    never with ``patience=None``)."""
    return patience is not None and epoch - checkpoint.epoch >= patience
