"""The meta-regularization report: the Table 1 / Table 2 analogues in each regime, the paper's
claims judged from paired intervals, every seed's γ trajectory, the selected hyperparameters,
and the published CIFAR numbers when CIFAR rows ran."""

from __future__ import annotations

from selfcal.experiments.report import (
    cell,
    compare,
    comparison_line,
    detectable_line,
    hyperparameter_section,
    values,
)
from selfcal.experiments.store import RunRecord
from selfcal.experiments.study import StudyResults
from selfcal.experiments.tables import columns, paired, paired_ranks
from selfcal.studies import _images
from selfcal.studies._images import regimes
from selfcal.studies.meta_reg import published
from selfcal.studies.meta_reg.protocol import (
    BIN_COUNTS,
    GAMMA_NETS,
    LABELS,
    MODELS,
    SELECTION,
)

COLUMNS = columns(
    "error",
    "nll",
    "ece",
    "ece_ts",
    "mce",
    "adaece",
    "classwise_ece",
    "temperature",
    ece_ts="ECE (TS)",
    adaece="ACE",
)
ERROR_TOLERANCE = 0.01
"""'Comparable error': FLγ-SECE's error not significantly above CE's, or above it by at most
one point on average (the paper's Table 1 has it 0.6 points above CE on CIFAR-10)."""
PUBLISHED_LABELS = LABELS | {
    "focal-1": "Focal γ=1",
    "ls-0.05": "LS-0.05",
    "ls-0.1": "LS-0.1",
    "mixup-1": "Mixup α=1",
}
"""Names of the rows of [MetaReg] Tables 1-2: our methods' labels, and the paper's
hyperparameter variants."""


def methods(results: StudyResults) -> list[str]:
    return list(results.protocol.methods)


def ece_by_seed(results: StudyResults, dataset: str, regime: str) -> dict[str, dict[int, float]]:
    """``{row: {seed: ECE}}`` with CE after temperature scaling as its own row (``ce-ts``)."""
    rows = {m: values(results, dataset, m, "ece", regime) for m in methods(results)}
    if "ce" in rows:
        rows["ce-ts"] = values(results, dataset, "ce", "ece_ts", regime)
    return {m: v for m, v in rows.items() if v}


def table1(results: StudyResults, dataset: str, regime: str) -> list[str]:
    """Every Table 1 column (%, NLL raw) with the post-TS ECE and T, and the ECE rank."""
    rank = paired_ranks(ece_by_seed(results, dataset, regime))
    lines = [
        "| method | " + " | ".join(n for n, _, _ in COLUMNS) + " | rank (ECE) |",
        "|---|" + "---|" * (len(COLUMNS) + 1),
    ]
    rows = [(m, m) for m in methods(results)]
    if "ce" in methods(results):
        rows.insert(1, ("ce", "ce-ts"))
    for method, row in rows:
        cells = []
        for _, metric, scale in COLUMNS:
            if row == "ce-ts":
                metric = {
                    "ece": "ece_ts",
                    "mce": "mce_ts",
                    "adaece": "adaece_ts",
                    "classwise_ece": "classwise_ece_ts",
                    "nll": "nll_ts",
                    "ece_ts": "",
                    "temperature": "",
                }.get(metric, metric)
            cells.append(cell(results, dataset, method, metric, regime, scale) if metric else "—")
        lines.append(f"| {LABELS[row]} | " + " | ".join(cells) + f" | {rank.get(row, '—')} |")
    return lines


def verdict_lines(results: StudyResults, dataset: str, regime: str) -> list[str]:
    if not results.runs(dataset, "flg-sece", regime):
        return []
    by_seed = ece_by_seed(results, dataset, regime)
    rank = paired_ranks(by_seed)
    error = compare(results, dataset, ("flg-sece", "error"), ("ce", "error"), regime)
    comparable = error is not None and (error.verdict() != "worse" or error.mean <= ERROR_TOLERANCE)
    holds = rank.get("flg-sece") == 1 and comparable and _better(by_seed, "flg-sece", "ce-ts")
    out = [
        f"**{dataset}, {regime} regime.** FLγ-SECE's ECE ranks {rank.get('flg-sece')} of "
        f"{len(rank)} rows (CE after temperature scaling included; 1 = no row significantly "
        f"lower). The paper's claim (FLγ-SECE the lowest ECE, below CE (TS), at an error "
        f"comparable to CE's) {'holds' if holds else 'does not hold'} here.",
        "",
    ]
    for other, metric in (("ce", "ece"), ("ce", "ece_ts"), ("focal", "ece"), ("flsd53", "ece")):
        if other in methods(results):
            out.append(
                comparison_line(
                    compare(results, dataset, ("flg-sece", "ece"), (other, metric), regime),
                    "FLγ-SECE",
                    LABELS["ce-ts"] if metric == "ece_ts" else LABELS[other],
                    "ECE (points)",
                )
            )
    out.append(comparison_line(error, "FLγ-SECE", "CE", "error (points)"))
    for a, b in (("flg-sece", "flg"), ("flg-sece", "flg-dece"), ("ce-sece", "ce-dece")):
        if a in methods(results) and b in methods(results):
            for metric, what in (("ece", "ECE"), ("error", "error")):
                out.append(
                    comparison_line(
                        compare(results, dataset, (a, metric), (b, metric), regime),
                        LABELS[a],
                        LABELS[b],
                        f"{what} (points)",
                    )
                )
    spread = {m: bin_spread(results, dataset, m, regime) for m in ("flg-sece", "flg-dece")}
    if all(spread.values()):
        out.append(
            comparison_line(
                paired(spread["flg-sece"], spread["flg-dece"]),
                "FLγ-SECE",
                "FLγ-DECE",
                f"ECE spread (max − min) over {list(BIN_COUNTS)} bins (points)",
            )
        )
    return out + ["", detectable_line(results, dataset, "ce", methods(results), "ece", regime), ""]


def _better(by_seed: dict[str, dict[int, float]], a: str, b: str) -> bool:
    diff = paired(by_seed.get(a, {}), by_seed.get(b, {}))
    return diff is not None and diff.verdict() == "better"


def bin_spread(results: StudyResults, dataset: str, method: str, regime: str) -> dict[int, float]:
    """``{seed: max - min of ECE over the Fig. 5 bin counts}``."""
    out = {}
    for run in results.runs(dataset, method, regime):
        ece = [run.metrics[f"ece_{b}_bins"] for b in BIN_COUNTS]
        out[run.spec.seed] = max(ece) - min(ece)
    return out


def gamma_lines(results: StudyResults, dataset: str) -> list[str]:
    """Every seed's γ on the test set at the evaluated checkpoint's end of training: mean ±
    std over test samples, with its meta learning rate."""
    seeds = list(results.protocol.seeds)
    lines = [
        "| regime | method | " + " | ".join(f"seed {s}" for s in seeds) + " |",
        "|---|---|" + "---|" * len(seeds),
    ]
    for regime in regimes(results, dataset):
        for method in (m for m in GAMMA_NETS if m in methods(results)):
            runs = {r.spec.seed: r for r in results.runs(dataset, method, regime)}
            cells = []
            for seed in seeds:
                run = runs.get(seed)
                if run is None or "curve_test_gamma_mean" not in run.artefacts:
                    cells.append("—")
                    continue
                mean = results.artefact(run, "curve_test_gamma_mean")[-1]
                std = results.artefact(run, "curve_test_gamma_std")[-1]
                cells.append(f"{mean:.2f} ± {std:.2f}{_lr(run)}")
            lines.append(f"| {regime} | {LABELS[method]} | " + " | ".join(cells) + " |")
    return lines


def _lr(run: RunRecord) -> str:
    """`` (lr 1e-4)``: the run's meta learning rate when it was tuned."""
    lr = run.spec.hparams.get("hp.meta_lr")
    return "" if lr is None else f" (lr {lr:g})"


def published_lines(dataset: str) -> list[str]:
    """[MetaReg] Table 1 and the Table 2 FLγ row for a CIFAR dataset (mean ± std)."""
    names = ("error", "nll", "ece", "mce", "adaece", "classwise_ece")
    lines = [
        "| method (published) | Error | NLL | ECE | MCE | ACE | CW-ECE |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in (*published.ROWS, "flg"):
        cells = {**published.TABLE1, **published.TABLE2}.get((dataset, row))
        if cells is not None:
            lines.append(
                f"| {PUBLISHED_LABELS[row]} | "
                + " | ".join(cells[n].replace("±", " ± ") for n in names)
                + " |"
            )
    return lines


def published_rows(dataset: str) -> list[str]:
    """The paper's numbers under a CIFAR dataset's tables (nothing elsewhere)."""
    if dataset not in _images.CIFAR:
        return []
    return [
        f"Published, [MetaReg] Tables 1-2 ({dataset}, ResNet-18, 5 seeds):",
        "",
        *published_lines(dataset),
        "",
    ]


def sections(results: StudyResults) -> list[str]:
    from selfcal.studies import meta_reg
    from selfcal.studies.meta_reg import execute

    texts = _images.study_texts(meta_reg, execute)
    parts = _images.intro(results, texts, SELECTION, "in % (NLL and T raw)", _images.__doc__)
    datasets = results.datasets
    parts += _images.regime_sections(
        results, datasets, MODELS, table1, verdict_lines, after=published_rows
    )
    parts += [
        "## γ-Net's γ on the test set, every seed",
        "",
        "Mean ± std over the test samples at the end of training (figures "
        "`fig3_*` follow it epoch by epoch), with the meta learning rate selected for "
        "the seed.",
        "",
    ]
    for d in datasets:
        parts += [f"**{d}**", "", *gamma_lines(results, d), ""]
    return parts + hyperparameter_section(results, methods(results), LABELS)


def summary(results: StudyResults) -> list[str]:
    caption = "%, mean ± 95% CI over seeds; NLL, T raw"
    return _images.regime_summary(results, results.datasets, caption, table1, verdict_lines)
