"""``selfcal reproduce gra-toy``: [GRA]'s toy study -- do the uncertainty metrics behind FL,
DFL and BSCE track the true calibration error (:mod:`selfcal.studies.gra_toy.execute`)?"""

from __future__ import annotations

from collections.abc import Hashable

from selfcal.experiments.selection import Criterion, grid
from selfcal.experiments.spec import RunSpec
from selfcal.experiments.study import Study, register_study
from selfcal.studies.gra_toy.protocol import DATASET, METRICS, PROTOCOLS, GraToyProtocol

VAL_PEARSON = Criterion(
    "val_pearson", maximize=True, words="highest correlation with c(x) on the validation points"
)


@register_study
class GraToy(Study[GraToyProtocol]):
    name = "gra-toy"
    title = "[GRA] toy study: uncertainty metrics vs the true calibration error"
    help = (
        "BSCE-GRA's toy study: correlation of the FL / DFL / generalized-Brier weights with "
        "the true calibration error on 2-D Gaussians, at equal exponents and at each one's "
        "validation-selected exponent, beside the published 0.550 / 0.638 / 0.664."
    )
    version = 2
    protocols = PROTOCOLS
    selection = VAL_PEARSON

    def specs(self, protocol: GraToyProtocol) -> list[RunSpec]:
        return [
            self.spec(protocol, DATASET, metric, seed, config=config)
            for seed in protocol.seeds
            for metric in METRICS
            for config in grid(gamma=protocol.gammas)
        ]

    def batch_by(self, spec: RunSpec) -> Hashable:
        return spec.seed  # one trained model serves every candidate of a seed
