"""Derive the benchmark's reused hyperparameters (:data:`.protocol.REUSED`)
from the paper studies' stores: for each (dataset, method), the candidate with the lowest
validation ECE averaged over the study's seeds in its ``long`` regime. Test metrics are never
read. Usage (the stores of ``selfcal reproduce meta-reg / bsce-gra / bo4sc-images``)::

    python -m selfcal.studies.benchmark.reuse results/meta-reg.sqlite \\
        results/bsce-gra.sqlite results/bo4sc-images.sqlite
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

NAMES = {"ls": "label-smoothing", "flg-sece": "flγ-sece"}
"""Method names of the paper studies that the benchmark spells differently."""
SOURCES = {
    "meta-reg": ("focal", "ls", "mmce", "ce-dece", "flg-sece"),
    "bsce-gra": ("dfl", "bsce", "bsce-gra"),
    "bo4sc-images": ("bo4sc",),
}
"""Which study each method's values come from (MMCE: meta-reg, which trains on the same
reduced training set as the benchmark)."""


def pooled_choices(
    study_name: str, path: str, regime: str = "long"
) -> dict[tuple[str, str], dict[str, Any]]:
    """``{(dataset, method): candidate}`` of one study's store (its full protocol)."""
    from selfcal.experiments.store import ResultsStore
    from selfcal.experiments.study import get_study
    from selfcal.studies import import_all

    import_all()  # the source study may not be imported yet (a worker process)
    study = get_study(study_name)
    keys = {spec.key for spec in study.specs(study.protocol("full"))}
    scores: dict[tuple[str, str, tuple], list[float]] = defaultdict(list)
    for record in ResultsStore(path).runs(study=study_name):
        method = record.spec.method
        if (
            record.key in keys
            and record.spec.hparams.get("regime") == regime
            and method in SOURCES[study_name]
        ):
            config = tuple(
                sorted((k[3:], v) for k, v in record.spec.hparams.items() if k.startswith("hp."))
            )
            scores[(record.spec.dataset, method, config)].append(record.metrics["val_ece"])
    best: dict[tuple[str, str], tuple[float, tuple]] = {}
    for (dataset, method, config), values in sorted(scores.items()):
        mean = sum(values) / len(values)
        key = (dataset, NAMES.get(method, method))
        if key not in best or mean < best[key][0]:
            best[key] = (mean, config)
    return {key: dict(config) for key, (_, config) in best.items()}


def main(paths: Sequence[str]) -> None:
    choices: dict[tuple[str, str], dict[str, Any]] = {}
    for path in paths:
        name = next(n for n in SOURCES if path.rstrip("/").endswith(f"{n}.sqlite"))
        choices.update(pooled_choices(name, path))
    for (dataset, method), config in sorted(choices.items()):
        print(f"{dataset:15s} {method:16s} {config}")


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
