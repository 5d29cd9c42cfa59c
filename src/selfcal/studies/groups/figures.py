"""The groups study's figure: per family, each method's worst group ECE and mean group ECE
(means over the sets and re-splits), each beside what a perfectly calibrated model shows at
those sizes (the open marker)."""

from __future__ import annotations

import math
from typing import Any

from selfcal.experiments.study import StudyResults
from selfcal.plots.save import new_figure
from selfcal.studies.groups.data import FAMILY_TITLES
from selfcal.studies.groups.report import families, label, level, methods_with

FIGURE = "group_ece.png"
PANELS = (
    ("worst_ece", "worst_null", "worst group ECE"),
    ("mean_ece", "mean_null", "mean group ECE"),
)


def figures(results: StudyResults) -> dict[str, Any]:
    return {FIGURE: group_ece(results)}


def group_ece(results: StudyResults) -> Any:
    found = families(results)
    if not found:
        return None
    fig = new_figure((3.4 * len(found), 2.0 + 0.25 * len(results.protocol.methods)))
    axes = fig.subplots(1, len(found), squeeze=False)[0]
    for ax, (family, sets) in zip(axes, found):
        methods = methods_with(sets, results.protocol.methods)
        for j, (metric, null, text) in enumerate(PANELS):
            for i, m in enumerate(methods):
                y = i + (j - 0.5) * 0.3
                value, yardstick = level(sets, metric, m), level(sets, metric, m, null=null)
                if math.isnan(value):
                    continue
                ax.plot([value], [y], "o", color=f"C{j}", ms=4, label=text if i == 0 else None)
                ax.plot([yardstick], [y], "o", mfc="none", color=f"C{j}", ms=4)
        ax.set_yticks(range(len(methods)), [label(m) for m in methods])
        ax.invert_yaxis()
        ax.set_title(FAMILY_TITLES[family].split(":")[0], fontsize=9)
        ax.set_xlabel("ECE (open: calibrated at these sizes)", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[-1].legend(fontsize=7)
    fig.suptitle("Group calibration error per method", fontsize=10)
    return fig
