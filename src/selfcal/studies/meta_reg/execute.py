"""One run of the meta-regularization study: train a method candidate in one regime and keep
the checkpoint with the best validation accuracy; evaluate it before and after temperature
scaling, at every bin count of [MetaReg] Fig. 5, and record the per-epoch curves (test ECE,
validation temperature, and for a γ-Net the mean and spread of its γ on the test set).

Splits: the loader's train / validation / test, and a meta-validation set carved from the
training split (a stratified, seeded 1/9 of it: the paper's 8:1:1 between train and
meta-validation); every method trains on the same reduced training set, so the comparison is
fair to the methods that need no meta-validation. CIFAR: the reference 40k / 5k / 5k split of
the 50k training images (``split="meta"``); test = the official 10k.
"""

from __future__ import annotations

from typing import Any

import torch

from selfcal.experiments import RunResult, RunSpec
from selfcal.experiments.study import TEST_LABELS, TEST_LOGITS
from selfcal.methods import method_step
from selfcal.studies import _images
from selfcal.studies._images import load_splits, meta_split  # noqa: F401  (the study's splits)
from selfcal.studies.meta_reg.protocol import BIN_COUNTS, METHODS, MODELS, MetaRegProtocol


def execute(protocol: MetaRegProtocol, group: list[RunSpec]) -> list[RunResult]:
    return [run(protocol, spec) for spec in group]


def run(protocol: MetaRegProtocol, spec: RunSpec) -> RunResult:
    from selfcal.models import build_model

    regime = protocol.regime(str(spec.hparams["regime"]))
    data, train, meta_val = load_splits(protocol, spec.dataset, spec.seed)
    model = build_model(MODELS[spec.dataset], seed=spec.seed, n_classes=data.n_classes)
    curves = _images.Curves(data, regime.curve_every, regime.epochs, protocol.n_bins)
    config = protocol.train_config(
        regime, spec.dataset, spec.seed, restore_best=True, best_by=protocol.best_by
    )
    options = {k[3:]: v for k, v in spec.hparams.items() if k.startswith("hp.")}
    history = train_method(
        spec.method,
        options,
        model,
        train,
        (data.val.x, data.val.y),
        meta_val,
        config,
        curves,
        _images.augmentation(data, spec.dataset),
    )
    metrics, z = _images.evaluate(protocol, model, data)
    metrics.update(bin_sweep(z, data.test.y))
    metrics["hp.epochs"] = float(history.best_epoch + 1)
    artefacts = curves.artefacts()
    if spec.method == "flg-sece" and spec.seed == protocol.seeds[0]:  # Fig. 4
        artefacts.update({TEST_LOGITS: z.float().numpy(), TEST_LABELS: data.test.y.numpy()})
    return RunResult(metrics=metrics, artefacts=artefacts)


def train_method(
    method: str,
    options: dict[str, Any],
    model: torch.nn.Module,
    train: tuple,
    val: tuple,
    meta_val: tuple,
    config: Any,
    curves: _images.Curves | None = None,
    batch_transform: Any = None,
) -> Any:
    """Train ``model`` in place as ``METHODS[method]``
    (:func:`selfcal.methods.catalogue.method_step`) with the candidate's ``options``, recording
    ``curves``; the history."""
    step = method_step(METHODS[method], options, meta_val)
    if curves is not None:
        curves.follow(step)
    on_epoch = None if curves is None else curves.after_epoch
    return _images.train_as(step, model, train, val, config, on_epoch, batch_transform)


def bin_sweep(z: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """ECE and MCE at every bin count of Fig. 5 (before temperature scaling)."""
    import selfcal.metrics as M

    out = {}
    for b in BIN_COUNTS:
        out[f"ece_{b}_bins"] = float(M.ece(logits=z, labels=y, n_bins=b))
        out[f"mce_{b}_bins"] = float(M.mce(logits=z, labels=y, n_bins=b))
    return out
