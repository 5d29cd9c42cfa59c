"""``selfcal reproduce benchmark``: every method of the three papers on the same data, backbone,
initialisation and epoch budget -- cross-entropy, Brier, MMCE, label smoothing, mixup, focal,
FLSD-53, dual focal, BSCE, BSCE-GRA, CE-DECE (meta-calibration), FLγ-SECE (γ-Net) and BO4SC --
each scored raw and after temperature scaling, structured matrix scaling, the calibrator
``auto`` chooses and isotonic regression, in a memorising regime and stopped early by validation
NLL or by validation refinement loss, 10 seeds: one leaderboard per dataset and regime that
answers *does any of them beat cross-entropy followed by a post-hoc calibrator?* -- in
distribution, and on shifted test sets at five severities (:mod:`selfcal.data.shift`)."""

from __future__ import annotations

from collections.abc import Hashable

from selfcal.experiments.spec import RunSpec
from selfcal.experiments.study import Study, register_study
from selfcal.studies import _images
from selfcal.studies.benchmark.protocol import (
    METHODS,
    RECIPES,
    REGIMES,
    BenchmarkProtocol,
)


@register_study
class Benchmark(Study[BenchmarkProtocol]):
    title = "Benchmark: every method of the three papers on the same data, one leaderboard"
    version = 4  # 4: the refine-stop regime and the shifted test sets

    def fingerprint_extras(self) -> dict[str, object]:
        return {"methods": METHODS, "recipes": {k: repr(v) for k, v in RECIPES.items()}}

    def device(self, dataset: str) -> str:
        return _images.device_for(dataset)

    def specs(self, protocol: BenchmarkProtocol) -> list[RunSpec]:
        datasets = tuple(protocol.datasets) + (
            _images.available_cifar() if protocol.name == "full" else ()
        )
        return [
            self.spec(protocol, d, m, seed, regime=r, config=c)
            for d in datasets
            for m in protocol.methods
            for c in protocol.candidates(d, m)
            for seed in protocol.seeds
            for r in REGIMES
        ]

    def batch_by(self, spec: RunSpec) -> Hashable:
        """The regimes of one (dataset, method, candidate, seed) come from one run."""
        hp = tuple(sorted((k, v) for k, v in spec.hparams.items() if k != "regime"))
        return spec.dataset, spec.method, spec.seed, hp
