"""``selfcal reproduce bo4sc``: the BO4SC study (Sanguin et al., AICS 2024: Table 1 and
Figures 1-3) -- Standard, IsoReg, temperature scaling and BO4SC on the paper's five datasets
and two held-out ones, in three regimes (early-stopped by validation NLL; selected by
validation accuracy, the paper's grid search; a larger network trained to overfit), every
hyperparameter selected per seed on validation."""

from __future__ import annotations

from collections.abc import Hashable

from selfcal.experiments.spec import RunSpec
from selfcal.experiments.store import RunRecord
from selfcal.experiments.study import Study, register_study
from selfcal.selection import Criterion
from selfcal.studies.bo4sc import execute as experiment
from selfcal.studies.bo4sc.protocol import METHODS, Bo4scProtocol


@register_study
class Bo4sc(Study[Bo4scProtocol]):
    title = "BO4SC reproduction (Sanguin et al., AICS 2024, Table 1 and Figures 1-3)"
    version = 4  # 4: temperature scaling returns T = 1 on an all-correct validation set

    def specs(self, protocol: Bo4scProtocol) -> list[RunSpec]:
        out: list[RunSpec] = []
        for r in protocol.regimes:
            for method in METHODS:
                configs = (
                    r.grid.configs() if method == "bo4sc" else [{"lr": lr} for lr in r.standard_lrs]
                )
                out += [
                    self.spec(protocol, d, method, seed, regime=r.name, config=c)
                    for d in protocol.datasets
                    for c in configs
                    for seed in protocol.seeds
                ]
        return sorted(out, key=lambda s: s.method != "bo4sc")  # the longest groups first

    def batch_by(self, spec: RunSpec) -> Hashable:
        return experiment.group_of(self.protocol_of(spec), spec)

    def criterion(self, record: RunRecord) -> Criterion:
        from selfcal.experiments.selection import regime

        protocol = self.protocol_of(record.spec)
        return protocol.regime(regime(record)).criterion(record.spec.method)
