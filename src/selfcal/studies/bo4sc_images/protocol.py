"""The BO4SC-on-images study's protocol: cross-entropy and minibatch BO4SC on the image
studies' data, backbones and epoch budgets, BO4SC's weight step, smoothness and unroll length
selected per seed on validation."""

from __future__ import annotations

from dataclasses import dataclass

from selfcal.selection import VAL_ECE, Grid
from selfcal.studies._images import ImageProtocol, quick_fields

MODELS = {
    "mnist1d": "cnn1d",
    "digits-images": "cnn2d",
    "cifar10": "resnet18",
    "cifar100": "resnet18",
}
METHODS = ("ce", "bo4sc")
LABELS = {"ce": "CE", "ce-ts": "CE + TS", "bo4sc": "BO4SC", "bo4sc-ts": "BO4SC + TS"}
SELECTION = VAL_ECE
"""The image studies' criterion: the lowest validation ECE before temperature scaling, on the
validation split (BO4SC's outer loss trains on the separate meta-validation split)."""
GRIDS = (Grid("bo4sc", weight_lr=(3.0, 30.0, 300.0), inner_steps=(5, 10), beta=(20.0,)),)
"""``eta_w``: ``dF/dw_i`` of a drawn row is ``O(1/B)``, and a row is drawn once an epoch, so
``eta_w`` is on another scale than the full-batch study's; the three values span the range
where, in a pilot (MNIST-1D and digits, seed 0, short regime, T = 10), the final weights went
from barely moved (3: mean 0.98) to strongly moved (300: mean 0.53-0.59, about 40% below
0.5). ``T``: 5 and the paper's 10. ``beta``: fixed at 20, not tuned here (each further
value doubles BO4SC's runs)."""
CIFAR_GRIDS = (Grid("bo4sc", weight_lr=(30.0,), inner_steps=(10,), beta=(20.0,)),)


@dataclass(frozen=True)
class BO4SCImagesProtocol(ImageProtocol):
    """The image recipe (:mod:`selfcal.studies._images`), the two methods and BO4SC's grid;
    ``val_batch_size``: the most meta-validation rows one outer loss reads."""

    seeds: tuple[int, ...] = tuple(range(10))
    methods: tuple[str, ...] = METHODS
    grids: tuple[Grid, ...] = GRIDS
    cifar_grids: tuple[Grid, ...] = CIFAR_GRIDS
    val_batch_size: int = 1000


FULL = BO4SCImagesProtocol("full")
QUICK = BO4SCImagesProtocol(
    "quick",
    grids=(Grid("bo4sc", weight_lr=(30.0,), inner_steps=(2,), beta=(20.0,)),),
    **quick_fields(
        3,
        "--quick: digits only, two seeds, 3 epochs, one BO4SC candidate; for tests and a "
        "first look, not for conclusions.",
    ),
)
PROTOCOLS = {p.name: p for p in (FULL, QUICK)}
