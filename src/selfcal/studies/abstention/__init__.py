"""``selfcal reproduce abstention``: do the abstention promises hold? Each set's rows are
split once -- a third fits none / TS / SMS / ``auto``, the rest, calibrated by that fixed
map, is the population -- and 1,000 re-splits certify a threshold by each rule (the empirical
rule, conformal risk control, Learn-then-Test as selfcal does it and in MAPIE's regime) at
several target risks and failure probabilities; each threshold's risk is read exactly on the
population (and, beside it, on a held-out half, the issue's protocol). The report gives each
rule's violation rate with its Monte-Carlo interval, the coverage it keeps, and what
calibrating first buys (:mod:`selfcal.studies.abstention.report`). The full protocol runs a
synthetic set; with ``--sets DIR`` it runs on the prediction sets in DIR."""

from __future__ import annotations

from typing import Any

from selfcal.experiments.spec import RunResult, RunSpec
from selfcal.experiments.study import Study, register_study
from selfcal.studies._sets import SetsStudy, set_result
from selfcal.studies.abstention.protocol import AbstentionProtocol, AbstentionSetsProtocol

SYNTHETIC = "synthetic"
"""The dataset and method of the synthetic set's run."""


@register_study
class Abstention(SetsStudy, Study[AbstentionProtocol]):
    title = "Abstention with a guarantee: do the promises hold, and what do they cost?"
    sets_protocol = AbstentionSetsProtocol
    sets_heading = (
        "Abstention with a guarantee on prediction sets: do the promises hold, and what do "
        "they cost?"
    )
    version = 1

    def source_specs(self, protocol: AbstentionProtocol) -> list[RunSpec]:
        """The synthetic set's run, once per seed (none where ``synthetic_rows`` is 0)."""
        if not protocol.synthetic_rows:
            return []
        return [self.spec(protocol, SYNTHETIC, SYNTHETIC, s) for s in protocol.seeds]

    def execute(self, protocol: Any, group: list[RunSpec]) -> list[RunResult]:
        from selfcal.studies.abstention.execute import evaluate_synthetic
        from selfcal.studies.abstention.sets import evaluate_set

        return [
            evaluate_synthetic(protocol, spec.seed)
            if spec.method == SYNTHETIC
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
        return {}
