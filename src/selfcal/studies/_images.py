"""What the image-classification studies (BSCE-GRA, meta-regularization) share: the papers'
SGD recipe and its regimes, data loading, the CIFAR rows that join when the data is present,
evaluation before and after temperature scaling, and the per-epoch curves.

Recipe (spec §0 and §7.2, the [FLC] / [GRA] / [MC] code bases): SGD with momentum 0.9, weight
decay 5e-4, learning rate 0.1, batch 128, **sum**-reduced losses, global gradient-norm clipping
at 2, MultiStepLR x0.1 at the regime's milestones (the scheduler steps after each epoch).

Regimes (:class:`Regime`): the papers train 350 epochs on CIFAR (about 123k SGD steps), long
after the training set is memorised -- where over-confidence appears. On the CPU datasets a
``short`` regime (35 epochs, drops at 15 / 25: the schedule shortened tenfold) and a ``long``
one (three times longer, drops at 45 / 75), in which plain cross-entropy drives the training
error to zero, run side by side, so each verdict is reported in both. CIFAR rows always run
the papers' own 350-epoch schedule.

Temperature scaling is the reference code's: the grid T = 0.1 .. 10.0 chosen by validation
15-bin ECE (``ece_ts`` etc.; ``temperature``). Validation scores (``val_ece``, ``val_nll``,
``val_accuracy``) are computed before temperature scaling and are what hyperparameter
selection reads (:mod:`selfcal.experiments.selection`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from selfcal.experiments.selection import Grid, candidates
from selfcal.experiments.study import StudyProtocol

EVAL_CHUNK = 1000
"""Rows per forward pass when scoring."""
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


# ----------------------------------------------------------------------------- data
def available_cifar() -> tuple[str, ...]:
    """The CIFAR sets whose files are present locally (``$SELFCAL_DATA``); never downloads."""
    from selfcal.data.core import DATA_ENV_VAR

    root = os.environ.get(DATA_ENV_VAR)
    if not root:
        return ()
    return tuple(name for name in CIFAR if (Path(root) / CIFAR_FOLDERS[name]).is_dir())


def sweep_datasets(protocol: ImageProtocol) -> tuple[str, ...]:
    """The protocol's datasets, plus (``full`` only) the CIFAR sets present locally."""
    return tuple(protocol.datasets) + (available_cifar() if protocol.name == "full" else ())


def load(protocol: ImageProtocol, dataset: str, seed: int, **options: Any) -> Any:
    """The dataset with the protocol's options (MNIST-1D's sizes)."""
    from selfcal.data import load_dataset

    if dataset == "mnist1d":
        options = {"sizes": protocol.mnist1d_sizes, **options}
    return load_dataset(dataset, seed, **options)


def meta_split(data: Any, seed: int) -> tuple[tuple, tuple]:
    """``(train, meta_val)``: a stratified, seeded 1/9 of the training split held out."""
    from selfcal.data.core import child_rngs, stratified_split_indices

    y = data.train.y.numpy()
    n_meta = round(len(y) / 9)
    keep, meta, _ = stratified_split_indices(
        y, (len(y) - n_meta, n_meta, 0), child_rngs(seed, 2)[1]
    )
    keep, meta = torch.from_numpy(np.sort(keep)), torch.from_numpy(np.sort(meta))
    x = data.train.x
    return (x[keep], data.train.y[keep]), (x[meta], data.train.y[meta])


def load_splits(protocol: ImageProtocol, dataset: str, seed: int) -> tuple[Any, tuple, tuple]:
    """``(data, train, meta_val)``: the loader's splits and a meta-validation set carved from
    the training split (a stratified, seeded 1/9 of it: the 8:1:1 of the meta-learning papers
    between train and meta-validation); every method of a study trains on the same reduced
    training set. CIFAR: the reference 40k / 5k / 5k split of the 50k training images
    (``split="meta"``), test = the official 10k."""
    if dataset in CIFAR:
        data = load(protocol, dataset, seed, split="meta")
        meta = data.split("meta_val")
        return data, (data.train.x, data.train.y), (meta.x, meta.y)
    data = load(protocol, dataset, seed)
    return data, *meta_split(data, seed)


def augmentation(data: Any, dataset: str) -> Any:
    """CIFAR: RandomCrop(32, padding 4) + horizontal flip, padding with black as the reference
    code (which pads before normalising); nothing elsewhere."""
    if dataset not in CIFAR:
        return None
    from selfcal.data.augment import black_fill, random_crop_flip

    return partial(random_crop_flip, padding=4, fill=black_fill(data))


def train_config(
    protocol: ImageProtocol, regime: Regime, dataset: str, seed: int, **extra: Any
) -> Any:
    """The recipe for ``regime``; CIFAR on the GPU when present (the CPU datasets stay on the
    CPU, so their runs are reproduced bit for bit)."""
    from selfcal.training import TrainConfig

    gpu = dataset in CIFAR and torch.cuda.is_available()
    return TrainConfig(
        epochs=regime.epochs,
        optimizer="sgd",
        lr=protocol.lr,
        momentum=protocol.momentum,
        weight_decay=protocol.weight_decay,
        batch_size=protocol.batch_size,
        milestones=regime.milestones,
        grad_clip=protocol.grad_clip,
        seed=seed,
        device="cuda" if gpu else "cpu",
        **extra,
    )


def method_step(
    entry: tuple[str, str, dict[str, Any]], options: dict[str, Any], meta_val: tuple
) -> Any:
    """The training step of the method ``entry = (kind, name, fixed options)`` with the
    candidate's ``options`` added (:mod:`selfcal.training.steps`): ``"loss"`` -- a
    :class:`~selfcal.training.LossStep` on ``build_loss(name, **fixed, **options)``;
    ``"mixup"`` -- a :class:`~selfcal.training.MixupStep` on the loss ``name`` with
    ``alpha = fixed["alpha"]``; ``"meta"`` -- a :class:`~selfcal.bilevel.MetaStep` with
    ``method=name`` on ``meta_val``."""
    kind, name, fixed = entry
    if kind == "meta":
        from selfcal.bilevel import MetaStep

        return MetaStep(meta_val, method=name, **fixed, **options)
    from selfcal.losses import build_loss
    from selfcal.training import LossStep, MixupStep

    if kind == "mixup":
        return MixupStep(build_loss(name), fixed["alpha"])
    return LossStep(build_loss(name, **fixed, **options))


def train_as(
    entry: tuple[str, str, dict[str, Any]],
    options: dict[str, Any],
    model: torch.nn.Module,
    train: tuple,
    val: tuple | None,
    meta_val: tuple,
    config: Any,
    on_epoch: Any = None,
    batch_transform: Any = None,
) -> Any:
    """Train ``model`` in place as the method ``entry`` with the candidate's ``options``
    (:func:`method_step`) in the one training loop (:func:`selfcal.training.fit`, with its
    ``on_epoch(epoch, model, history)`` callback); the history."""
    from selfcal.training import fit

    step = method_step(entry, options, meta_val)
    return fit(
        model,
        train,
        val,
        config=config,
        step=step,
        on_epoch=on_epoch,
        batch_transform=batch_transform,
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


# ----------------------------------------------------------------------------- evaluation
def logits(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Eval-mode logits in float64 on the CPU."""
    from selfcal.training import predict_logits

    return predict_logits(model, x, batch_size=EVAL_CHUNK).double().cpu()


def scores(pred: Any, n_bins: int) -> dict[str, float]:
    """Error, NLL, Brier, ECE, MCE, AdaECE (equal-mass, "ACE") and classwise ECE."""
    import selfcal.metrics as M

    return {
        "error": float(M.error(pred)),
        "nll": float(M.nll(pred)),
        "brier": float(M.brier(pred)),
        "ece": float(M.ece(pred, n_bins=n_bins)),
        "mce": float(M.mce(pred, n_bins=n_bins)),
        "adaece": float(M.adaece(pred, n_bins=n_bins)),
        "classwise_ece": float(M.classwise_ece(pred, n_bins=n_bins)),
    }


def grid_temperature(z: torch.Tensor, y: torch.Tensor) -> float:
    """The reference code's temperature: grid 0.1 .. 10.0 by validation 15-bin ECE."""
    from selfcal.posthoc import TemperatureScaling

    return float(
        TemperatureScaling(method="grid", criterion="ece").fit(logits=z, labels=y).temperature_
    )


def evaluate(
    protocol: ImageProtocol, model: torch.nn.Module, data: Any
) -> tuple[dict[str, float], torch.Tensor]:
    """Validation scores (selection), test scores before and after temperature scaling
    (``_ts``), the temperature, and the training error (has the model memorised?). Returns
    the metrics and the test logits."""
    import selfcal.metrics as M
    from selfcal import Predictions

    z_val, z = logits(model, data.val.x), logits(model, data.test.x)
    val = Predictions.from_logits(z_val, data.val.y)
    temperature = grid_temperature(z_val, data.val.y)
    out = {
        "val_nll": float(M.nll(val)),
        "val_ece": float(M.ece(val, n_bins=protocol.n_bins)),
        "val_accuracy": float(M.accuracy(val)),
        "temperature": temperature,
        "train_error": float(M.error(logits=logits(model, data.train.x), labels=data.train.y)),
    }
    out.update(scores(Predictions.from_logits(z, data.test.y), protocol.n_bins))
    out.update(
        {
            f"{k}_ts": v
            for k, v in scores(
                Predictions.from_logits(z / temperature, data.test.y), protocol.n_bins
            ).items()
        }
    )
    out["accuracy"] = 1.0 - out["error"]
    return out, z


class Curves:
    """Per-epoch curves, every ``every`` epochs (and the last), for analysis only -- nothing
    reads them during training: the test ECE ([GRA] Fig. 5a, [MetaReg] Fig. 3a-b), the
    validation temperature (how over-confidence grows with training), and for a γ-Net the mean
    and (population) std of its γ on the test features ([MetaReg] Fig. 3c-d). Eval mode, no
    gradients; the model's mode, parameters and buffers are left as they were."""

    def __init__(self, data: Any, every: int, epochs: int, n_bins: int) -> None:
        self.data, self.every, self.epochs, self.n_bins = data, every, epochs, n_bins
        self.values: dict[str, list[float]] = {"epoch": [], "test_ece": [], "val_temperature": []}
        self.step: Any = None

    def due(self, epoch: int) -> bool:
        done = epoch + 1
        return done % self.every == 0 or done == self.epochs

    def follow(self, step: Any) -> None:
        """Also record the γ-Net of ``step`` (a :class:`~selfcal.bilevel.MetaStep`) on the
        test features ([MetaReg] Fig. 3c-d)."""
        self.step = step

    def after_epoch(self, epoch: int, model: torch.nn.Module, history: Any = None) -> bool:
        """:func:`selfcal.training.fit`'s ``on_epoch``: records, never stops."""
        if self.due(epoch):
            self._record(epoch, model)
            self._record_gamma(model)
        return False

    def _record_gamma(self, model: torch.nn.Module) -> None:
        from selfcal.bilevel import GammaNet

        meta = getattr(self.step, "meta_module", None)
        if isinstance(meta, GammaNet):
            gamma = _forward(model, lambda m, x: meta(m.features(x)), self.data.test.x)
            self.values.setdefault("test_gamma_mean", []).append(float(gamma.double().mean()))
            self.values.setdefault("test_gamma_std", []).append(
                float(gamma.double().std(unbiased=False))
            )

    def _record(self, epoch: int, model: torch.nn.Module) -> None:
        import selfcal.metrics as M

        z = logits(model, self.data.test.x)
        self.values["epoch"].append(epoch + 1)
        self.values["test_ece"].append(
            float(M.ece(logits=z, labels=self.data.test.y, n_bins=self.n_bins))
        )
        self.values["val_temperature"].append(
            grid_temperature(logits(model, self.data.val.x), self.data.val.y)
        )

    def artefacts(self) -> dict[str, np.ndarray]:
        return {f"curve_{k}": np.asarray(v, np.float64) for k, v in self.values.items()}


def _forward(model: torch.nn.Module, forward: Any, x: torch.Tensor) -> torch.Tensor:
    """``forward(model, chunk)`` over ``x`` in eval mode without gradients, on the CPU."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return torch.cat([forward(model, c.to(device)).cpu() for c in x.split(EVAL_CHUNK)])
    finally:
        model.train(was_training)


def curve_figure(
    results: Any,
    dataset: str,
    curve: str,
    label: str,
    scale: float,
    names: Sequence[str],
    labels: dict[str, str],
) -> Any:
    """A per-epoch curve of :class:`Curves` (seed mean of the selected runs) for the methods
    ``names``, one panel per regime."""
    from selfcal.plots import method_colours, new_figure

    panels = [r.name for r in results.protocol.regimes_for(dataset)]
    fig = new_figure((5.2 * len(panels), 3.8))
    axes = np.atleast_1d(fig.subplots(1, len(panels)))
    colours = method_colours(len(names))
    for ax, regime in zip(axes, panels):
        for method, colour in zip(names, colours):
            runs = [
                r for r in results.runs(dataset, method, regime) if f"curve_{curve}" in r.artefacts
            ]
            if runs:
                values = np.mean([results.artefact(r, f"curve_{curve}") for r in runs], 0)
                epochs = results.artefact(runs[0], "curve_epoch")
                ax.plot(epochs, scale * values, label=labels[method], color=colour)
        ax.set(xlabel="epoch", ylabel=label, title=f"{dataset}, {regime} regime")
        if curve == "val_temperature":
            ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    axes[0].legend(fontsize="x-small", ncol=2)
    return fig


def intro(results: Any, docs: Sequence[str | None], criterion: Any, cells: str) -> list[str]:
    """The image reports' opening: the study's own text (``docs``), the recipe and regimes,
    how hyperparameters are selected and the cells and verdicts read, and whether the CIFAR
    rows ran."""
    from selfcal.experiments.report import prose

    parts = [line for doc in docs for line in prose(doc)]
    parts += [
        *prose(__doc__.split("\n\n", 1)[1]),
        f"Tuned and unstated hyperparameters are selected per seed by the {criterion} "
        "among each method's candidates (listed at the end with every seed's choice). "
        f"Cells: mean ± 95% CI half-width over seeds, {cells}. Ranks and verdicts come "
        "from paired t-intervals of the per-seed differences (95%, no multiple-comparison "
        "correction); 'tied' means the interval contains 0.",
        "",
    ]
    if not any(d in CIFAR for d in results.datasets):
        parts += [
            "CIFAR-10/100 rows were not run: their files are not under `$SELFCAL_DATA` "
            "(they run for real, with the papers' 350-epoch schedule and settings, when "
            "present).",
            "",
        ]
    return parts


def regimes(results: Any, dataset: str) -> list[str]:
    """The names of the regimes ``dataset`` ran in."""
    return [r.name for r in results.protocol.regimes_for(dataset)]


def regime_sections(
    results: Any,
    datasets: Sequence[str],
    models: dict[str, str],
    table: Any,
    verdicts: Any,
    after: Any = lambda dataset: [],
) -> list[str]:
    """Per dataset, ``table(results, dataset, regime)`` under a heading for each regime, then
    ``after(dataset)``; then a "Verdicts" section of ``verdicts(results, dataset, regime)``."""
    parts = []
    for d in datasets:
        for regime in regimes(results, d):
            parts += [
                f"## {d} ({models[d]}), {regime} regime "
                f"({results.protocol.regime(regime).epochs} epochs)",
                "",
                *table(results, d, regime),
                "",
            ]
        parts += after(d)
    parts += ["## Verdicts", ""]
    for d in datasets:
        for regime in regimes(results, d):
            parts += verdicts(results, d, regime)
    return parts


def regime_specs(
    study: Any, protocol: ImageProtocol, methods: Sequence[str], datasets: Sequence[str]
) -> list[Any]:
    """One spec per (dataset, regime, method, candidate, seed)."""
    return [
        study.spec(protocol, d, m, seed, regime=r.name, config=c)
        for d in datasets
        for r in protocol.regimes_for(d)
        for m in methods
        for c in protocol.candidates(d, m)
        for seed in protocol.seeds
    ]


# ----------------------------------------------------------------------------- shared by the
# studies' protocol.py and report.py
MethodSpec = tuple[str, str, dict[str, Any]]
"""``(kind, loss or meta method, fixed options)``: ``"loss"``, ``"mixup"``, ``"meta"``
(:func:`method_step`) or ``"bo4sc"`` (the benchmark's bilevel training)."""

IMAGE_METHODS: dict[str, MethodSpec] = {
    "ce": ("loss", "ce", {}),
    "brier": ("loss", "brier", {}),
    "mmce": ("loss", "mmce", {}),
    "ls": ("loss", "ls", {}),
    "mixup": ("mixup", "ce", {"alpha": 1.0}),
    "focal": ("loss", "focal", {}),
    "flsd53": ("loss", "flsd53", {}),
    "dfl": ("loss", "dfl", {}),
    "bsce": ("loss", "bsce", {}),
    "bsce-gra": ("loss", "bsce-gra", {}),
    "ce-dece": ("meta", "unit-l2", {"meta_objective": "dece"}),
    "ce-sece": ("meta", "unit-l2", {"meta_objective": "sece"}),
    "flg": ("meta", "gamma-net", {"meta_objective": "ce"}),
    "flg-dece": ("meta", "gamma-net", {"meta_objective": "dece"}),
    "flg-sece": ("meta", "gamma-net", {"meta_objective": "sece"}),
    "bo4sc": ("bo4sc", "bo4sc", {}),
}
"""Every method the image studies train, once (``flg``: see the meta-reg protocol)."""
METHOD_ALIASES = {"label-smoothing": "ls", "flsd-53": "flsd53", "flγ-sece": "flg-sece"}
"""The benchmark's names of methods of :data:`IMAGE_METHODS`."""


def image_methods(*names: str) -> dict[str, MethodSpec]:
    """``name -> MethodSpec`` of :data:`IMAGE_METHODS` (or of the entry an alias of
    :data:`METHOD_ALIASES` stands for) for ``names`` in order, each with its own options."""
    specs = {name: IMAGE_METHODS[METHOD_ALIASES.get(name, name)] for name in names}
    return {name: (kind, loss, dict(fixed)) for name, (kind, loss, fixed) in specs.items()}


def quick_fields(epochs: int, note: str) -> dict[str, Any]:
    """The fields the ``quick`` protocols share: digits only, seeds 0 and 1, one ``short``
    regime of ``epochs`` epochs (the learning rate drops before the last), and ``note``."""
    short = Regime("short", epochs, (epochs - 1,))
    return {"seeds": (0, 1), "datasets": ("digits-images",), "regimes": (short,), "notes": (note,)}


def study_texts(package: Any, execute: Any) -> list[str | None]:
    """:func:`intro`'s ``docs``: the study package's docstring, then its ``execute`` module's
    without the first paragraph (its summary)."""
    return [package.__doc__, str(execute.__doc__).split("\n\n", 1)[1]]


def regime_summary(
    results: Any, datasets: Sequence[str], caption: str, table: Any, verdicts: Any
) -> list[str]:
    """What ``selfcal reproduce`` prints: per dataset and regime, ``"<dataset>, <regime>
    regime (<caption>)"``, ``table(results, dataset, regime)``, a blank line, the verdicts."""
    lines = []
    for d in datasets:
        for regime in regimes(results, d):
            caption_line = f"{d}, {regime} regime ({caption})"
            lines += [caption_line, *table(results, d, regime), "", *verdicts(results, d, regime)]
    return lines
