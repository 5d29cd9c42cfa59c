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
    PROTOCOLS,
    REST_POINT_DATASET,
    REST_POINT_GAMMAS,
    SELECTION,
    BsceGraProtocol,
)
from selfcal.studies.bsce_gra.rest_point import method_name


@register_study
class BsceGra(Study[BsceGraProtocol]):
    name = "bsce-gra"
    title = "BSCE-GRA reproduction (Lin et al., uncertainty-weighted gradients): Tables 1-5 and 2"
    help = (
        "BSCE-GRA (Lin et al.): the loss comparison of Tables 1-5 and 2 on MNIST-1D and "
        "digits, 5 seeds, each loss's gamma / norm / lambda selected on validation, a "
        "short and a long (memorising) schedule, pre/post temperature scaling, the rest "
        "point of the method; the published CIFAR numbers beside (CIFAR rows run when the "
        "data is under $SELFCAL_DATA)."
    )
    version = 2
    protocols = PROTOCOLS
    selection = SELECTION

    def specs(self, protocol: BsceGraProtocol) -> list[RunSpec]:
        checks = [
            self.spec(protocol, REST_POINT_DATASET, method_name(g), seed)
            for g in (None, *REST_POINT_GAMMAS)
            for seed in protocol.seeds
        ]
        return checks + _images.regime_specs(
            self, protocol, protocol.losses, _images.sweep_datasets(protocol)
        )
