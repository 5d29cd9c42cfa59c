"""``selfcal reproduce gra-toy``: [GRA]'s toy study -- do the uncertainty metrics behind FL,
DFL and BSCE track the true calibration error (:mod:`selfcal.studies.gra_toy.execute`)?"""

from __future__ import annotations

from collections.abc import Hashable

from selfcal.experiments.spec import RunSpec
from selfcal.experiments.study import Study, register_study
from selfcal.selection import grid
from selfcal.studies.gra_toy.protocol import DATASET, METRICS, GraToyProtocol


@register_study
class GraToy(Study[GraToyProtocol]):
    title = "[GRA] toy study: uncertainty metrics vs the true calibration error"
    version = 2

    def specs(self, protocol: GraToyProtocol) -> list[RunSpec]:
        return [
            self.spec(protocol, DATASET, metric, seed, config=config)
            for seed in protocol.seeds
            for metric in METRICS
            for config in grid(gamma=protocol.gammas)
        ]

    def batch_by(self, spec: RunSpec) -> Hashable:
        return spec.seed  # one trained model serves every candidate of a seed
