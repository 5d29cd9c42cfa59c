"""The benchmark's figures, per dataset and regime, each laid out for a page: ECE against test
error for every method with 95% CI bars over seeds (raw and after temperature scaling); a grid
of small reliability diagrams, one per method, raw and after TS on shared axes (the selected
runs' bins pooled over seeds); and, where the records were scored under shift, ECE and NLL
after TS and accuracy against severity, one column per corruption, one line per method."""

from __future__ import annotations

from typing import Any

import numpy as np

from selfcal.experiments.study import StudyResults
from selfcal.plots.save import method_colours, new_figure
from selfcal.studies.benchmark.protocol import LABELS
from selfcal.studies.benchmark.report import entries, regime_names
from selfcal.studies.benchmark.shift_report import key, shifts

PANELS = (("raw", "ece", "bins_raw"), ("after TS", "ece_ts", "bins_ts"))


def figures(results: StudyResults) -> dict[str, Any]:
    out = {}
    for d in results.datasets:
        for regime in regime_names(results):
            out[f"ece_vs_error_{d}_{regime}.png"] = ece_vs_error(results, d, regime)
            out[f"reliability_{d}_{regime}.png"] = reliability_grid(results, d, regime)
            if shifts(results, d):
                out[f"shift_{d}_{regime}.png"] = shift_figure(results, d, regime)
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


GRID_COLUMNS = 5
"""Small multiples per row: 13 methods fill three rows of a page-wide figure."""


def reliability_grid(results: StudyResults, dataset: str, regime: str) -> Any:
    """One small reliability diagram per method (accuracy against mean confidence of each
    non-empty equal-width bin, pooled over seeds), raw and after TS, shared axes, one legend."""
    methods = [e.method for e in entries(results, dataset, regime)]
    if not methods:
        return None
    rows = -(-len(methods) // GRID_COLUMNS)
    fig = new_figure((10.0, 2.1 * rows + 0.6))
    axes = np.asarray(
        fig.subplots(rows, GRID_COLUMNS, sharex=True, sharey=True, squeeze=False)
    ).ravel()
    for ax, m in zip(axes, methods):
        runs = results.runs(dataset, m, regime)
        ax.plot([0, 1], [0, 1], color="0.6", lw=0.8, ls=":")
        for (label, _, artefact), style in zip(PANELS, ({"color": "0.55"}, {"color": "C3"})):
            pooled: np.ndarray = np.sum([results.artefact(r, artefact) for r in runs], axis=0)
            count, confidence, correct = pooled
            used = count > 0
            ax.plot(
                confidence[used] / count[used],
                correct[used] / count[used],
                marker="o",
                ms=2.5,
                lw=1.0,
                label=label,
                **style,
            )
        ax.set_title(LABELS[m], fontsize="small")
        ax.set(xlim=(0, 1), ylim=(0, 1))
        ax.tick_params(labelsize="x-small")
        ax.grid(alpha=0.2)
    for ax in axes[len(methods) :]:
        ax.set_axis_off()
    fig.supxlabel("confidence (bin mean)", fontsize="small")
    fig.supylabel("accuracy", fontsize="small")
    fig.suptitle(f"{dataset}, {regime}: reliability, raw and after TS", fontsize="medium")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower right", fontsize="small", frameon=False)
    return fig


SHIFT_ROWS = (("ECE after TS (%)", "ece_ts", 100.0), ("NLL after TS", "nll_ts", 1.0),
              ("accuracy (%)", "accuracy", 100.0))  # fmt: skip


def shift_figure(results: StudyResults, dataset: str, regime: str) -> Any:
    """ECE and NLL after TS and accuracy (rows) against severity (0: the clean test set) per
    corruption (columns); one line per method (CE black and thicker), means over seeds."""
    methods = [e.method for e in entries(results, dataset, regime)]
    corruptions = list(dict.fromkeys(c for c, _ in shifts(results, dataset)))
    if not methods or not corruptions:
        return None
    fig = new_figure((2.6 * len(corruptions) + 1.8, 7.0))
    axes = np.asarray(
        fig.subplots(len(SHIFT_ROWS), len(corruptions), sharex=True, sharey="row", squeeze=False)
    )
    colours = dict(zip(results.protocol.methods, method_colours(len(results.protocol.methods))))
    for col, corruption in enumerate(corruptions):
        severities = [0] + [s for c, s in shifts(results, dataset) if c == corruption]
        for row, (label, metric, scale) in enumerate(SHIFT_ROWS):
            ax = axes[row, col]
            for m in methods:
                found = [
                    results.get(dataset, m, key(corruption, s, metric), regime) for s in severities
                ]
                means = [scale * f.mean for f in found if f is not None]
                if len(means) < len(found):
                    continue
                ce = m == "ce"
                ax.plot(
                    severities,
                    means,
                    color="black" if ce else colours[m],
                    lw=2.2 if ce else 1.0,
                    marker="o",
                    ms=2.5,
                    label=LABELS[m],
                    zorder=3 if ce else 2,
                )
            ax.grid(alpha=0.2)
            ax.tick_params(labelsize="x-small")
            if col == 0:
                ax.set_ylabel(label, fontsize="small")
            if row == 0:
                ax.set_title(corruption, fontsize="small")
        axes[-1, col].set_xlabel("severity", fontsize="small")
    fig.suptitle(f"{dataset}, {regime}: under shift (post-hoc maps fitted on clean validation)",
                 fontsize="medium")  # fmt: skip
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center", fontsize="x-small", frameon=False)
    return fig
