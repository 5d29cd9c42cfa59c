"""The meta-regularization study ([MetaReg] Table 1 and Table 2 analogue): γ-Net + SECE against
the baselines on CPU-sized image benchmarks -- MNIST-1D (1-D CNN) and digits as 8x8 images
(2-D CNN).

Protocol (spec §6.4 with the schedule shortened tenfold, as the BSCE-GRA study): SGD momentum
0.9, weight decay 5e-4, learning rate 0.1, batch 128, sum-reduced losses, clipping at 2,
MultiStepLR x0.1 at epochs 15 and 25 of 35, the checkpoint with the best validation NLL (the
paper: best validation error). Splits: the loader's train / validation / test, and a
meta-validation set carved from the training split (a stratified 1/9 of it, so MNIST-1D is
3200 / 400 / 400 = 8:1:1 as the paper's); every method trains on the same reduced training set.
Meta-learned methods: γ-Net with SECE (h = 0.01) or DECE, and meta-calibration's unit-wise L2
with DECE (CE-DECE) or SECE (CE-SECE); one-step lookahead of the last layer, meta-optimizer
Adam 1e-3 (:func:`selfcal.bilevel.fit_meta`). "FLγ" (the paper's Table 2 ablation, "γ-Net
without SECE") is γ-Net meta-trained on the mean cross-entropy of the meta-validation batch,
with no calibration term: the paper does not state its meta-objective, so this is our reading
(spec §6.6 item 8). Mixup α = 1 trains CE on mixed minibatches, ``lam x + (1 - lam) x[pi]``
with loss ``lam CE(z, y) + (1 - lam) CE(z, y[pi])``, one ``lam ~ Beta(1, 1)`` and one
permutation per batch drawn from the training loop's seeded augmentation generator
(:func:`selfcal.training.fit` with ``mixup_alpha=1``). CE (TS) is the CE run after the
reference code's grid temperature scaling on validation.

CIFAR-10 / CIFAR-100 (full protocol, only when their files are under ``$SELFCAL_DATA``): the
paper's own recipe (spec §6.4) -- ResNet-18, 350 epochs with the learning rate x0.1 after
epochs 150 and 250, RandomCrop(32, padding 4) + horizontal flip on every training minibatch
(also in the meta-learned methods' train batches; never on validation or meta-validation),
the reference 8:1:1 split of the 50k training images (40k train / 5k validation / 5k
meta-validation, ``split="meta"``; test = the official 10k), on the GPU when one is present;
the other settings as above (the checkpoint is still picked by validation NLL). Fig. 3 data:
after every epoch, for analysis only (never for selection or stopping), the test ECE of
every method and γ-Net's output mean and std on the test set, as the paper plots them; the
validation curves are kept beside them.
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

STUDY = "meta-reg"
STUDY_VERSION = 1
MODELS = {"mnist1d": "cnn1d", "digits-images": "cnn2d", "cifar10": "resnet18",
          "cifar100": "resnet18"}
CIFAR_SCHEDULE = (350, (150, 250))
"""[MetaReg] §6.4: 350 epochs, learning rate x0.1 at 150 and 250 (scheduler steps per epoch)."""
EVAL_CHUNK = 1000
"""Rows per forward pass when scoring (one pass for the CPU datasets' test and val sets)."""
METHODS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "ce": ("loss", "ce", {}),
    "focal-1": ("loss", "focal", {"gamma": 1.0}),
    "flsd53": ("loss", "flsd53", {}),
    "ls-0.05": ("loss", "ls", {"eps": 0.05}),
    "ls-0.1": ("loss", "ls", {"eps": 0.1}),
    "mixup-1": ("mixup", "ce", {"alpha": 1.0}),
    "mmce": ("loss", "mmce", {"lam": 2.0}),
    "ce-dece": ("meta", "unit-l2", {"meta_objective": "dece"}),
    "ce-sece": ("meta", "unit-l2", {"meta_objective": "sece"}),
    "flg": ("meta", "gamma-net", {"meta_objective": "ce"}),
    "flg-dece": ("meta", "gamma-net", {"meta_objective": "dece"}),
    "flg-sece": ("meta", "gamma-net", {"meta_objective": "sece"}),
}
"""method -> (kind, loss or meta method, options); kind ``"loss"``: ``fit`` with the loss
built from the options, ``"mixup"``: ``fit`` with the loss and ``mixup_alpha = alpha``,
``"meta"``: ``fit_meta`` with the meta method and the options."""
BIN_COUNTS = (10, 20, 50, 100, 200, 500, 1000)
"""[MetaReg] Fig. 5: ECE and MCE against the number of bins."""


@dataclass(frozen=True)
class Protocol:
    name: str
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    datasets: tuple[str, ...] = ("mnist1d", "digits-images")
    methods: tuple[str, ...] = tuple(METHODS)
    epochs: int = 35
    milestones: tuple[int, ...] = (15, 25)
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 5e-4
    batch_size: int = 128
    grad_clip: float = 2.0
    meta_lr: float = 1e-3
    n_bins: int = 15
    notes: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        unknown = (set(self.datasets) - set(MODELS)) | (set(self.methods) - set(METHODS))
        if unknown:
            raise ValueError(f"unknown datasets or methods {sorted(unknown)}")

    def fingerprint(self) -> str:
        settings = {k: v for k, v in asdict(self).items()
                    if k not in ("name", "seeds", "datasets", "methods", "notes")}
        return settings_fingerprint({**settings, "study_version": STUDY_VERSION,
                                     "methods": {m: METHODS[m] for m in self.methods}})


FULL = Protocol("full")
QUICK = Protocol("quick", seeds=(0,), datasets=("digits-images",),
                 methods=("ce", "mixup-1", "flg", "flg-sece"), epochs=3, milestones=(2,),
                 notes=("--quick: digits only, one seed, 3 epochs, 4 methods; for tests.",))
PROTOCOLS = {p.name: p for p in (FULL, QUICK)}


def specs(protocol: Protocol) -> list[RunSpec]:
    """Every (dataset, method, seed) of the protocol, plus the CIFAR rows when the data is
    present locally (full protocol only)."""
    hparams = {"protocol": protocol.name, "fingerprint": protocol.fingerprint()}
    return [RunSpec(STUDY, d, m, seed, hparams)
            for d in sweep_datasets(protocol) for m in protocol.methods for seed in protocol.seeds]


def protocol_of(spec: RunSpec) -> Protocol:
    return resolve_protocol(spec, PROTOCOLS)


def execute(group: list[RunSpec]) -> list[RunResult]:
    """Executor for :func:`~selfcal.experiments.run_sweep` (one run per call)."""
    with one_thread():
        return [run(protocol_of(s), s.dataset, s.method, s.seed) for s in group]


# ------------------------------------------------------------------------------ one run
def meta_split(data: Any, seed: int) -> tuple[tuple, tuple]:
    """``(train, meta_val)``: a stratified, seeded 1/9 of the training split held out."""
    from selfcal.data.core import child_rngs, stratified_split_indices

    y = data.train.y.numpy()
    n_meta = round(len(y) / 9)
    keep, meta, _ = stratified_split_indices(y, (len(y) - n_meta, n_meta, 0),
                                             child_rngs(seed, 2)[1])
    keep, meta = torch.from_numpy(np.sort(keep)), torch.from_numpy(np.sort(meta))
    x = data.train.x
    return (x[keep], data.train.y[keep]), (x[meta], data.train.y[meta])


def load_splits(dataset: str, seed: int) -> tuple[Any, tuple, tuple]:
    """``(data, train, meta_val)``: CIFAR's reference 40k / 5k / 5k split, else
    :func:`meta_split` of the loader's training split."""
    from selfcal.data import load_dataset

    if dataset in CIFAR:
        data = load_dataset(dataset, seed, split="meta")
        meta = data.split("meta_val")
        return data, (data.train.x, data.train.y), (meta.x, meta.y)
    data = load_dataset(dataset, seed)
    return data, *meta_split(data, seed)


def schedule(protocol: Protocol, dataset: str) -> tuple[int, tuple[int, ...]]:
    """``(epochs, milestones)``: the paper's on CIFAR, the protocol's shortened one otherwise."""
    return CIFAR_SCHEDULE if dataset in CIFAR else (protocol.epochs, protocol.milestones)


def train_config(protocol: Protocol, dataset: str, seed: int) -> Any:
    """The SGD protocol; CIFAR runs on the GPU when present (the CPU datasets stay on the CPU,
    so their stored runs are reproduced bit for bit)."""
    from selfcal.training import TrainConfig

    epochs, milestones = schedule(protocol, dataset)
    gpu = dataset in CIFAR and torch.cuda.is_available()
    return TrainConfig(
        epochs=epochs, optimizer="sgd", lr=protocol.lr, momentum=protocol.momentum,
        weight_decay=protocol.weight_decay, batch_size=protocol.batch_size,
        milestones=milestones, grad_clip=protocol.grad_clip, restore_best=True,
        seed=seed, device="cuda" if gpu else "cpu",
    )


def run(protocol: Protocol, dataset: str, method: str, seed: int) -> RunResult:
    """Train ``method`` by the protocol; test metrics of the best-validation checkpoint, the
    per-epoch validation and (analysis only) test curves."""
    from selfcal.models import build_model

    data, train, meta_val = load_splits(dataset, seed)
    model = build_model(MODELS[dataset], seed=seed, n_classes=data.n_classes)
    curves = TestCurves(data.test.x, data.test.y, protocol.n_bins)
    history = train_method(method, model, train, (data.val.x, data.val.y), meta_val,
                           train_config(protocol, dataset, seed), protocol.meta_lr,
                           curves=curves,
                           batch_transform=augmentation(data) if dataset in CIFAR else None)
    metrics, logits = test_metrics(protocol, model, data, with_ts=method == "ce")
    artefacts = {"val_ece_per_epoch": np.asarray(history.val_ece, np.float64),
                 "test_logits": logits.float().numpy(), "test_labels": data.test.y.numpy(),
                 **curves.artefacts()}
    for key in ("val_gamma_mean", "val_gamma_std"):
        if getattr(history, key, ()):
            artefacts[key] = np.asarray(getattr(history, key), np.float64)
    return RunResult(metrics=metrics, artefacts=artefacts)


def train_method(method: str, model: torch.nn.Module, train: tuple, val: tuple, meta_val: tuple,
                 config: Any, meta_lr: float, *, curves: TestCurves | None = None,
                 batch_transform: Any = None) -> Any:
    """Train ``model`` in place as ``METHODS[method]`` says; the run's history. ``curves``
    records the test curves after every epoch (analysis only); ``batch_transform`` augments
    the training minibatches."""
    kind, name, options = METHODS[method]
    if kind == "meta":
        from selfcal.bilevel import fit_meta

        hook = None if curves is None else curves.after_meta_epoch
        return fit_meta(model, train, val, meta_val, method=name, config=config,
                        meta_lr=meta_lr, on_epoch=hook, batch_transform=batch_transform,
                        **options)
    from selfcal.losses import build_loss
    from selfcal.training import fit

    hook = None if curves is None else curves.after_epoch
    mixup = options["alpha"] if kind == "mixup" else 0.0
    loss = build_loss(name) if kind == "mixup" else build_loss(name, **options)
    return fit(model, train, val, config=config, loss_fn=loss, on_epoch=hook,
               batch_transform=batch_transform, mixup_alpha=mixup)


class TestCurves:
    """Per-epoch test-set curves for [MetaReg] Fig. 3, for analysis only (nothing reads them
    during training): the test ECE (``n_bins`` equal-width bins) of the model after each
    epoch, and for γ-Net the mean and the (population) std of ``gamma_i = gammaNet(h_i)`` over
    the test features ``h_i``. Everything runs in eval mode without gradients and leaves the
    model's mode, parameters and buffers as they were."""

    __test__ = False  # not a pytest class

    def __init__(self, x: torch.Tensor, y: torch.Tensor, n_bins: int) -> None:
        self.x, self.y, self.n_bins = x, y, n_bins
        self.ece: list[float] = []
        self.gamma_mean: list[float] = []
        self.gamma_std: list[float] = []

    def after_epoch(self, epoch: int, model: torch.nn.Module, history: Any) -> bool:
        """:func:`selfcal.training.fit`'s ``on_epoch``: records, never stops."""
        self._record_ece(model)
        return False

    def after_meta_epoch(self, epoch: int, model: torch.nn.Module,
                         meta: torch.nn.Module) -> None:
        """:func:`selfcal.bilevel.fit_meta`'s ``on_epoch``: the ECE, and γ for a γ-Net."""
        from selfcal.bilevel import GammaNet

        self._record_ece(model)
        if isinstance(meta, GammaNet):
            gamma = _eval(model, lambda m, x: meta(m.features(x)), self.x).double()
            self.gamma_mean.append(float(gamma.mean()))
            self.gamma_std.append(float(gamma.std(unbiased=False)))

    def _record_ece(self, model: torch.nn.Module) -> None:
        import selfcal.metrics as M

        z = _eval(model, lambda m, x: m(x), self.x).double()
        self.ece.append(float(M.ece(logits=z, labels=self.y, n_bins=self.n_bins)))

    def artefacts(self) -> dict[str, np.ndarray]:
        out = {"test_ece_per_epoch": np.asarray(self.ece, np.float64)}
        if self.gamma_mean:
            out["test_gamma_mean"] = np.asarray(self.gamma_mean, np.float64)
            out["test_gamma_std"] = np.asarray(self.gamma_std, np.float64)
        return out


def _eval(model: torch.nn.Module, forward: Any, x: torch.Tensor) -> torch.Tensor:
    """``forward(model, chunk)`` over ``x`` in chunks of :data:`EVAL_CHUNK`, eval mode, no
    gradients, on the model's device; the result on the CPU; the model's mode restored."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return torch.cat([forward(model, c.to(device)).cpu() for c in x.split(EVAL_CHUNK)])
    finally:
        model.train(was_training)


def test_metrics(protocol: Protocol, model: torch.nn.Module, data: Any,
                 with_ts: bool) -> tuple[dict[str, float], torch.Tensor]:
    """Error, NLL, ECE, MCE, ACE (AdaECE), classwise ECE and ECE / MCE at every bin count of
    Fig. 5; with ``with_ts`` also the scores after grid temperature scaling (suffix ``_ts``)."""
    from selfcal.posthoc import TemperatureScaling
    from selfcal.training import predict_logits

    z = predict_logits(model, data.test.x, batch_size=EVAL_CHUNK).double().cpu()
    scored = {"": z}
    if with_ts:
        zv = predict_logits(model, data.val.x, batch_size=EVAL_CHUNK).double().cpu()
        ts = TemperatureScaling(method="grid", criterion="ece").fit(logits=zv, labels=data.val.y)
        scored["_ts"] = z / ts.temperature_
    out: dict[str, float] = {}
    for suffix, logits in scored.items():
        out.update({f"{k}{suffix}": v for k, v in
                    _scores(protocol, Predictions.from_logits(logits, data.test.y)).items()})
    return out, z


def _scores(protocol: Protocol, pred: Predictions) -> dict[str, float]:
    import selfcal.metrics as M

    bins = protocol.n_bins
    out = {"error": float(M.error(pred)), "nll": float(M.nll(pred)),
           "ece": float(M.ece(pred, n_bins=bins)), "mce": float(M.mce(pred, n_bins=bins)),
           "adaece": float(M.adaece(pred, n_bins=bins)),
           "classwise_ece": float(M.classwise_ece(pred, n_bins=bins))}
    for b in BIN_COUNTS:
        out[f"ece_{b}_bins"] = float(M.ece(pred, n_bins=b))
        out[f"mce_{b}_bins"] = float(M.mce(pred, n_bins=b))
    return out
