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
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from selfcal._inputs import Predictions
from selfcal.experiments.protocols import one_thread, resolve_protocol, settings_fingerprint
from selfcal.experiments.spec import RunResult, RunSpec

STUDY = "meta-reg"
STUDY_VERSION = 1
MODELS = {"mnist1d": "cnn1d", "digits-images": "cnn2d"}
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
    hparams = {"protocol": protocol.name, "fingerprint": protocol.fingerprint()}
    return [RunSpec(STUDY, d, m, seed, hparams)
            for d in protocol.datasets for m in protocol.methods for seed in protocol.seeds]


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


def run(protocol: Protocol, dataset: str, method: str, seed: int) -> RunResult:
    """Train ``method`` by the protocol; test metrics of the best-validation checkpoint."""
    from selfcal.data import load_dataset
    from selfcal.models import build_model
    from selfcal.training import TrainConfig

    data = load_dataset(dataset, seed)
    train, meta_val = meta_split(data, seed)
    val = (data.val.x, data.val.y)
    model = build_model(MODELS[dataset], seed=seed, n_classes=data.n_classes)
    config = TrainConfig(
        epochs=protocol.epochs, optimizer="sgd", lr=protocol.lr, momentum=protocol.momentum,
        weight_decay=protocol.weight_decay, batch_size=protocol.batch_size,
        milestones=protocol.milestones, grad_clip=protocol.grad_clip, restore_best=True,
        seed=seed,
    )
    history = train_method(method, model, train, val, meta_val, config, protocol.meta_lr)
    metrics, logits = test_metrics(protocol, model, data, with_ts=method == "ce")
    artefacts = {"val_ece_per_epoch": np.asarray(history.val_ece, np.float64),
                 "test_logits": logits.float().numpy(), "test_labels": data.test.y.numpy()}
    for key in ("val_gamma_mean", "val_gamma_std"):
        if getattr(history, key, ()):
            artefacts[key] = np.asarray(getattr(history, key), np.float64)
    return RunResult(metrics=metrics, artefacts=artefacts)


def train_method(method: str, model: torch.nn.Module, train: tuple, val: tuple, meta_val: tuple,
                 config: Any, meta_lr: float) -> Any:
    """Train ``model`` in place as ``METHODS[method]`` says; the run's history."""
    kind, name, options = METHODS[method]
    if kind == "meta":
        from selfcal.bilevel import fit_meta

        return fit_meta(model, train, val, meta_val, method=name, config=config,
                        meta_lr=meta_lr, **options)
    from selfcal.losses import build_loss
    from selfcal.training import fit

    if kind == "mixup":
        return fit(model, train, val, config=config, loss_fn=build_loss(name),
                   mixup_alpha=options["alpha"])
    return fit(model, train, val, config=config, loss_fn=build_loss(name, **options))


def test_metrics(protocol: Protocol, model: torch.nn.Module, data: Any,
                 with_ts: bool) -> tuple[dict[str, float], torch.Tensor]:
    """Error, NLL, ECE, MCE, ACE (AdaECE), classwise ECE and ECE / MCE at every bin count of
    Fig. 5; with ``with_ts`` also the scores after grid temperature scaling (suffix ``_ts``)."""
    from selfcal.posthoc import TemperatureScaling
    from selfcal.training import predict_logits

    z = predict_logits(model, data.test.x).double()
    scored = {"": z}
    if with_ts:
        zv = predict_logits(model, data.val.x).double()
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
