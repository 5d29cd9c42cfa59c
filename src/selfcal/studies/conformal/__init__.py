"""``selfcal reproduce conformal``: conformal prediction sets on the benchmark's stored
predictions -- does post-hoc calibration (temperature scaling, structured matrix scaling), or
any of the papers' training methods, shrink split-conformal sets at a fixed coverage? Each
stored run's post-hoc step is fitted on its validation predictions; its test predictions are
halved at random many times (one half calibrates the conformal predictor, the other is
scored); paired intervals over seeds (:mod:`selfcal.studies.conformal.report`). Run
``selfcal reproduce benchmark --store results/benchmark.sqlite`` first: this study reads its
stored predictions instead of retraining. With ``--sets DIR`` it runs on the prediction sets in
DIR instead -- your own models' validation and test predictions, with each group's coverage
where the sets have groups (:mod:`selfcal.studies.conformal.sets_report`)."""

from __future__ import annotations

from selfcal.experiments.spec import RunSpec
from selfcal.experiments.study import Study, register_study
from selfcal.studies._sets import SetsStudy
from selfcal.studies.conformal.protocol import ConformalProtocol, ConformalSetsProtocol


@register_study
class Conformal(SetsStudy, Study[ConformalProtocol]):
    title = "Conformal prediction sets after calibration and calibrated training"
    sets_protocol = ConformalSetsProtocol
    sets_heading = "Conformal prediction sets after calibration, on prediction sets"
    version = 2  # 2: the marginal threshold compared in float64 (1 rounded it to float32,
    # so tied scores just above it -- saturated probabilities -- left sets empty)

    def source_specs(self, protocol: ConformalProtocol) -> list[RunSpec]:
        """The runs on the study's own sources (the sets protocol's: :func:`set_specs`)."""
        sklearn = [
            self.spec(protocol, d, f"sk:{m}", seed)
            for d in protocol.datasets
            for m in protocol.models
            for seed in protocol.seeds
        ]
        return sklearn + self.benchmark_specs(protocol)

    def benchmark_specs(self, protocol: ConformalProtocol) -> list[RunSpec]:
        """One spec per selected benchmark record of ``protocol.regimes`` (its method, dataset,
        seed and regime), naming the record by key."""
        if not protocol.benchmark:
            return []
        from selfcal.studies.posthoc.sources import stored_benchmark_records

        records = stored_benchmark_records(
            protocol.benchmark_store,
            protocol.benchmark_protocol,
            protocol.regimes,
            "the conformal study",
        )
        return [
            self.spec(
                protocol,
                r.spec.dataset,
                r.spec.method,
                r.spec.seed,
                regime=str(r.spec.hparams["regime"]),
                config={"record": r.key},
            )
            for r in records
        ]
