"""One run of the BSCE-GRA study: train a loss candidate in one regime, evaluate it before and
after temperature scaling, and record what the figures need.

Figures ([GRA] Figs. 4, 7-8; first seed only, to keep the store small): at the regime's four
snapshot epochs, the per-sample last-layer gradient norm and Brier score of
``gradient_samples`` training signals, and the true-class probability and correctness of
``figure_samples`` test signals. Every run records the per-epoch curves of
:class:`selfcal.studies._images.Curves` (test ECE, validation temperature).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from selfcal.bilevel.meta.modules import model_features, model_head
from selfcal.experiments import RunResult, RunSpec
from selfcal.models.inference import predict_logits
from selfcal.studies import _images
from selfcal.studies.bsce_gra.protocol import MODELS, REST_POINT_DATASET, BsceGraProtocol


def execute(protocol: BsceGraProtocol, group: list[RunSpec]) -> list[RunResult]:
    from selfcal.studies.bsce_gra.rest_point import binary_check

    return [
        binary_check(protocol, spec)
        if spec.dataset == REST_POINT_DATASET
        else train_and_evaluate(protocol, spec)
        for spec in group
    ]


def loss_options(spec: RunSpec) -> dict[str, Any]:
    """The candidate's grid values, as loss constructor arguments."""
    return {k[3:]: v for k, v in spec.hparams.items() if k.startswith("hp.")}


def train_and_evaluate(protocol: BsceGraProtocol, spec: RunSpec) -> RunResult:
    from selfcal.losses import build_loss
    from selfcal.models import build_model
    from selfcal.training import fit

    regime = protocol.regime(str(spec.hparams["regime"]))
    data = _images.load(protocol, spec.dataset, spec.seed)
    model = build_model(MODELS[spec.dataset], seed=spec.seed, n_classes=data.n_classes)
    loss = build_loss(spec.method, **loss_options(spec), reduction="sum")
    curves = _images.Curves(data, regime.curve_every, regime.epochs, protocol.n_bins)
    snapshots = (
        Snapshots(protocol, data, loss, regime.figure_epochs)
        if spec.seed == protocol.seeds[0]
        else None
    )

    def on_epoch(epoch: int, model: torch.nn.Module, history: Any) -> bool:
        curves.after_epoch(epoch, model)
        if snapshots is not None:
            snapshots(epoch, model)
        return False

    fit(
        model,
        (data.train.x, data.train.y),
        config=protocol.train_config(regime, spec.dataset, spec.seed),
        loss_fn=loss,
        on_epoch=on_epoch,
        batch_transform=_images.augmentation(data, spec.dataset),
    )
    metrics, _ = _images.evaluate(protocol, model, data)
    artefacts = {**curves.artefacts(), **({} if snapshots is None else snapshots.arrays)}
    return RunResult(metrics=metrics, artefacts=artefacts)


class Snapshots:
    """At the figure epochs: last-layer gradient norms and Brier scores of training samples
    (Fig. 4), true-class probabilities and correctness of test samples (Figs. 7-8)."""

    def __init__(
        self, protocol: BsceGraProtocol, data: Any, loss: torch.nn.Module, epochs: tuple[int, ...]
    ) -> None:
        self.protocol, self.data, self.loss, self.epochs = protocol, data, loss, set(epochs)
        self.arrays: dict[str, np.ndarray] = {}

    def __call__(self, epoch: int, model: torch.nn.Module) -> None:
        done = epoch + 1
        if done not in self.epochs:
            return
        n, m = self.protocol.gradient_samples, self.protocol.figure_samples
        test_x, test_y = self.data.test.x[:m], self.data.test.y[:m]
        p = torch.softmax(_images.logits(model, test_x), 1)
        self.arrays[f"true_prob_e{done}"] = p.gather(1, test_y[:, None])[:, 0].float().numpy()
        self.arrays[f"correct_e{done}"] = (p.argmax(1) == test_y).numpy()
        device = next(model.parameters()).device
        norm, brier = last_layer_gradient_norms(
            model, self.loss, self.data.train.x[:n].to(device), self.data.train.y[:n].to(device)
        )
        self.arrays[f"grad_norm_e{done}"] = norm.float().numpy()
        self.arrays[f"brier_e{done}"] = brier.float().numpy()


def last_layer_gradient_norms(
    model: torch.nn.Module, loss: torch.nn.Module, x: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample ``||d loss_i / d W||_F`` of the last linear layer ``z = W h + b`` and the
    per-sample Brier score ``sum_k (p_k - y_k)^2``.

    Since ``d loss_i / d W = (d loss_i / d z_i) h_i^T``, the norm is ``||d loss_i/d z_i|| *
    ||h_i||`` ([GRA] Fig. 4; methods §9). ``d loss_i / d z_i`` is the gradient of the summed loss
    with respect to the logits (each sample's loss depends on its own logits only), so the same
    code serves every per-sample loss -- for GRA losses autograd sees the detached weight."""
    h = predict_logits(model, x, forward=model_features)
    with torch.no_grad():
        z = model_head(model)(h)
    z.requires_grad_(True)
    value = loss(z, y)  # sum reduction, so d value / d z_i = d loss_i / d z_i
    (dz,) = torch.autograd.grad(value.sum() if value.ndim else value, z)
    p = torch.softmax(z.detach().double(), 1)
    onehot = torch.nn.functional.one_hot(y, p.shape[1]).double()
    return (dz.norm(dim=1) * h.norm(dim=1)).cpu(), (p - onehot).square().sum(1).cpu()
