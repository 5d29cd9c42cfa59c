"""The post-hoc leaderboard's protocol: which prediction sets (the benchmark's networks and
scikit-learn models on the tabular sets) and which calibrators."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import selfcal.posthoc  # noqa: F401  (registers every calibrator)
from selfcal.experiments.study import StudyProtocol
from selfcal.posthoc.registry import build_calibrator, calibrator_names
from selfcal.studies._sets import PROTOCOL

MODELS = ("logistic", "gradient-boosting", "random-forest", "mlp")
"""The scikit-learn models (:func:`selfcal.studies.posthoc.sources.sklearn_model`)."""
TABULAR = ("breast-cancer", "bac", "spiral-3.5", "wine", "blobs-1.7", "digits", "mnist1d")
"""selfcal's tabular loaders (MNIST-1D's 40 values as features)."""
GENERATED = {"classification-2": 2, "classification-20": 20}
"""scikit-learn ``make_classification`` sets (classes), with large validation splits."""
REFERENCE = "probmetrics-sms"
"""probmetrics' structured matrix scaling, a reference row where probmetrics is installed."""
BINARY_ONLY = ("platt", "quadratic", "beta")


NOT_YET = ("venn-abers", "venn-abers-top")
"""Registered calibrators not yet on the leaderboard: the Venn-Abers predictors (issue 51) join
it when the benchmark's predictions store is regenerated (hours on two cores); their evidence
on the shared prediction sets is ``results/venn-abers-real``
(``scripts/venn_abers_evidence.py``)."""


def default_calibrators() -> tuple[str, ...]:
    """Every registered calibrator that calibrates without groups (the study's sets have
    none; a calibrator with ``uses_groups`` needs them), less :data:`NOT_YET`."""
    names = (n for n in calibrator_names() if n not in NOT_YET)
    return tuple(n for n in names if not build_calibrator(n).uses_groups)


@dataclass(frozen=True)
class PosthocProtocol(StudyProtocol):
    """``datasets`` x ``models`` x ``seeds`` scikit-learn prediction sets, plus (``benchmark``)
    every selected record of ``selfcal reproduce benchmark`` (its protocol
    ``benchmark_protocol``) read from ``benchmark_store``
    (a path, not part of the fingerprint: the records' own keys are); every set is
    calibrated by every name in ``calibrators`` (binary-only ones on two classes only) and
    by probmetrics' SMS when ``reference`` and probmetrics is installed. ``generated_rows``:
    the rows of each split of the generated sets."""

    datasets: tuple[str, ...] = TABULAR + tuple(GENERATED)
    models: tuple[str, ...] = MODELS
    benchmark: bool = True
    benchmark_store: str = "results/benchmark.sqlite"
    benchmark_protocol: str = "full"
    calibrators: tuple[str, ...] = default_calibrators()
    reference: bool = True
    generated_rows: int = 2000
    n_bins: int = 15

    def settings(self) -> dict[str, Any]:
        return {k: v for k, v in super().settings().items() if k != "benchmark_store"}


FULL = PosthocProtocol(
    "full",
    seeds=(0, 1, 2, 3, 4),
    notes=(
        "Every selected record of the benchmark (each method x dataset x seed x regime; its "
        "stored validation / test logits), and four scikit-learn models on nine tabular sets "
        "with five seeds.",
    ),
)
QUICK = PosthocProtocol(
    "quick",
    seeds=(0, 1),
    datasets=("breast-cancer", "wine"),
    models=("logistic",),
    benchmark=False,
    reference=False,
    notes=("--quick: logistic regression on two small sets, two seeds; for tests only.",),
)


@dataclass(frozen=True)
class PosthocSetsProtocol(StudyProtocol):
    """The leaderboard on prediction sets (:mod:`selfcal.studies._sets`: every set under
    ``$SELFCAL_PREDICTIONS``, ``selfcal reproduce posthoc --sets DIR``): every name in
    ``calibrators`` (binary-only ones on two classes only) and probmetrics' SMS when
    ``reference``, fitted on each set's validation split and scored on its test split, with
    ``resamples`` seeded bootstrap resamples of its test rows for paired intervals."""

    calibrators: tuple[str, ...] = default_calibrators()
    reference: bool = True
    n_bins: int = 15
    resamples: int = 1000


SETS = PosthocSetsProtocol(
    PROTOCOL,
    seeds=(0,),
    notes=(
        "Every prediction set under the folder given with --sets (or $SELFCAL_PREDICTIONS): "
        "fitted on its validation split, scored on its test split.",
    ),
)
PROTOCOLS = {p.name: p for p in (FULL, QUICK, SETS)}
