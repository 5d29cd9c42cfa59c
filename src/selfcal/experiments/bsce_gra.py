"""The BSCE-GRA study: the [GRA] loss comparison (its Tables 1-5 and 2) on CPU-sized image
benchmarks -- MNIST-1D (1-D CNN) and scikit-learn's digits as 8x8 images (2-D CNN).

Protocol (the papers' recipe, spec §0 and §7.2, with the schedule shortened tenfold and said so):
SGD with momentum 0.9, weight decay 5e-4, learning rate 0.1, batch 128, **sum**-reduced loss,
global gradient-norm clipping at 2, MultiStepLR x0.1 at epochs 15 and 25 of 35 (the papers: 150
and 250 of 350), evaluation of the **final** checkpoint. Temperature scaling as the reference
code: grid T = 0.1..10.0 by validation 15-bin ECE. BSCE / BSCE-GRA with gamma = 4, norm = 2
(spec §7.1's recommended default; the paper tunes them and publishes no single value); DFL
gamma = 5; MMCE lambda = 2; FLSD-53. Each seed is a replicate: data draw (MNIST-1D) or split
(digits), initialisation and batch order. Nothing is selected on the test set; the per-epoch
test ECE is recorded only for the paper's Fig. 5a.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from selfcal._inputs import Predictions
from selfcal.experiments.protocols import (
    CIFAR,
    augmentation,
    one_thread,
    resolve_protocol,
    settings_fingerprint,
    sweep_datasets,
)
from selfcal.experiments.spec import RunResult, RunSpec

STUDY = "bsce-gra"
STUDY_VERSION = 1
MODELS = {"mnist1d": "cnn1d", "digits-images": "cnn2d", "cifar10": "resnet50",
          "cifar100": "resnet50"}
CIFAR_SCHEDULE = (350, (150, 250))
"""[GRA]: 350 epochs, learning rate x0.1 at 150 and 250 (the scheduler steps after each epoch)."""
TABLE_LOSSES = ("ce", "brier", "mmce", "flsd53", "dfl", "bsce", "bsce-gra")
"""The rows of [GRA] Tables 1, 3, 4, 5."""
GRA_PAIRS = (("flsd53", "flsd53-gra"), ("dfl", "dfl-gra"), ("bsce", "bsce-gra"))
"""[GRA] Table 2: each weight on the loss vs on the gradient."""
LOSS_OPTIONS: dict[str, dict[str, Any]] = {
    "bsce": {"gamma": 4.0, "norm": 2}, "bsce-gra": {"gamma": 4.0, "norm": 2},
    "dfl": {"gamma": 5.0}, "dfl-gra": {"gamma": 5.0}, "mmce": {"lam": 2.0},
}


@dataclass(frozen=True)
class Protocol:
    """Everything a run depends on besides (dataset, loss, seed)."""

    name: str
    seeds: tuple[int, ...] = (0, 1, 2)
    datasets: tuple[str, ...] = ("mnist1d", "digits-images")
    losses: tuple[str, ...] = TABLE_LOSSES + ("flsd53-gra", "dfl-gra")
    epochs: int = 35
    milestones: tuple[int, ...] = (15, 25)
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 5e-4
    batch_size: int = 128
    grad_clip: float = 2.0
    figure_epochs: tuple[int, ...] = (5, 15, 25, 35)
    gradient_samples: int = 1000
    n_bins: int = 15
    notes: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        unknown = set(self.datasets) - set(MODELS)
        if unknown:
            raise ValueError(f"unknown datasets {sorted(unknown)}; known: {sorted(MODELS)}")
        if any(not 1 <= e <= self.epochs for e in self.figure_epochs):
            raise ValueError("figure_epochs must lie in 1..epochs")

    def fingerprint(self) -> str:
        settings = {k: v for k, v in asdict(self).items()
                    if k not in ("name", "seeds", "datasets", "losses", "notes")}
        settings["study_version"] = STUDY_VERSION
        settings["loss_options"] = LOSS_OPTIONS
        return settings_fingerprint(settings)


FULL = Protocol("full")
QUICK = Protocol(
    "quick", seeds=(0,), datasets=("digits-images",), losses=("ce", "bsce", "bsce-gra"),
    epochs=4, milestones=(3,), figure_epochs=(2, 4), gradient_samples=200,
    notes=("--quick: digits only, one seed, 4 epochs, 3 losses; for tests, not conclusions.",),
)
LONG = Protocol(
    "long", epochs=105, milestones=(45, 75), figure_epochs=(15, 45, 75, 105),
    notes=("--protocol long: the schedule three times longer (105 epochs, drops at 45 and 75; "
           "30% of the papers'), to see how the ranking depends on training length.",),
)
PROTOCOLS = {p.name: p for p in (FULL, QUICK, LONG)}


def specs(protocol: Protocol) -> list[RunSpec]:
    """Every (dataset, loss, seed) of the protocol, plus the CIFAR rows when the data is
    present locally (full protocol only)."""
    hparams = {"protocol": protocol.name, "fingerprint": protocol.fingerprint()}
    return [RunSpec(STUDY, d, loss, seed, hparams) for d in sweep_datasets(protocol)
            for loss in protocol.losses for seed in protocol.seeds]


def protocol_of(spec: RunSpec) -> Protocol:
    return resolve_protocol(spec, PROTOCOLS)


def execute(group: list[RunSpec]) -> list[RunResult]:
    """Executor for :func:`~selfcal.experiments.run_sweep` (one run per call)."""
    with one_thread():
        return [train_and_evaluate(protocol_of(spec), spec.dataset, spec.method, spec.seed)
                for spec in group]


# ------------------------------------------------------------------------------ one run
def train_and_evaluate(protocol: Protocol, dataset: str, loss_name: str, seed: int) -> RunResult:
    """Train with ``loss_name`` by the protocol; final-checkpoint test metrics before and after
    temperature scaling, and the arrays the figures need."""
    from selfcal.data import load_dataset
    from selfcal.losses import build_loss
    from selfcal.models import build_model
    from selfcal.training import TrainConfig, fit

    data = load_dataset(dataset, seed)
    model = build_model(MODELS[dataset], seed=seed, n_classes=data.n_classes)
    loss = build_loss(loss_name, **LOSS_OPTIONS.get(loss_name, {}))
    epochs, milestones = schedule(protocol, dataset)
    config = TrainConfig(
        epochs=epochs, optimizer="sgd", lr=protocol.lr, momentum=protocol.momentum,
        weight_decay=protocol.weight_decay, batch_size=protocol.batch_size,
        milestones=milestones, grad_clip=protocol.grad_clip, seed=seed,
        device="cuda" if torch.cuda.is_available() else "cpu",
    )
    tracker = _Tracker(protocol, data, loss, figure_epochs(protocol, dataset))
    fit(model, (data.train.x, data.train.y), config=config, loss_fn=loss, on_epoch=tracker,
        batch_transform=augmentation(data) if dataset in CIFAR else None)
    metrics = _final_metrics(protocol, model, data)
    return RunResult(metrics=metrics, artefacts=tracker.artefacts())


def schedule(protocol: Protocol, dataset: str) -> tuple[int, tuple[int, ...]]:
    """``(epochs, milestones)``: the papers' on CIFAR, the protocol's shortened one otherwise."""
    return CIFAR_SCHEDULE if dataset in CIFAR else (protocol.epochs, protocol.milestones)


def figure_epochs(protocol: Protocol, dataset: str) -> tuple[int, ...]:
    """The figure epochs scaled to the dataset's schedule (CIFAR: 50, 150, 250, 350)."""
    epochs = schedule(protocol, dataset)[0]
    return tuple(round(e * epochs / protocol.epochs) for e in protocol.figure_epochs)


def _logits(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    from selfcal.training import predict_logits

    return predict_logits(model, x, batch_size=1000).double().cpu()


def _final_metrics(protocol: Protocol, model, data) -> dict[str, float]:
    import selfcal.metrics as M
    from selfcal.posthoc import TemperatureScaling

    ts = TemperatureScaling(method="grid", criterion="ece").fit(
        logits=_logits(model, data.val.x), labels=data.val.y)
    z = _logits(model, data.test.x)
    out = {"accuracy": float(M.accuracy(logits=z, labels=data.test.y)),
           "temperature": float(ts.temperature_)}
    for tag, pred in (("pre", Predictions.from_logits(z, data.test.y)),
                      ("post", Predictions.from_logits(z / ts.temperature_, data.test.y))):
        out[f"ece_{tag}"] = float(M.ece(pred, n_bins=protocol.n_bins))
        out[f"adaece_{tag}"] = float(M.adaece(pred, n_bins=protocol.n_bins))
        out[f"classwise_ece_{tag}"] = float(M.classwise_ece(pred, n_bins=protocol.n_bins))
        out[f"nll_{tag}"] = float(M.nll(pred))
    return out


class _Tracker:
    """``on_epoch`` callback: test ECE every epoch (Fig. 5a); at the figure epochs the
    per-sample last-layer gradient norm and Brier score on training samples (Fig. 4) and the
    true-class probability of test samples, split by correctness (Figs. 7-8)."""

    def __init__(self, protocol: Protocol, data: Any, loss: torch.nn.Module,
                 epochs: tuple[int, ...]) -> None:
        self.protocol, self.data, self.loss = protocol, data, loss
        self.figure_epochs = set(epochs)
        self.test_ece: list[float] = []
        self.arrays: dict[str, np.ndarray] = {}

    def __call__(self, epoch: int, model: torch.nn.Module, history: Any) -> bool:
        import selfcal.metrics as M

        z = _logits(model, self.data.test.x)
        self.test_ece.append(float(M.ece(logits=z, labels=self.data.test.y)))
        done = epoch + 1
        if done in self.figure_epochs:
            p = torch.softmax(z, 1)
            y = self.data.test.y
            self.arrays[f"true_prob_e{done}"] = p.gather(1, y[:, None])[:, 0].float().numpy()
            self.arrays[f"correct_e{done}"] = (p.argmax(1) == y).numpy()
            n = self.protocol.gradient_samples
            device = next(model.parameters()).device
            norm, brier = last_layer_gradient_norms(
                model, self.loss, self.data.train.x[:n].to(device),
                self.data.train.y[:n].to(device))
            self.arrays[f"grad_norm_e{done}"] = norm.float().numpy()
            self.arrays[f"brier_e{done}"] = brier.float().numpy()
        return False

    def artefacts(self) -> dict[str, np.ndarray]:
        return {"test_ece_per_epoch": np.asarray(self.test_ece, np.float64), **self.arrays}


def last_layer_gradient_norms(model: torch.nn.Module, loss: torch.nn.Module, x: torch.Tensor,
                              y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample ``||d loss_i / d W||_F`` of the last linear layer ``z = W h + b`` and the
    per-sample Brier score ``sum_k (p_k - y_k)^2``.

    Since ``d loss_i / d W = (d loss_i / d z_i) h_i^T``, the norm is ``||d loss_i/d z_i|| *
    ||h_i||`` ([GRA] Fig. 4; spec §9). ``d loss_i / d z_i`` is the gradient of the summed loss
    with respect to the logits (each sample's loss depends on its own logits only), so the same
    code serves every per-sample loss -- for GRA losses autograd sees the detached weight."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            h = model.features(x)
        z = model.head(h).detach().requires_grad_(True)
        value = loss(z, y)  # sum reduction, so d value / d z_i = d loss_i / d z_i
        (dz,) = torch.autograd.grad(value.sum() if value.ndim else value, z)
    finally:
        model.train(was_training)
    p = torch.softmax(z.detach().double(), 1)
    onehot = torch.nn.functional.one_hot(y, p.shape[1]).double()
    return (dz.norm(dim=1) * h.norm(dim=1)).cpu(), (p - onehot).square().sum(1).cpu()
