"""A study's report folder: ``README.md`` (the engine's header, the study's sections, the failed
runs, the figures), the figures as PNG, and ``provenance.json`` -- the study, protocol,
fingerprint and study version the numbers come from, the command that made them and the code
revisions they ran at.

:func:`check_provenance` compares a committed report with the code: a report whose fingerprint
or study version differs from what the code would run now is stale, and its regeneration
command is in the error. The test suite runs it over ``results/``, so stale results cannot land.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from selfcal._folders import whole_folder
from selfcal._markdown import markdown_names, markdown_text
from selfcal.exceptions import StaleResults
from selfcal.experiments.figure_cache import figures_key, kept_figures, remember_figures
from selfcal.experiments.selection import hyperparameters, regime
from selfcal.experiments.study import Study, StudyResults, get_study
from selfcal.experiments.tables import (
    Difference,
    by_seed,
    command_line,
    detectable_difference,
    paired,
    paired_ranks,
)

PROVENANCE = "provenance.json"
README = "README.md"
FIGURE_DPI = 100


@dataclass(frozen=True)
class Provenance:
    """What a report folder was made from (``provenance.json``)."""

    study: str
    protocol: str
    fingerprint: str
    study_version: int
    command: str
    runs: int
    git_commits: tuple[str, ...]
    worker_seconds: float
    wall_seconds: float | None

    @classmethod
    def of(cls, results: StudyResults, command: str, seconds: float | None) -> Provenance:
        commits = sorted({str(r.env.get("git_commit")) for r in results.records})
        return cls(
            results.study.name,
            results.protocol.name,
            results.study.fingerprint(results.protocol),
            results.study.version,
            command,
            len(results.records),
            tuple(commits),
            round(sum(r.seconds for r in results.records), 1),
            None if seconds is None else round(seconds, 1),
        )

    @classmethod
    def read(cls, folder: Path) -> Provenance:
        data = json.loads((Path(folder) / PROVENANCE).read_text())
        data["git_commits"] = tuple(data["git_commits"])
        return cls(**data)


def write_report(
    results: StudyResults, out: Path, *, command: str, seconds: float | None = None
) -> Path:
    """Write ``out/README.md``, the figures and ``out/provenance.json``, the folder replaced
    whole (:func:`selfcal._folders.whole_folder`: a kill leaves the old report or the new one);
    return the README. Figures drawn from the same runs by the same code are kept, not
    redrawn (:mod:`selfcal.experiments.figure_cache`)."""
    out = Path(out)
    study = results.study
    key = figures_key(results, FIGURE_DPI)
    with whole_folder(out) as scratch:
        written = kept_figures(out, key)
        if written is not None:
            for name in written:
                shutil.copy2(out / name, scratch / name)
        else:  # something they are drawn from changed: draw them
            written = []
            for name, figure in study.figures(results).items():
                if figure is not None:
                    figure.savefig(scratch / name, dpi=FIGURE_DPI)
                    written.append(name)
        remember_figures(scratch, key, written)
        parts = [
            *header(results, command, seconds),
            *study.sections(results),
            *failure_lines(results),
        ]
        if written:
            parts += ["## Figures", "", *[f"![{name}]({name})" for name in written], ""]
        text = "\n".join(parts).rstrip("\n") + "\n"
        (scratch / README).write_text(text, encoding="utf-8")
        provenance = Provenance.of(results, command, seconds)
        (scratch / PROVENANCE).write_text(json.dumps(asdict(provenance), indent=2) + "\n")
    return out / README


def header(results: StudyResults, command: str, seconds: float | None) -> list[str]:
    """Title, provenance line, protocol, environment and the protocol's notes."""
    study, protocol = results.study, results.protocol
    env = results.records[0].env if results.records else {}
    commits = sorted({str(r.env.get("git_commit")) for r in results.records})
    return [
        f"# {study.heading(results.protocol)}",
        "",
        command_line(command, seconds, results.records),
        f"Protocol `{protocol.name}` (fingerprint `{study.fingerprint(protocol)}`, study "
        f"version {study.version}), seeds {list(protocol.seeds)}, datasets "
        f"{markdown_names(results.datasets)}, {protocol.threads} thread(s) per run.",
        f"Environment: selfcal {env.get('selfcal')}, torch {env.get('torch')}, python "
        f"{env.get('python')}, {env.get('device')}; git {', '.join(commits) or '—'}.",
        *[f"> {note}" for note in protocol.notes],
        "",
    ]


def failure_lines(results: StudyResults) -> list[str]:
    if not results.failures:
        return []
    return [
        f"## Failed runs ({len(results.failures)}; not in any table)",
        "",
        *[
            f"- {markdown_text(r.spec.dataset)} / {r.spec.method} {_regime_tag(r)}/ seed "
            f"{r.spec.seed} {_hp_text(hyperparameters(r))}: {markdown_text(r.reason)}"
            for r in results.failures
        ],
        "",
    ]


def _regime_tag(record: Any) -> str:
    name = regime(record)
    return f"({name}) " if name else ""


def json_payload(results: StudyResults) -> dict[str, Any]:
    """Every run (each candidate, flagged when selected), the aggregates of the selected
    runs, the failures, and the study's own additions."""
    chosen = {r.key for r in results.selected}
    study = results.study
    return {
        "study": study.name,
        "protocol": results.protocol.name,
        "fingerprint": study.fingerprint(results.protocol),
        "study_version": study.version,
        "threads": results.protocol.threads,
        "runs": [
            {
                "dataset": r.spec.dataset,
                "method": r.spec.method,
                "regime": regime(r),
                "seed": r.spec.seed,
                "hp": hyperparameters(r),
                "selected": r.key in chosen,
                "metrics": r.metrics,
                "seconds": r.seconds,
            }
            for r in results.records
        ],
        "aggregates": [a.as_dict() for a in results.aggregates.values()],
        "failures": [
            {
                "dataset": r.spec.dataset,
                "method": r.spec.method,
                "regime": regime(r),
                "seed": r.spec.seed,
                "hp": hyperparameters(r),
                "reason": r.reason,
            }
            for r in results.failures
        ],
        **study.payload(results),
    }


# ----------------------------------------------------------------------------- staleness
def check_provenance(folder: Path) -> Provenance:
    """The folder's provenance when it matches the code; :class:`StaleResults` otherwise. The
    study must be registered (its package imported: :func:`selfcal.studies.import_all`)."""
    folder = Path(folder)
    if not (folder / PROVENANCE).is_file():
        raise StaleResults(
            f"{folder} has no {PROVENANCE}: it was not written by the study engine; regenerate it"
        )
    made = Provenance.read(folder)
    study = get_study(made.study)
    problems = []
    if made.study_version != study.version:
        problems.append(f"study version {made.study_version}, code {study.version}")
    protocol = study.protocols.get(made.protocol)
    if protocol is None:
        problems.append(f"protocol {made.protocol!r} no longer exists")
    elif made.fingerprint != study.fingerprint(protocol):
        problems.append(f"fingerprint {made.fingerprint}, code {study.fingerprint(protocol)}")
    if problems:
        raise StaleResults(
            f"{folder} is stale ({'; '.join(problems)}); regenerate it with `{made.command}`"
        )
    return made


def reproduce_command(
    study: Study,
    protocol: str,
    store: str | None,
    out: str | None,
    sets: str | None = None,
    kind: str | None = None,
) -> str:
    """The ``selfcal reproduce`` command line a report names (defaults left out; ``sets``:
    the folder of prediction sets, which names the protocol that reads them, and ``kind``
    how their scores are read)."""
    words = [f"selfcal reproduce {study.name}"]
    if sets is not None:  # names the protocol: no --protocol after it
        words.append(f"--sets {sets}")
        if kind is not None:
            words.append(f"--kind {kind}")
    elif protocol == "quick":
        words.append("--quick")
    elif protocol != study.default_protocol:
        words.append(f"--protocol {protocol}")
    if store is not None:
        words.append(f"--store {store}")
    if out is not None:
        words.append(f"--out {out}")
    return " ".join(words)


# ----------------------------------------------------------------------------- verdicts
def values(
    results: StudyResults, dataset: str, method: str, metric: str, regime_name: str = ""
) -> dict[int, float]:
    """``{seed: metric}`` of the selected runs of one method."""
    return by_seed(results.runs(dataset, method, regime_name), metric)


def compare(
    results: StudyResults,
    dataset: str,
    a: tuple[str, str],
    b: tuple[str, str],
    regime_name: str = "",
) -> Difference | None:
    """Paired difference over seeds of ``(method, metric)`` ``a`` minus ``b``."""
    return paired(
        values(results, dataset, *a, regime_name), values(results, dataset, *b, regime_name)
    )


WORDS = {
    "better": "significantly lower",
    "worse": "significantly higher",
    "tied": "tied (the interval contains 0)",
}


def comparison_line(
    diff: Difference | None,
    a: str,
    b: str,
    what: str,
    scale: float = 100.0,
    lower_is_better: bool = True,
) -> str:
    """``- a − b, what: +0.12 [−0.3, +0.5] → tied (...)`` (scaled, e.g. to points)."""
    if diff is None:
        return f"- {a} − {b}, {what}: no common seeds."
    verdict = diff.verdict(lower_is_better)
    words = (
        WORDS[verdict]
        if lower_is_better
        else {
            "better": "significantly higher",
            "worse": "significantly lower",
            "tied": WORDS["tied"],
        }[verdict]
    )
    return (
        f"- {a} − {b}, {what}: {diff.format(scale, 2)} → {a} {words}"
        if verdict != "tied"
        else f"- {a} − {b}, {what}: {diff.format(scale, 2)} → {words}"
    )


def ranks(
    results: StudyResults,
    dataset: str,
    methods: Sequence[str],
    metric: str,
    regime_name: str = "",
    lower_is_better: bool = True,
) -> dict[str, int]:
    """Ranks from paired intervals (:func:`selfcal.experiments.tables.paired_ranks`) among
    the methods that have runs."""
    table = {m: values(results, dataset, m, metric, regime_name) for m in methods}
    return paired_ranks({m: v for m, v in table.items() if v}, lower_is_better)


def detectable(
    results: StudyResults,
    dataset: str,
    reference: str,
    methods: Sequence[str],
    metric: str,
    regime_name: str = "",
) -> tuple[float, float, int] | None:
    """``(difference, sd, seeds)``: the smallest difference of ``metric`` against
    ``reference`` the protocol detects (80% power, 95% paired interval), from the median
    standard deviation ``sd`` of the per-seed differences over ``methods``."""
    import numpy as np

    sds, n = [], 0
    for method in methods:
        diff = compare(results, dataset, (method, metric), (reference, metric), regime_name)
        if diff is not None and method != reference and math.isfinite(diff.sd):
            sds.append(diff.sd)
            n = max(n, diff.n)
    if not sds:
        return None
    sd = float(np.median(sds))
    return detectable_difference(sd, n), sd, n


def detectable_line(*where: Any, scale: float = 100.0, unit: str = "points") -> str:
    """:func:`detectable` of ``where`` (its arguments: results, dataset, reference, methods,
    metric[, regime]) in words; an empty string when nothing was compared."""
    found = detectable(*where)
    if found is None:
        return ""
    reference, metric = where[2], where[4]
    mde, sd, n = found
    return (
        f"Power: with {n} seeds and the median spread of the paired differences against "
        f"{reference} ({scale * sd:.2f} {unit}), a true difference of {scale * mde:.2f} "
        f"{unit} in {metric} is detected with 80% probability; smaller ones may be "
        "reported as ties."
    )


# ----------------------------------------------------------------------------- helpers
def prose(text: str | None) -> list[str]:
    """A docstring as Markdown paragraphs: lines joined, reST literals and roles
    (````x````, ``:mod:`x```) turned into code spans, list items kept on their own lines."""
    import re

    out = []
    for block in (text or "").strip().split("\n\n"):
        lines = [line.strip() for line in block.splitlines()]
        merged: list[str] = []
        for line in lines:
            if merged and not line.startswith(("* ", "- ")):
                merged[-1] += " " + line
            else:
                merged.append(line)
        for line in merged:
            line = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", line)
            out.append(re.sub(r"``([^`]+)``", r"`\1`", line))
        out.append("")
    return out


def hyperparameter_table(
    results: StudyResults,
    methods: Sequence[str] | None = None,
    labels: dict[str, str] | None = None,
) -> list[str]:
    """Markdown: the hyperparameters selected on validation, per dataset, regime, method and
    seed (methods with nothing selected are left out)."""
    labels = labels or {}
    seeds = list(results.protocol.seeds)
    lines = [
        "| dataset | regime | method | " + " | ".join(f"seed {s}" for s in seeds) + " |",
        "|---|---|---|" + "---|" * len(seeds),
    ]
    rows = 0
    for dataset in results.datasets:
        for regime_name in results.regimes:
            for method in methods or dict.fromkeys(r.spec.method for r in results.selected):
                runs = {r.spec.seed: r for r in results.runs(dataset, method, regime_name)}
                chosen = {s: hyperparameters(r) for s, r in runs.items()}
                if not any(chosen.values()):
                    continue
                cells = [_hp_text(chosen[s]) if s in chosen else "—" for s in seeds]
                lines.append(
                    f"| {dataset} | {regime_name or '—'} | "
                    f"{labels.get(method, method)} | " + " | ".join(cells) + " |"
                )
                rows += 1
    return lines if rows else []


HYPERPARAMETERS_HEADING = "## Hyperparameters selected on validation"


def hyperparameter_section(
    results: StudyResults,
    methods: Sequence[str] | None,
    labels: dict[str, str] | None,
    *notes: str,
) -> list[str]:
    """The reports' hyperparameter section: its heading, each of ``notes`` as a paragraph,
    and :func:`hyperparameter_table` of ``methods`` (named by ``labels``)."""
    lines = [HYPERPARAMETERS_HEADING, ""]
    for note in notes:
        lines += [note, ""]
    return [*lines, *hyperparameter_table(results, methods, labels), ""]


def _hp_text(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_short(v)}" for k, v in values.items())


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{int(value)}" if value.is_integer() and abs(value) >= 1 else f"{value:g}"
    return str(value)


def cell(
    results: StudyResults,
    dataset: str,
    method: str,
    metric: str,
    regime_name: str = "",
    scale: float = 100.0,
    digits: int = 2,
) -> str:
    """``mean ± CI half-width`` of a selected method's metric, scaled (``—`` when absent)."""
    agg = results.get(dataset, method, metric, regime_name)
    return "—" if agg is None else agg.format(scale, digits)
