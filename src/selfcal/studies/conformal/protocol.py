"""The conformal study's protocol: which prediction sets (the benchmark's stored predictions,
or scikit-learn models for the quick protocol), which post-hoc steps, scores and levels, and
how many random halvings of each test split."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from selfcal.experiments.study import StudyProtocol
from selfcal.studies._sets import PROTOCOL

POSTHOC = ("none", "ts", "sms")
"""The post-hoc steps fitted on each run's validation predictions before conformalising:
nothing (the softmax), temperature scaling, structured matrix scaling."""
SCORES = ("lac", "aps", "raps")
"""The conformity scores of the marginal sets (:data:`selfcal.conformal.SCORES`)."""
MONDRIAN_SCORE = "lac"
"""The score also run class-conditionally (Mondrian: one threshold per class)."""
ALPHAS = (0.01, 0.05, 0.1)
"""The miscoverage levels."""


class _ScoreNames:
    """What the conformal protocols share: the names of the scores they run."""

    scores: tuple[str, ...]
    mondrian_score: str | None

    @property
    def score_names(self) -> tuple[str, ...]:
        """The marginal scores, then ``<score>-mondrian``."""
        extra = () if self.mondrian_score is None else (f"{self.mondrian_score}-mondrian",)
        return (*self.scores, *extra)


@dataclass(frozen=True)
class ConformalProtocol(_ScoreNames, StudyProtocol):
    """Every selected record of ``selfcal reproduce benchmark`` (protocol
    ``benchmark_protocol``, regimes ``regimes``) read from ``benchmark_store`` (a path, not part
    of the fingerprint), or, with ``benchmark=False``, scikit-learn ``models`` on ``datasets``
    (:func:`selfcal.studies.posthoc.sources.sklearn_set`). Each set: every ``posthoc`` step
    fitted on its validation predictions, then ``halvings`` seeded random halvings of its test
    predictions (one half calibrates, the other is scored) at every level of ``alphas`` for
    every score of ``scores``, plus ``mondrian_score`` class-conditionally."""

    benchmark: bool = True
    benchmark_store: str = "results/benchmark.sqlite"
    benchmark_protocol: str = "full"
    regimes: tuple[str, ...] = ("memorise", "refine-stop")
    models: tuple[str, ...] = ()
    posthoc: tuple[str, ...] = POSTHOC
    scores: tuple[str, ...] = SCORES
    mondrian_score: str | None = MONDRIAN_SCORE
    alphas: tuple[float, ...] = ALPHAS
    halvings: int = 20

    def settings(self) -> dict[str, Any]:
        return {k: v for k, v in super().settings().items() if k != "benchmark_store"}


FULL = ConformalProtocol(
    "full",
    seeds=tuple(range(10)),
    notes=(
        "Every selected record of the benchmark (13 methods x 5 datasets x 10 seeds) in the "
        "memorising and refine-stop regimes, from its stored validation / test logits.",
    ),
)
QUICK = ConformalProtocol(
    "quick",
    seeds=(0, 1),
    datasets=("breast-cancer", "wine"),
    models=("logistic",),
    benchmark=False,
    halvings=3,
    notes=("--quick: logistic regression on two small sets, two seeds; for tests only.",),
)


@dataclass(frozen=True)
class ConformalSetsProtocol(_ScoreNames, StudyProtocol):
    """Every prediction set under ``$SELFCAL_PREDICTIONS`` (``selfcal reproduce conformal
    --sets DIR``, :mod:`selfcal.studies._sets`): each ``posthoc`` step fitted on its
    validation split, then ``halvings`` random halvings of its test split at every level of
    ``alphas`` for every score of ``scores`` (and ``mondrian_score`` class-conditionally);
    for a set with groups, each group's coverage under ``group_score``'s marginal and
    Mondrian-by-group predictors."""

    posthoc: tuple[str, ...] = (*POSTHOC, "auto")
    scores: tuple[str, ...] = SCORES
    mondrian_score: str | None = MONDRIAN_SCORE
    alphas: tuple[float, ...] = ALPHAS
    halvings: int = 20
    group_score: str = "lac"


SETS = ConformalSetsProtocol(
    PROTOCOL,
    seeds=(0,),
    notes=(
        "Every prediction set under the folder given with --sets (or $SELFCAL_PREDICTIONS): "
        "post-hoc steps fitted on its validation split, conformal sets on its test split.",
    ),
)
PROTOCOLS = {p.name: p for p in (FULL, QUICK, SETS)}
