"""``selfcal reproduce groups``: calibrated for every group, not only on average -- does
group-aware post-processing (a group-wise calibrator, multiclass multicalibration) help
beyond temperature scaling, on which models, at what cost in marginal NLL? Each set's rows
are re-split at random many times; half fits none / TS / SMS / ``auto`` / group-wise /
multicalibration, half measures the worst group's and the mean group ECE (each beside what a
perfectly calibrated model shows at that size), the marginal NLL, and each group's coverage
by split-conformal sets (marginal and Mondrian by group), with paired intervals against TS
over the re-splits (:mod:`selfcal.studies.groups.report`). The full protocol runs a
synthetic set with overlapping groups; with ``--sets DIR`` it runs on the prediction sets in
DIR (MMLU subjects in the files; CIFAR-100 superclasses and CIFAR-10 animal / vehicle of the
predicted class) and the synthetic set beside them."""

from __future__ import annotations

from typing import Any

from selfcal.experiments.spec import RunResult, RunSpec
from selfcal.experiments.study import Study, register_study
from selfcal.studies._sets import SetsStudy, set_result, set_specs
from selfcal.studies.groups.data import SYNTHETIC
from selfcal.studies.groups.protocol import GroupsProtocol, GroupsSetsProtocol

SYNTHETIC_METHOD = "synthetic"
"""The ``method`` of the synthetic set's runs (a prediction set's is ``set``)."""


@register_study
class Groups(SetsStudy, Study[GroupsProtocol]):
    title = "Calibrated for every group: group-aware post-processing against temperature scaling"
    sets_protocol = GroupsSetsProtocol
    sets_heading = (
        "Calibrated for every group, on prediction sets: group-aware post-processing against "
        "temperature scaling"
    )
    version = 2  # 2: auto with groups (group-aware candidates, group-stratified folds)

    def specs(self, protocol: GroupsProtocol) -> list[RunSpec]:
        """One run per (set, re-split): every prediction set under the folder (sets protocol:
        :func:`~selfcal.studies._sets.set_specs`, whose ``hp`` config it keeps) once per seed,
        and the synthetic set once per seed."""
        out = []
        if self._on_sets(protocol):
            for listed in set_specs(self, protocol):
                config = {
                    k.removeprefix("hp."): v
                    for k, v in listed.hparams.items()
                    if k.startswith("hp.")
                }
                out += [
                    self.spec(protocol, listed.dataset, listed.method, seed, config=config)
                    for seed in protocol.seeds
                ]
        return out + self.source_specs(protocol)

    def source_specs(self, protocol: GroupsProtocol) -> list[RunSpec]:
        """The synthetic set's runs, one per seed (none where ``synthetic_rows`` is 0)."""
        if not protocol.synthetic_rows:
            return []
        return [self.spec(protocol, SYNTHETIC, SYNTHETIC_METHOD, s) for s in protocol.seeds]

    def execute(self, protocol: Any, group: list[RunSpec]) -> list[RunResult]:
        from selfcal.studies.groups.execute import evaluate_synthetic
        from selfcal.studies.groups.sets import evaluate_set

        return [
            evaluate_synthetic(protocol, spec)
            if spec.method == SYNTHETIC_METHOD
            else set_result(evaluate_set, protocol, spec)
            for spec in group
        ]

    def sections(self, results: Any) -> list[str]:
        return self.part("report").sections(results)

    def summary(self, results: Any) -> list[str]:
        return self.part("report").summary(results)

    def payload(self, results: Any) -> Any:
        return self.part("report").payload(results)

    def figures(self, results: Any) -> Any:
        return self.part("figures").figures(results)
