"""The groups study's protocols: which methods, how many random re-splits, the binning, the
calibrated draws of the yardstick, the conformal level, and the synthetic set's size."""

from __future__ import annotations

from dataclasses import dataclass

from selfcal.experiments.study import StudyProtocol
from selfcal.studies._sets import PROTOCOL

METHODS = ("none", "ts", "sms", "auto", "groupwise", "multicalibration")
"""The post-processing compared, by registered name: none (the model's softmax), temperature
scaling, structured matrix scaling, ``auto`` (cross-validated choice among the calibrators),
then the two that see groups -- the group-wise calibrator (:mod:`selfcal.posthoc.groups`) and
multiclass multicalibration (:mod:`selfcal.posthoc.multicalibration`). One that is not
registered, or cannot be fitted on a set, has no numbers there and its reason is reported."""
BASELINE = "ts"
"""Every method is compared with temperature scaling, split by split."""


@dataclass(frozen=True)
class GroupsProtocol(StudyProtocol):
    """Each seed is one random re-split of a set's pooled rows (validation and test): half fits
    every method of ``methods``, the other half measures it -- each group's ECE (``n_bins``
    equal-width bins) beside what a calibrated model shows at the group's size (``n_draws``
    calibrated draws), the marginal NLL -- and is halved again for split-conformal LAC sets at
    ``alpha`` (one half calibrates, the other is scored), marginal and Mondrian by group.
    ``synthetic_rows`` rows of ``synthetic_classes`` classes make the synthetic set with
    overlapping groups (:func:`~selfcal.studies.groups.data.synthetic_set`; 0: none)."""

    methods: tuple[str, ...] = METHODS
    n_bins: int = 15
    n_draws: int = 200
    alpha: float = 0.1
    synthetic_rows: int = 20_000
    synthetic_classes: int = 10


@dataclass(frozen=True)
class GroupsSetsProtocol(GroupsProtocol):
    """:class:`GroupsProtocol` on every prediction set under ``$SELFCAL_PREDICTIONS``
    (``selfcal reproduce groups --sets DIR``), grouped by
    :func:`~selfcal.studies.groups.data.set_groups`, and on the synthetic set beside them."""


FULL = GroupsProtocol(
    "full",
    seeds=tuple(range(20)),
    notes=("The synthetic set with overlapping groups (20,000 rows, 10 classes), 20 re-splits.",),
)
QUICK = GroupsProtocol(
    "quick",
    seeds=(0, 1),
    n_draws=50,
    synthetic_rows=3_000,
    synthetic_classes=4,
    notes=("--quick: a small synthetic set, two re-splits; for tests only.",),
)
SETS = GroupsSetsProtocol(
    PROTOCOL,
    seeds=tuple(range(10)),
    notes=(
        "Every prediction set under the folder given with --sets (or $SELFCAL_PREDICTIONS), "
        "and the synthetic set, each re-split 10 times: half fits, half measures.",
    ),
)
PROTOCOLS = {p.name: p for p in (FULL, QUICK, SETS)}
