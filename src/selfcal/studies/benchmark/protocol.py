"""The benchmark's protocol: the methods, the training recipe of each dataset, the two regimes,
and the hyperparameter candidates -- reused from a paper study where the dataset and the
backbone are the same, a grid of the study engine where they are not."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from selfcal.experiments.study import StudyProtocol
from selfcal.methods import TABULAR, Recipe, get_method
from selfcal.selection import VAL_ECE, Candidates, Grid
from selfcal.studies._images import CIFAR, image_methods

METHODS = image_methods(
    "ce",
    "brier",
    "mmce",
    "label-smoothing",
    "mixup",
    "focal",
    "flsd-53",
    "dfl",
    "bsce",
    "bsce-gra",
    "ce-dece",
    "flγ-sece",
    "bo4sc",
)
"""method -> (kind, loss or meta method, fixed options), as
:func:`selfcal.methods.catalogue.method_step` reads it, from the one catalogue
(:data:`selfcal.methods.catalogue.METHODS`); ``"bo4sc"``: minibatch (or full-batch)
:class:`selfcal.bilevel.BO4SC` with the recipe's optimizer as its inner step."""
LABELS = {
    "ce": "CE",
    "brier": "Brier",
    "mmce": "MMCE",
    "label-smoothing": "Label smoothing",
    "mixup": "Mixup α=1",
    "focal": "Focal",
    "flsd-53": "FLSD-53",
    "dfl": "Dual focal",
    "bsce": "BSCE",
    "bsce-gra": "BSCE-GRA",
    "ce-dece": "CE-DECE",
    "flγ-sece": "FLγ-SECE",
    "bo4sc": "BO4SC",
}
REGIMES = ("memorise", "early-stop", "refine-stop")
REGIMES_DOC = """\
* `memorise`: the last iterate of the whole schedule, long enough that cross-entropy drives
  the training error to (near) zero and becomes over-confident.
* `early-stop`: the same run's checkpoint with the lowest validation NLL (early stopping with
  unlimited patience; checked after every epoch, for BO4SC after the outer iteration that ends
  each epoch).
* `refine-stop`: the same run's checkpoint with the lowest validation *refinement* loss -- the
  validation NLL after a temperature fitted on those same validation predictions (Berta et al.,
  2025: stop where refinement is lowest, then recalibrate; checked when `early-stop` is).
  All three regimes come from one training run per (method, candidate, seed)."""
SELECTION = VAL_ECE
"""Among a method's candidates: the lowest validation ECE (before temperature scaling) of the
regime's model, per seed -- the image studies' criterion."""


def image_recipe(model: str, epochs: int = 105, milestones: tuple[int, ...] = (45, 75)) -> Recipe:
    """The papers' SGD recipe (:mod:`selfcal.studies._images`): momentum 0.9, weight decay
    5e-4, learning rate 0.1 x0.1 at the milestones, batch 128, sum-reduced losses, clipping at
    2; by default the image studies' ``long`` schedule (105 epochs, the one in which CE
    memorises MNIST-1D and digits)."""
    return Recipe(model, epochs, "sgd", 0.1, 128, milestones, 0.9, 5e-4, 2.0)


RECIPES = {
    "mnist1d": image_recipe("cnn1d"),
    "digits-images": image_recipe("cnn2d"),
    "cifar10": image_recipe("resnet18", 350, (150, 250)),
    "cifar100": image_recipe("resnet18", 350, (150, 250)),
}
"""Every other dataset trains with :data:`TABULAR`. CIFAR: ResNet-18 with the papers' own
350-epoch schedule, on the GPU when present."""

# ----------------------------------------------------------------------------- candidates
CANDIDATES_DOC = """\
Hyperparameters. On MNIST-1D and digits the paper studies already trained these methods with
the same data, backbone, recipe and 105-epoch schedule and selected their tuned values per seed
on validation (meta-reg: focal γ, label smoothing ε, MMCE λ, the meta learning rates;
bsce-gra: dual focal γ, BSCE / BSCE-GRA γ and norm; bo4sc-images: BO4SC's η_w and T, β = 20).
The benchmark reuses, per method, the candidate with the lowest validation ECE averaged over
that study's seeds in its `long` regime (no test metric read; derived by
`python -m selfcal.studies.benchmark.reuse`), so each method has one candidate there. On the
tabular sets no paper study trained these methods: each tuned method's grid is run and
selected per seed -- focal γ ∈ {1, 2, 3}, ε ∈ {0.05, 0.1}, MMCE λ ∈ {1, 2, 4}, dual focal γ ∈
{1, 3, 5}, BSCE / BSCE-GRA γ ∈ {1, 3, 5} × norm ∈ {1, 2}, meta learning rate ∈ {1e-5, 1e-4,
1e-3} -- except BO4SC, which keeps the BO4SC study's pilot choice for this network and recipe
(T = 10, η_w = 100, β = 10). CIFAR: the papers' stated values."""
Options = dict[str, Any]


def by_dataset(
    datasets: tuple[str, ...], rows: dict[str, tuple[Options, ...]]
) -> dict[str, dict[str, Options]]:
    """``{dataset: {method: options}}`` from a table with one row per method holding one
    ``options`` per dataset (in the order of ``datasets``)."""
    return {d: {method: row[i] for method, row in rows.items()} for i, d in enumerate(datasets)}


REUSED = by_dataset(
    ("mnist1d", "digits-images"),
    {
        "focal": ({"gamma": 3.0}, {"gamma": 2.0}),
        "label-smoothing": ({"eps": 0.05}, {"eps": 0.05}),
        "mmce": ({"lam": 1.0}, {"lam": 4.0}),
        "dfl": ({"gamma": 5.0}, {"gamma": 4.0}),
        "bsce": ({"gamma": 4.0, "norm": 2}, {"gamma": 2.0, "norm": 2}),
        "bsce-gra": ({"gamma": 4.0, "norm": 1}, {"gamma": 2.0, "norm": 1}),
        "ce-dece": ({"meta_lr": 1e-4}, {"meta_lr": 1e-5}),
        "flγ-sece": ({"meta_lr": 1e-5}, {"meta_lr": 1e-3}),
        "bo4sc": (
            {"beta": 20.0, "inner_steps": 10, "weight_lr": 3.0},
            {"beta": 20.0, "inner_steps": 5, "weight_lr": 300.0},
        ),
    },
)
"""The reused candidate of each tuned method on MNIST-1D and digits (:data:`CANDIDATES_DOC`;
bsce-gra's study trained on the whole training split, the others on the benchmark's split):
``REUSED[dataset][method]``, written one method a row (MNIST-1D's, then digits')."""
PAPER_VALUES = {
    "focal": {"gamma": 1.0},
    "label-smoothing": {"eps": 0.05},
    "mmce": {"lam": 2.0},
    "dfl": {"gamma": 5.0},
    "bsce": {"gamma": 4.0, "norm": 2},
    "bsce-gra": {"gamma": 4.0, "norm": 2},
    "ce-dece": {"meta_lr": 1e-3},
    "flγ-sece": {"meta_lr": 1e-3},
    "bo4sc": {"beta": 20.0, "inner_steps": 10, "weight_lr": 30.0},
}
"""CIFAR (350 GPU epochs a candidate): the papers' stated values (the reference code's for
BSCE, DFL and MMCE), Meta-Calibration's meta learning rate, and bo4sc-images' CIFAR point."""
TABULAR_GRIDS = tuple(
    grid
    for m in (
        "focal",
        "label-smoothing",
        "mmce",
        "dfl",
        "bsce",
        "bsce-gra",
        "ce-dece",
        "flγ-sece",
        "bo4sc",
    )
    if (grid := get_method(m).candidates) is not None
)
"""The tabular sets' candidates (:data:`CANDIDATES_DOC`): the catalogue's
(:data:`selfcal.methods.catalogue.METHODS`, ``selfcal train``'s defaults) -- meta-reg's grids,
bsce-gra's thinned to γ ∈ {1, 3, 5}, and the BO4SC study's pilot point for this network."""
BO4SC_PILOT = TABULAR_GRIDS[-1]


@dataclass(frozen=True)
class BenchmarkProtocol(StudyProtocol):
    """Datasets, methods, the tabular recipe and grids, and what every run evaluates;
    ``val_batch_size``: the most meta-validation rows one BO4SC outer loss reads."""

    seeds: tuple[int, ...] = tuple(range(10))
    datasets: tuple[str, ...] = (
        "mnist1d",
        "digits-images",
        "blobs-1.7",
        "spiral-3.5",
        "breast-cancer",
    )
    methods: tuple[str, ...] = tuple(METHODS)
    mnist1d_sizes: tuple[int, int, int] = (4000, 2000, 10000)
    tabular: Recipe = TABULAR
    tabular_grids: tuple[Grid | Candidates, ...] = TABULAR_GRIDS
    n_bins: int = 15
    val_batch_size: int = 1000

    def recipe(self, dataset: str) -> Recipe:
        return RECIPES.get(dataset, self.tabular)

    def candidates(self, dataset: str, method: str) -> list[dict[str, Any]]:
        """The reused point (MNIST-1D, digits), the papers' (CIFAR), else the grid."""
        if dataset in REUSED or dataset in CIFAR:
            reused = REUSED.get(dataset, PAPER_VALUES)
            return [dict(reused.get(method, {}))]
        for grid in self.tabular_grids:
            if grid.method == method:
                return grid.configs()
        return [{}]


FULL = BenchmarkProtocol("full")
QUICK = BenchmarkProtocol(
    "quick",
    seeds=(0, 1),
    datasets=("blobs-1.7",),
    tabular=Recipe("mlp", 60, "adam", 1e-2, None, hidden=(32, 32)),
    tabular_grids=(
        Grid("focal", gamma=(2.0,)),
        Grid("label-smoothing", eps=(0.05,)),
        Grid("mmce", lam=(2.0,)),
        Grid("dfl", gamma=(3.0,)),
        Grid("bsce", gamma=(3.0,), norm=(2,)),
        Grid("bsce-gra", gamma=(3.0,), norm=(2,)),
        Grid("ce-dece", meta_lr=(1e-3,)),
        Grid("flγ-sece", meta_lr=(1e-3,)),
        BO4SC_PILOT,
    ),
    notes=(
        "--quick: Blobs 1.7 only, two seeds, a 2 x 32 MLP for 60 epochs, one candidate "
        "per method; every method and both regimes, for tests and a first look, not for "
        "conclusions.",
    ),
)
PROTOCOLS = {p.name: p for p in (FULL, QUICK)}
