"""The meta-regularization study's protocol: [MetaReg] Tables 1-2 (γ-Net + SECE against the
baselines and meta-calibration), every tuned or unstated hyperparameter selected per seed on
validation, in a short and a long (memorising) regime."""

from __future__ import annotations

from dataclasses import dataclass

from selfcal.selection import VAL_ECE, Grid
from selfcal.studies._images import ImageProtocol, image_methods, quick_fields

MODELS = {
    "mnist1d": "cnn1d",
    "digits-images": "cnn2d",
    "cifar10": "resnet18",
    "cifar100": "resnet18",
}
METHODS = image_methods(
    "ce",
    "focal",
    "flsd53",
    "ls",
    "mixup",
    "mmce",
    "ce-dece",
    "ce-sece",
    "flg",
    "flg-dece",
    "flg-sece",
)
"""method -> (kind, loss or meta method, fixed options); the grid adds the tuned ones.
``"loss"``: ``fit`` with the loss; ``"mixup"``: ``fit`` with CE and ``mixup_alpha``;
``"meta"``: ``fit_meta`` (one-step lookahead of the head, Adam on the meta module). "FLγ" (the
paper's Table 2 ablation, "γ-Net without SECE") is γ-Net meta-trained on the mean
cross-entropy of the meta-validation batch: the paper does not state its meta-objective, so
this is our reading (methods §6.6 item 8)."""
META = tuple(m for m, (kind, _, _) in METHODS.items() if kind == "meta")
GAMMA_NETS = ("flg", "flg-dece", "flg-sece")
LABELS = {
    "ce": "CE",
    "ce-ts": "CE (TS)",
    "focal": "Focal",
    "flsd53": "FLSD-53",
    "ls": "LS",
    "mixup": "Mixup α=1",
    "mmce": "MMCE",
    "ce-dece": "CE-DECE",
    "ce-sece": "CE-SECE",
    "flg": "FLγ",
    "flg-dece": "FLγ-DECE",
    "flg-sece": "FLγ-SECE",
}
SELECTION = VAL_ECE
"""[MetaReg] names no selection criterion (and no meta learning rate); ours is the lowest
validation ECE before temperature scaling, on the validation split (not the meta-validation
split the meta-learners train on)."""
META_LRS = (1e-5, 1e-4, 1e-3)
"""Adam's learning rate on the meta module: unstated in the paper; Meta-Calibration's 1e-3
moves γ = |x̃W| / 0.01 by up to ~0.7 a step, so the grid reaches down to 1e-5."""
GRIDS = (
    Grid("focal", gamma=(1.0, 2.0, 3.0)),
    Grid("ls", eps=(0.05, 0.1)),
    Grid("mmce", lam=(1.0, 2.0, 4.0)),
    *(Grid(m, meta_lr=META_LRS) for m in META),
)
"""Focal gamma ([FLC]'s 1-3; the paper's baseline uses 1), label smoothing's two published
values, MMCE's lambda around the reference 2, and the meta learning rate."""
PAPER_GRIDS = (
    Grid("focal", gamma=(1.0,)),
    Grid("ls", eps=(0.05, 0.1)),
    Grid("mmce", lam=(2.0,)),
    *(Grid(m, meta_lr=(1e-4, 1e-3)) for m in META),
)
"""CIFAR (350 GPU epochs a candidate): the paper's stated values, the meta learning rate at
Meta-Calibration's 1e-3 and one step below."""
BIN_COUNTS = (10, 20, 50, 100, 200, 500, 1000)
"""[MetaReg] Fig. 5: ECE and MCE against the number of bins."""


@dataclass(frozen=True)
class MetaRegProtocol(ImageProtocol):
    """The recipe (:mod:`selfcal.studies._images`), the methods and their grids; the checkpoint
    with the best validation accuracy (the reference code's rule) is evaluated."""

    methods: tuple[str, ...] = tuple(METHODS)
    grids: tuple[Grid, ...] = GRIDS
    cifar_grids: tuple[Grid, ...] = PAPER_GRIDS
    best_by: str = "accuracy"


FULL = MetaRegProtocol("full")
QUICK = MetaRegProtocol(
    "quick",
    methods=("ce", "mixup", "flg", "flg-sece"),
    grids=(Grid("flg-sece", meta_lr=(1e-4, 1e-3)),),
    **quick_fields(
        3,
        "--quick: digits only, two seeds, 3 epochs, 4 methods and one small grid; for "
        "tests and a first look, not for conclusions.",
    ),
)
PROTOCOLS = {p.name: p for p in (FULL, QUICK)}
