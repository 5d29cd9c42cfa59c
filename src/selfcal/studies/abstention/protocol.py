"""The abstention study's protocols: the calibrators, the number of re-splits, the target
risks and failure probabilities, the share of rows that fits the calibrators, the per-group
setting and the synthetic set's size."""

from __future__ import annotations

from dataclasses import dataclass

from selfcal.experiments.study import StudyProtocol
from selfcal.studies._sets import PROTOCOL

CALIBRATORS = ("none", "ts", "sms", "auto")
"""The calibrators fitted before certifying, by registered name (``none``: the model's
softmax). One that cannot be fitted on a set has no numbers there and its reason is kept."""
RULES = ("empirical", "crc", "ltt", "ltt_mapie")
"""``ltt``: Learn-then-Test as :func:`selfcal.abstention.certify_threshold` does by default
(every distinct confidence, multi-start fixed sequence, exact binomial p-value);
``ltt_mapie``: MAPIE 1.6's regime (a grid of 100 thresholds, Holm, Hoeffding-Bentkus);
``crc``: conformal risk control; ``empirical``: today's rule (no promise)."""


@dataclass(frozen=True)
class AbstentionProtocol(StudyProtocol):
    """Each set's rows (validation and test pooled) are split once, seeded by the run's seed:
    ``fit_share`` of them fits each calibrator of ``calibrators``; the rest, calibrated by
    that fixed map, is the population. ``resplits`` re-splits of each kind
    (:data:`~selfcal.studies.abstention.engine.KINDS`) certify a threshold per rule at each
    target risk of ``eps`` (and each ``delta`` of ``deltas`` for the LTT rules) and read its
    risk. ``group_eps``, ``group_delta``, ``group_calibrator``: the per-group certificates
    (:class:`~selfcal.abstention.GuaranteedAbstention` with ``groups=``) on sets whose files
    carry groups, over ``group_resplits`` i.i.d. re-splits. ``synthetic_rows`` rows of
    ``synthetic_classes`` classes make the synthetic set (0: none)."""

    calibrators: tuple[str, ...] = CALIBRATORS
    resplits: int = 1000
    eps: tuple[float, ...] = (0.01, 0.02, 0.05, 0.10)
    deltas: tuple[float, ...] = (0.05, 0.10)
    fit_share: float = 1 / 3
    group_eps: float = 0.10
    group_delta: float = 0.10
    group_calibrator: str = "ts"
    group_resplits: int = 1000
    synthetic_rows: int = 15_000
    synthetic_classes: int = 10


@dataclass(frozen=True)
class AbstentionSetsProtocol(AbstentionProtocol):
    """:class:`AbstentionProtocol` on every prediction set under ``$SELFCAL_PREDICTIONS``
    (``selfcal reproduce abstention --sets DIR``)."""


FULL = AbstentionProtocol(
    "full",
    seeds=(0,),
    notes=("A synthetic set (15,000 rows, 10 classes, overconfident logits), 1,000 re-splits.",),
)
QUICK = AbstentionProtocol(
    "quick",
    seeds=(0,),
    calibrators=("none", "ts"),
    resplits=40,
    group_resplits=10,
    synthetic_rows=3_000,
    synthetic_classes=4,
    notes=("--quick: a small synthetic set, 40 re-splits; for tests only.",),
)
SETS = AbstentionSetsProtocol(
    PROTOCOL,
    seeds=(0,),
    synthetic_rows=0,
    notes=(
        "Every prediction set under the folder given with --sets (or $SELFCAL_PREDICTIONS): "
        "validation and test rows pooled, a third fits the calibrators, 1,000 re-splits of "
        "the rest.",
    ),
)
PROTOCOLS = {p.name: p for p in (FULL, QUICK, SETS)}
