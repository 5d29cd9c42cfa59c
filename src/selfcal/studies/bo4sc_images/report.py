"""The BO4SC-on-images report: per dataset and regime, CE and BO4SC before and after temperature
scaling with paired intervals against CE and CE + TS, what BO4SC's weights did, and the
selected hyperparameters."""

from __future__ import annotations

from selfcal.experiments.report import (
    cell,
    compare,
    comparison_line,
    detectable_line,
    hyperparameter_section,
)
from selfcal.experiments.study import StudyResults
from selfcal.experiments.tables import columns
from selfcal.studies import _images
from selfcal.studies.bo4sc_images.protocol import LABELS, METHODS, MODELS, SELECTION

COLUMNS = columns(
    "error",
    "nll",
    "ece",
    "adaece",
    "classwise_ece",
    "brier",
    "temperature",
    "train_error",
)
AFTER_TS = {
    "nll": "nll_ts",
    "ece": "ece_ts",
    "adaece": "adaece_ts",
    "classwise_ece": "classwise_ece_ts",
    "brier": "brier_ts",
}
"""A method's row after temperature scaling reads these metrics instead (the error and the
fitted temperature are the same run's)."""
WEIGHTS = (
    ("mean weight", "weight_mean"),
    ("weight < 0.5 (share)", "weight_below_half"),
    ("mean weight, rows the final model gets right", "weight_mean_correct"),
    ("mean weight, rows it gets wrong (seeds with any)", "weight_mean_wrong"),
)


def table(results: StudyResults, dataset: str, regime: str) -> list[str]:
    """CE, CE + TS, BO4SC, BO4SC + TS: every column (%, NLL / Brier / T raw)."""
    lines = [
        "| method | " + " | ".join(n for n, _, _ in COLUMNS) + " |",
        "|---|" + "---|" * len(COLUMNS),
    ]
    for method in METHODS:
        for ts in (False, True):
            cells = [
                cell(results, dataset, method, AFTER_TS.get(m, m) if ts else m, regime, s)
                for _, m, s in COLUMNS
            ]
            label = LABELS[f"{method}-ts" if ts else method]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def verdicts(results: StudyResults, dataset: str, regime: str) -> list[str]:
    """Paired intervals (BO4SC − rival, per seed), ECE and error, before and after TS."""
    if not results.runs(dataset, "bo4sc", regime):
        return []
    pairs = (
        (("bo4sc", "ece"), ("ce", "ece"), "BO4SC", "CE", "ECE (points)"),
        (("bo4sc", "ece"), ("ce", "ece_ts"), "BO4SC", "CE + TS", "ECE (points)"),
        (("bo4sc", "ece_ts"), ("ce", "ece_ts"), "BO4SC + TS", "CE + TS", "ECE (points)"),
        (("bo4sc", "adaece"), ("ce", "adaece"), "BO4SC", "CE", "AdaECE (points)"),
        (("bo4sc", "nll"), ("ce", "nll"), "BO4SC", "CE", "NLL (×100)"),
        (("bo4sc", "error"), ("ce", "error"), "BO4SC", "CE", "error (points)"),
    )
    lines = [f"**{dataset}, {regime} regime.**", ""]
    for a, b, name_a, name_b, what in pairs:
        lines.append(comparison_line(compare(results, dataset, a, b, regime), name_a, name_b, what))
    lines += ["", detectable_line(results, dataset, "ce", ["bo4sc"], "ece", regime), ""]
    return lines


def weight_lines(results: StudyResults, dataset: str) -> list[str]:
    """What the selected BO4SC runs did to the weights, per regime (mean ± 95% CI)."""
    regimes = _images.regimes(results, dataset)
    lines = [
        "| weights at the end | " + " | ".join(regimes) + " |",
        "|---|" + "---|" * len(regimes),
    ]
    for label, metric in WEIGHTS:
        lines.append(
            f"| {label} | "
            + " | ".join(cell(results, dataset, "bo4sc", metric, r, 1.0, 3) for r in regimes)
            + " |"
        )
    return lines


def sections(results: StudyResults) -> list[str]:
    from selfcal.studies import bo4sc_images
    from selfcal.studies.bo4sc_images import execute

    texts = _images.study_texts(bo4sc_images, execute)
    parts = _images.intro(results, texts, SELECTION, "in % (NLL, Brier and T raw)", _images.__doc__)
    parts += _images.regime_sections(results, results.datasets, MODELS, table, verdicts)
    parts += [
        "## BO4SC's weights",
        "",
        "Selected runs, mean ± 95% CI over seeds; figures `fig3_weights_*` show every "
        "training row of the first seed (weight against its final cross-entropy, coloured "
        "by whether the final model classifies it correctly: [BO4SC] Fig. 3, right panel, "
        "on images).",
        "",
    ]
    for d in results.datasets:
        parts += [f"**{d}**", "", *weight_lines(results, d), ""]
    return parts + hyperparameter_section(results, list(METHODS), LABELS)


def summary(results: StudyResults) -> list[str]:
    caption = "%, mean ± 95% CI over seeds"
    return _images.regime_summary(results, results.datasets, caption, table, verdicts)
