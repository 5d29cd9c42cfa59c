"""One run of the BO4SC-on-images study: train cross-entropy or a BO4SC candidate in one regime
and evaluate the last iterate before and after temperature scaling.

Both methods follow the image recipe (:mod:`selfcal.studies._images`) on the same reduced
training set (the meta-learning studies' 8:1:1 split: BO4SC's outer loss reads the
meta-validation split; the validation split selects hyperparameters and fits the temperature).
CE is the recipe itself. BO4SC's inner steps are the recipe's SGD steps written for its
mean-normalised weighted loss ``(1/B) sum_i w_i CE_i``: the recipe sums the loss over the
batch, so its step on ``sum_i CE_i`` with learning rate ``lr``, weight decay ``wd`` and
clipping at norm ``c`` equals a step on the mean with ``B lr``, ``wd / B`` and ``c / B`` --
with every weight 1, BO4SC's inner training is CE's (up to the batch order and the
``1e-6`` in the clipping). The epoch budget is the regime's: ``epochs x floor(n / B)`` inner
steps, ``T`` per outer iteration, the learning rate x0.1 at the milestones. Both are evaluated
at the end of training (no checkpoint selection: BO4SC has none, and CE is scored the same way).

BO4SC runs also record, for Fig. 3 (right panel) on images, every training row's final weight,
its cross-entropy under the final model and whether the final model classifies it correctly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from selfcal.experiments import RunResult, RunSpec
from selfcal.methods import recipe_bo4sc
from selfcal.studies import _images
from selfcal.studies.bo4sc_images.protocol import MODELS, BO4SCImagesProtocol


def execute(protocol: BO4SCImagesProtocol, group: list[RunSpec]) -> list[RunResult]:
    return [run(protocol, spec) for spec in group]


def run(protocol: BO4SCImagesProtocol, spec: RunSpec) -> RunResult:
    from selfcal.models import build_model

    regime = protocol.regime(str(spec.hparams["regime"]))
    data, train, meta_val = _images.load_splits(protocol, spec.dataset, spec.seed)
    model = build_model(MODELS[spec.dataset], seed=spec.seed, n_classes=data.n_classes)
    transform = _images.augmentation(data, spec.dataset)
    artefacts: dict[str, np.ndarray] = {}
    metrics: dict[str, float] = {}
    if spec.method == "ce":
        train_ce(protocol, regime, spec, model, train, (data.val.x, data.val.y), transform)
    else:
        options = {k[3:]: v for k, v in spec.hparams.items() if k.startswith("hp.")}
        device = _images.device_for(spec.dataset)
        fitted = train_bo4sc(
            protocol, regime, spec.seed, model.to(device), train, meta_val, options, transform
        )
        artefacts, metrics = weight_record(model, fitted, train)
    scores, _ = _images.evaluate(protocol, model, data)
    return RunResult(metrics={**scores, **metrics}, artefacts=artefacts)


def train_ce(
    protocol: BO4SCImagesProtocol,
    regime: _images.Regime,
    spec: RunSpec,
    model: torch.nn.Module,
    train: tuple,
    val: tuple,
    transform: Any,
) -> None:
    from selfcal.losses import build_loss
    from selfcal.training import fit

    config = protocol.train_config(regime, spec.dataset, spec.seed)
    loss = build_loss("ce", reduction="sum")
    fit(model, train, val, config=config, loss_fn=loss, batch_transform=transform)


def train_bo4sc(
    protocol: BO4SCImagesProtocol,
    regime: _images.Regime,
    seed: int,
    model: torch.nn.Module,
    train: tuple,
    meta_val: tuple,
    options: dict[str, Any],
    transform: Any,
) -> Any:
    """Minibatch BO4SC with the recipe's steps (module doc,
    :func:`selfcal.methods.recipe.recipe_bo4sc`); ``options``: ``weight_lr``,
    ``inner_steps``, ``beta``."""
    estimator = recipe_bo4sc(
        protocol.recipe(regime),
        len(train[0]),
        options,
        val_batch_size=min(len(meta_val[0]), protocol.val_batch_size),
        transform=transform,
        seed=seed,
        history_rows=200,
    )
    return estimator.fit(model, train, meta_val)


def weight_record(
    model: torch.nn.Module, fitted: Any, train: tuple
) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Every training row's final weight, final cross-entropy and correctness (artefacts), and
    their summaries (metrics): the mean weight, the share of weights below 0.5, and the mean
    weight of the rows the final model classifies correctly and (when there are any) of those
    it misclassifies."""
    import torch.nn.functional as F

    z = _images.logits(model, train[0])
    loss = F.cross_entropy(z, train[1], reduction="none")
    correct = z.argmax(1) == train[1]
    w = fitted.weights_.detach().double().cpu()
    metrics = {
        "weight_mean": float(w.mean()),
        "weight_below_half": float((w < 0.5).double().mean()),
    }
    for name, rows in (("weight_mean_correct", correct), ("weight_mean_wrong", ~correct)):
        if rows.any():  # a memorised training set has no misclassified row
            metrics[name] = float(w[rows].mean())
    artefacts = {
        "train_weight": w.float().numpy(),
        "train_loss": loss.float().numpy(),
        "train_correct": correct.numpy(),
        "weight_quantiles": fitted.weight_quantiles_.numpy(),
    }
    return artefacts, metrics
