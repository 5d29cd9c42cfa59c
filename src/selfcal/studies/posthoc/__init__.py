"""``selfcal reproduce posthoc``: the post-hoc leaderboard -- every registered calibrator on
many real prediction sets (the validation / test logits the benchmark's networks stored, and
scikit-learn models on the tabular sets), with CalArena-style win rates against temperature
scaling and paired intervals per task type (:mod:`selfcal.studies.posthoc.report`). Run
``selfcal reproduce benchmark --store results/benchmark.sqlite`` first: this study reads its
stored predictions instead of retraining. With ``--sets DIR`` it runs on the prediction sets
in DIR instead -- your own models' validation and test predictions
(:mod:`selfcal.studies.posthoc.sets_report`)."""

from __future__ import annotations

from selfcal.experiments.spec import RunSpec
from selfcal.experiments.study import Study, register_study
from selfcal.studies._sets import SetsStudy
from selfcal.studies.posthoc.protocol import PosthocProtocol, PosthocSetsProtocol

BENCHMARK_REGIMES = ("memorise", "early-stop")
"""The benchmark regimes whose records are prediction sets here: the last iterate and the
lowest-validation-NLL checkpoint. The ``refine-stop`` checkpoint is often the early-stop one
(the same predictions), which would count those sets twice."""


@register_study
class Posthoc(SetsStudy, Study[PosthocProtocol]):
    title = (
        "Post-hoc leaderboard: every calibrator on the benchmark's and scikit-learn's predictions"
    )
    sets_protocol = PosthocSetsProtocol
    sets_heading = (
        "Post-hoc leaderboard on prediction sets: every calibrator, fitted on validation and "
        "judged on test"
    )
    version = 3  # 2: exact zero probabilities read through the fitted floor (prob_floor_);
    # 3: auto's default order puts structured matrix scaling first

    def source_specs(self, protocol: PosthocProtocol) -> list[RunSpec]:
        """The runs on the study's own sources (the sets protocol's: :func:`set_specs`)."""
        sklearn = [
            self.spec(protocol, d, m, seed)
            for d in protocol.datasets
            for m in protocol.models
            for seed in protocol.seeds
        ]
        return sklearn + self.benchmark_specs(protocol)

    def benchmark_specs(self, protocol: PosthocProtocol) -> list[RunSpec]:
        """One spec per selected benchmark record of the :data:`BENCHMARK_REGIMES` (method =
        ``nn:<the benchmark's method>``, its regime), naming the record by key."""
        if not protocol.benchmark:
            return []
        from selfcal.studies.posthoc.sources import stored_benchmark_records

        records = stored_benchmark_records(
            protocol.benchmark_store,
            protocol.benchmark_protocol,
            BENCHMARK_REGIMES,
            "the post-hoc leaderboard",
        )
        return [
            self.spec(
                protocol,
                r.spec.dataset,
                f"nn:{r.spec.method}",
                r.spec.seed,
                regime=str(r.spec.hparams["regime"]),
                config={"record": r.key},
            )
            for r in records
        ]
