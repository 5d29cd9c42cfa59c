"""The meta-regularization figures: [MetaReg] Fig. 3 (test ECE per epoch; γ-Net's γ on the
test set, every seed), Fig. 4 (reliability diagrams at 20 / 50 / 100 bins) and Fig. 5 (ECE and
MCE against the number of bins), and the optimal temperature against training length."""

from __future__ import annotations

from typing import Any

import numpy as np

from selfcal.experiments.study import TEST_LABELS, TEST_LOGITS, StudyResults
from selfcal.plots.save import method_colours, new_figure
from selfcal.studies._images import curve_figure
from selfcal.studies.meta_reg.protocol import BIN_COUNTS, GAMMA_NETS, LABELS
from selfcal.studies.meta_reg.report import _lr, methods, regimes


def figures(results: StudyResults) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for d in results.datasets:
        out[f"fig3_test_ece_per_epoch_{d}.png"] = curve_figure(
            results, d, "test_ece", "test ECE (%)", 100.0, methods(results), LABELS
        )
        out[f"fig3_gamma_per_seed_{d}.png"] = gamma_figure(results, d)
        out[f"fig4_reliability_bins_{d}.png"] = figure4(results, d)
        out[f"fig5_ece_mce_vs_bins_{d}.png"] = figure5(results, d)
        out[f"fig_temperature_per_epoch_{d}.png"] = curve_figure(
            results,
            d,
            "val_temperature",
            "optimal temperature (validation)",
            1.0,
            methods(results),
            LABELS,
        )
    return out


def gamma_figure(results: StudyResults, dataset: str) -> Any:
    """Fig. 3c-d for every seed: γ-Net's mean γ on the test set per epoch (line) ± its std over
    test samples (band), one panel per (regime, γ-Net method)."""
    nets = [m for m in GAMMA_NETS if m in methods(results)]
    panels = [(r, m) for r in regimes(results, dataset) for m in nets]
    if not panels:
        return None
    fig = new_figure((4.2 * len(nets), 3.4 * len(regimes(results, dataset))))
    axes = np.atleast_2d(fig.subplots(len(regimes(results, dataset)), len(nets), squeeze=False))
    colours = method_colours(len(results.protocol.seeds))
    for ax, (regime, method) in zip(axes.ravel(), panels):
        for seed, colour in zip(results.protocol.seeds, colours):
            run = results.run(dataset, method, seed, regime)
            if run is None or "curve_test_gamma_mean" not in run.artefacts:
                continue
            epochs = results.artefact(run, "curve_epoch")
            mean = results.artefact(run, "curve_test_gamma_mean")
            std = results.artefact(run, "curve_test_gamma_std")
            ax.plot(epochs, mean, color=colour, label=f"seed {seed}{_lr(run)}")
            ax.fill_between(epochs, mean - std, mean + std, color=colour, alpha=0.15)
        ax.set(xlabel="epoch", ylabel="γ on the test set", title=f"{LABELS[method]}, {regime}")
        ax.legend(fontsize="xx-small")
    return fig


def figure4(results: StudyResults, dataset: str) -> Any:
    """Fig. 4: reliability diagrams of FLγ-SECE (first seed) at 20, 50 and 100 bins, one row
    per regime."""
    from selfcal import Predictions
    from selfcal.plots import ReliabilityDiagramDisplay

    names = regimes(results, dataset)
    runs = [results.run(dataset, "flg-sece", results.protocol.seeds[0], r) for r in names]
    if not any(r is not None and TEST_LOGITS in r.artefacts for r in runs):
        return None
    fig = new_figure((12.0, 3.8 * len(names)))
    axes = np.atleast_2d(fig.subplots(len(names), 3, squeeze=False))
    for row, (regime, run) in enumerate(zip(names, runs)):
        if run is None or TEST_LOGITS not in run.artefacts:
            continue
        pred = Predictions.from_logits(
            results.artefact(run, TEST_LOGITS), results.artefact(run, TEST_LABELS)
        )
        for ax, bins in zip(axes[row], (20, 50, 100)):
            ReliabilityDiagramDisplay.from_predictions(
                pred, n_bins=bins, ax=ax, title=f"FLγ-SECE, {regime}, {bins} bins"
            )
    return fig


def figure5(results: StudyResults, dataset: str) -> Any:
    """Fig. 5: ECE and MCE against the number of bins (seed means), one row per regime."""
    names = regimes(results, dataset)
    fig = new_figure((11.0, 3.6 * len(names)))
    axes = np.atleast_2d(fig.subplots(len(names), 2, squeeze=False))
    colours = method_colours(len(methods(results)))
    for row, regime in enumerate(names):
        for ax, metric in zip(axes[row], ("ece", "mce")):
            for method, colour in zip(methods(results), colours):
                cells = [
                    results.get(dataset, method, f"{metric}_{b}_bins", regime) for b in BIN_COUNTS
                ]
                means = [100 * c.mean for c in cells if c is not None]
                if len(means) == len(cells):
                    ax.plot(
                        BIN_COUNTS,
                        means,
                        marker="o",
                        label=LABELS[method],
                        color=colour,
                    )
            ax.set(
                xscale="log",
                xlabel="number of bins",
                ylabel=f"{metric.upper()} (%)",
                title=f"{dataset}, {regime}: {metric.upper()} vs bins",
            )
    axes[0, 0].legend(fontsize="x-small", ncol=2)
    return fig
