"""``selfcal reproduce gra-toy``: [GRA]'s toy study (:mod:`selfcal.experiments.gra_toy`) over
seeds, stored like every other study, with the correlations beside the published ones.

One run per seed (a fresh draw of the class means, the data, the initialisation and the batch
order); the report gives the mean and 95% Student-t interval over seeds of the Pearson
correlation between the true calibration error and each uncertainty metric.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selfcal.experiments.spec import RunResult, RunSpec
from selfcal.experiments.store import ResultsStore
from selfcal.experiments.tables import aggregate, command_line, study_records

STUDY = "gra-toy"
METRICS = (("fl", "FL: 1 − p_y"), ("dfl", "DFL: 1 − p_y + p_j"), ("gbs", "gBS: ‖y − p‖²"))
PUBLISHED = {"fl": 0.550, "dfl": 0.638, "gbs": 0.664}
"""[GRA] §4.3: mean Pearson correlation over 5 runs."""


@dataclass(frozen=True)
class Protocol:
    name: str
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    notes: tuple[str, ...] = ()


FULL = Protocol("full", seeds=tuple(range(20)),
                notes=("20 seeds (the paper averages 5): the correlations vary a lot between "
                       "draws of the class means, and the interval shows it.",))
QUICK = Protocol("quick", seeds=(0,), notes=("--quick: one seed.",))
PROTOCOLS = {p.name: p for p in (FULL, QUICK)}


def specs(protocol: Protocol) -> list[RunSpec]:
    return [RunSpec(STUDY, "gaussians-5x2d", "mlp-2-10-5", seed, {"version": 1})
            for seed in protocol.seeds]


def execute(group: list[RunSpec]) -> list[RunResult]:
    from selfcal.experiments.gra_toy import run_gra_toy

    return [RunResult(metrics=run_gra_toy(spec.seed)) for spec in group]


def _aggregates(store: ResultsStore, protocol: Protocol):
    runs = study_records(store, STUDY, specs(protocol))
    return runs, {a.metric: a for a in aggregate(runs)}


def summary_lines(store: ResultsStore, protocol: Protocol) -> list[str]:
    runs, agg = _aggregates(store, protocol)
    lines = [f"Pearson correlation with the true calibration error c(x) = η_y − p_y "
             f"({len(runs)} seeds; mean ± 95% CI):", "",
             "| metric | ours (signed c) | ours (|c|) | published |", "|---|---|---|---|"]
    for key, label in METRICS:
        signed, absolute = agg.get(f"pearson_{key}"), agg.get(f"pearson_abs_{key}")
        lines.append(f"| {label} | {signed.format() if signed else '—'} | "
                     f"{absolute.format() if absolute else '—'} | {PUBLISHED[key]:.3f} |")
    acc = agg.get("test_accuracy")
    if acc is not None:
        lines += ["", f"Toy model test accuracy: {acc.format()}."]
    order = sorted((k for k, _ in METRICS if f"pearson_{k}" in agg),
                   key=lambda k: -agg[f"pearson_{k}"].mean)
    if order:
        holds = order == ["gbs", "dfl", "fl"]
        lines.append(f"Ranking by mean correlation: {' > '.join(order)} — the paper's ranking "
                     f"(gbs > dfl > fl) {'holds' if holds else 'does not hold'} here.")
    return lines


def write_report(store: ResultsStore, protocol: Protocol, out: Path, *, command: str,
                 seconds: float | None = None) -> Path:
    from selfcal.experiments import gra_toy

    out.mkdir(parents=True, exist_ok=True)
    text = ["# [GRA] toy study: uncertainty metrics vs the true calibration error", "",
            command_line(command, seconds, study_records(store, STUDY, specs(protocol))),
            f"Seeds {list(protocol.seeds)}.", *[f"> {n}" for n in protocol.notes], "",
            (gra_toy.__doc__ or "").strip(), "", *summary_lines(store, protocol)]
    path = out / "README.md"
    path.write_text("\n".join(text) + "\n")
    return path


def json_payload(store: ResultsStore, protocol: Protocol) -> dict[str, Any]:
    runs, agg = _aggregates(store, protocol)
    return {"runs": [{"seed": r.spec.seed, "metrics": r.metrics} for r in runs],
            "aggregates": [a.as_dict() for a in agg.values()], "published": PUBLISHED}
