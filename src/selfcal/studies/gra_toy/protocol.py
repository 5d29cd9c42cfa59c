"""The toy study's protocol: the [GRA] notebook's setup (methods §8.5) plus a validation draw on
which each metric's exponent is selected."""

from __future__ import annotations

from dataclasses import dataclass

from selfcal._validation import check_int, check_positive
from selfcal.experiments.study import StudyProtocol
from selfcal.selection import Criterion

DATASET = "gaussians-5x2d"
METRICS = ("fl", "dfl", "gbs")
SHORT = {"fl": "FL", "dfl": "DFL", "gbs": "gBS"}
LABELS = {"fl": "FL: (1 − p_y)^γ", "dfl": "DFL: (1 − p_y + p_j)^γ", "gbs": "gBS: ‖y − p‖₂^γ"}


@dataclass(frozen=True)
class GraToyProtocol(StudyProtocol):
    """The data, the model and its training (the notebook's), and the exponent grid every
    metric is evaluated on (``gammas``; generalised Brier with norm ``gbs_norm``)."""

    datasets: tuple[str, ...] = (DATASET,)
    n_classes: int = 5
    train_per_class: int = 10_000
    val_per_class: int = 1_000
    test_per_class: int = 1_000
    mean_range: float = 10.0
    hidden: int = 10
    lr: float = 1.0
    batch_size: int = 1000
    epochs: int = 1
    standardize: bool = True
    gammas: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0)
    gbs_norm: float = 2.0

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in (
            "train_per_class",
            "val_per_class",
            "test_per_class",
            "hidden",
            "batch_size",
            "epochs",
        ):
            check_int(name, getattr(self, name))
        check_int("n_classes", self.n_classes, minimum=2)
        check_positive("mean_range", self.mean_range)
        check_positive("lr", self.lr)
        if not self.gammas:
            raise ValueError("gammas must not be empty")


FULL = GraToyProtocol(
    "full",
    seeds=tuple(range(20)),
    notes=(
        "20 seeds (the paper averages 5): the correlations vary a lot between draws of the "
        "class means, and the intervals show it.",
    ),
)
QUICK = GraToyProtocol(
    "quick",
    seeds=(0, 1),
    train_per_class=2_000,
    val_per_class=300,
    test_per_class=300,
    notes=("--quick: two seeds and smaller draws; for tests, not conclusions.",),
)
PROTOCOLS = {p.name: p for p in (FULL, QUICK)}
SELECTION = Criterion(
    "val_pearson", maximize=True, words="highest correlation with c(x) on the validation points"
)
"""Each weight's exponent: the one whose weights correlate best with the true calibration error
c(x) on the validation points."""
