"""The benchmark's figures, per dataset and regime: ECE against test error for every method with
95% CI bars over seeds (raw and after temperature scaling), and a grid of reliability diagrams
(one column per method, raw and after TS; the selected runs' bins pooled over seeds)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from selfcal.experiments.study import StudyResults
from selfcal.plots.save import method_colours, new_figure
from selfcal.studies.benchmark.protocol import LABELS
from selfcal.studies.benchmark.report import entries, regime_names

PANELS = (("raw", "ece", "bins_raw"), ("after TS", "ece_ts", "bins_ts"))


def figures(results: StudyResults) -> dict[str, Any]:
    out = {}
    for d in results.datasets:
        for regime in regime_names(results):
            out[f"ece_vs_error_{d}_{regime}.png"] = ece_vs_error(results, d, regime)
            out[f"reliability_{d}_{regime}.png"] = reliability_grid(results, d, regime)
    return out


def ece_vs_error(results: StudyResults, dataset: str, regime: str) -> Any:
    methods = [e.method for e in entries(results, dataset, regime)]
    if not methods:
        return None
    fig = new_figure((11.0, 4.6))
    axes = fig.subplots(1, len(PANELS), sharey=True)
    colours = dict(zip(results.protocol.methods, method_colours(len(results.protocol.methods))))
    for ax, (title, metric, _) in zip(axes, PANELS):
        for m in methods:
            err, ece = (
                results.get(dataset, m, "error", regime),
                results.get(dataset, m, metric, regime),
            )
            if err is None or ece is None:  # an entry has both (entries() reads them)
                continue
            ax.errorbar(
                100 * err.mean,
                100 * ece.mean,
                xerr=100 * half_width(err),
                yerr=100 * half_width(ece),
                fmt="o",
                ms=4,
                capsize=2,
                color=colours[m],
                label=LABELS[m],
            )
        ax.set(
            xlabel="test error (%)", ylabel="test ECE (%)", title=f"{dataset}, {regime}: {title}"
        )
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize="x-small", ncol=2, loc="best")
    return fig


def half_width(agg: Any) -> float:
    """The 95% CI's half-width (0 for a single seed)."""
    return 0.0 if np.isnan(agg.high) else agg.high - agg.mean


def reliability_grid(results: StudyResults, dataset: str, regime: str) -> Any:
    from selfcal.metrics import uniform_edges
    from selfcal.metrics.binning import BinStats
    from selfcal.plots import ReliabilityDiagramDisplay

    methods = [e.method for e in entries(results, dataset, regime)]
    if not methods:
        return None
    fig = new_figure((2.3 * len(methods), 5.4))
    axes = np.asarray(fig.subplots(len(PANELS), len(methods), squeeze=False))
    for col, m in enumerate(methods):
        runs = results.runs(dataset, m, regime)
        for row, (title, _, artefact) in enumerate(PANELS):
            sums = torch.from_numpy(sum(results.artefact(r, artefact) for r in runs))
            stats = BinStats(uniform_edges(sums.shape[1]).double(), *sums)
            ax = axes[row, col]
            ReliabilityDiagramDisplay.from_bins(stats, ax=ax, title=f"{LABELS[m]}, {title}")
            ax.title.set_fontsize("x-small")
            ax.xaxis.label.set_fontsize("x-small")
            ax.yaxis.label.set_fontsize("x-small")
            ax.tick_params(labelsize="xx-small")
            if ax.get_legend() is not None:
                ax.get_legend().remove()
    return fig
