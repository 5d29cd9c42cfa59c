"""``selfcal reproduce bo4sc-images``: minibatch BO4SC on the image studies' data -- MNIST-1D
(1-D CNN) and digits as 8x8 images (2-D CNN), the CIFAR rows (ResNet-18) when the data is
present -- against cross-entropy and cross-entropy + temperature scaling, with the same
backbone, recipe and epoch budget, BO4SC's weight step and unroll length selected per seed on
validation, in a short and a long (memorising) regime, 10 seeds."""

from __future__ import annotations

from selfcal.experiments.spec import RunSpec
from selfcal.experiments.study import Study, register_study
from selfcal.studies import _images
from selfcal.studies.bo4sc_images.protocol import BO4SCImagesProtocol


@register_study
class BO4SCImages(Study[BO4SCImagesProtocol]):
    title = "BO4SC on images: minibatch BO4SC against CE and CE + TS"
    version = 1

    def device(self, dataset: str) -> str:
        return _images.device_for(dataset)

    def specs(self, protocol: BO4SCImagesProtocol) -> list[RunSpec]:
        return _images.regime_specs(
            self, protocol, protocol.methods, _images.sweep_datasets(protocol)
        )
