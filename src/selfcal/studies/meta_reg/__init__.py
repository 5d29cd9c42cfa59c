"""``selfcal reproduce meta-reg``: the meta-regularization study ([MetaReg] Tables 1-2 and
Figures 3-5) -- γ-Net + SECE against the baselines and meta-calibration (CE-DECE, CE-SECE) on
CPU-sized image benchmarks, MNIST-1D (1-D CNN) and digits as 8x8 images (2-D CNN), with every
tuned or unstated hyperparameter (focal γ, label-smoothing ε, MMCE λ, the meta learning rate)
selected per seed on validation, in a short and a long (memorising) regime."""

from __future__ import annotations

from selfcal.experiments.spec import RunSpec
from selfcal.experiments.study import Study, register_study
from selfcal.methods import MethodSpec
from selfcal.studies import _images
from selfcal.studies.meta_reg.protocol import METHODS, MetaRegProtocol


@register_study
class MetaReg(Study[MetaRegProtocol]):
    title = "Meta-regularization reproduction (γ-Net + SECE): Tables 1-2 and Figures 3-5"
    version = 2

    def fingerprint_extras(self) -> dict[str, dict[str, MethodSpec]]:
        return {"methods": METHODS}

    def device(self, dataset: str) -> str:
        return _images.device_for(dataset)

    def specs(self, protocol: MetaRegProtocol) -> list[RunSpec]:
        return _images.regime_specs(
            self, protocol, protocol.methods, _images.sweep_datasets(protocol)
        )
