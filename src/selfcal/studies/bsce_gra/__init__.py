"""``selfcal reproduce bsce-gra``: the [GRA] loss comparison (Lin et al., uncertainty-weighted
gradients; Tables 1-5 and 2) on CPU-sized image benchmarks -- MNIST-1D (1-D CNN; 4,000 / 2,000
/ 10,000 signals) and scikit-learn's digits as 8x8 images (2-D CNN) -- with each loss's tuned
hyperparameters selected per seed on validation, in a short and a long (memorising) regime,
and BSCE-GRA's rest point checked by training."""

from __future__ import annotations

from selfcal.experiments.spec import RunSpec
from selfcal.experiments.study import Study, register_study
from selfcal.studies import _images
from selfcal.studies.bsce_gra.protocol import (
    REST_POINT_DATASET,
    REST_POINT_GAMMAS,
    BsceGraProtocol,
)
from selfcal.studies.bsce_gra.rest_point import method_name


@register_study
class BsceGra(Study[BsceGraProtocol]):
    title = "BSCE-GRA reproduction (Lin et al., uncertainty-weighted gradients): Tables 1-5 and 2"
    version = 2

    def device(self, dataset: str) -> str:
        return _images.device_for(dataset)

    def specs(self, protocol: BsceGraProtocol) -> list[RunSpec]:
        checks = [
            self.spec(protocol, REST_POINT_DATASET, method_name(g), seed)
            for g in (None, *REST_POINT_GAMMAS)
            for seed in protocol.seeds
        ]
        return checks + _images.regime_specs(
            self, protocol, protocol.losses, _images.sweep_datasets(protocol)
        )
