"""The BSCE-GRA figures: [GRA] Figs. 1, 4, 5a and 7-8, the optimal temperature against training
length, and the rest point -- drawn from the stored runs (the selected candidates; the
per-sample snapshots of the first seed)."""

from __future__ import annotations

from typing import Any

import numpy as np

from selfcal.experiments.study import StudyResults
from selfcal.plots.save import new_figure
from selfcal.studies._images import curve_figure
from selfcal.studies.bsce_gra.protocol import LABELS, REST_POINT_DATASET, REST_POINT_GAMMAS
from selfcal.studies.bsce_gra.report import image_datasets, losses, regimes


def figures(results: StudyResults) -> dict[str, Any]:
    out: dict[str, Any] = {"fig1_focal_gradient_factor.png": figure1()}
    for d in image_datasets(results):
        last = regimes(results, d)[-1]
        out[f"fig4_gradient_norm_vs_brier_{d}.png"] = figure4(results, d, last)
        out[f"fig5a_test_ece_per_epoch_{d}.png"] = curve_figure(
            results, d, "test_ece", "test ECE (%)", 100.0, ("ce", "flsd53", "bsce-gra"), LABELS
        )
        out[f"fig7_true_class_probability_{d}.png"] = figure7(results, d, last)
        out[f"fig_temperature_per_epoch_{d}.png"] = curve_figure(
            results,
            d,
            "val_temperature",
            "optimal temperature (validation)",
            1.0,
            losses(results),
            LABELS,
        )
    if results.runs(REST_POINT_DATASET):
        out["fig_rest_point.png"] = rest_point_figure(results)
    return out


def figure1() -> Any:
    """[GRA] Fig. 1: the focal-loss gradient factor g(p, gamma) against p."""
    import torch

    from selfcal.losses import focal_gradient_factor

    fig = new_figure((5.0, 3.6))
    ax = fig.subplots()
    p = torch.linspace(1e-3, 1 - 1e-3, 400, dtype=torch.float64)
    for gamma in (0.0, 1.0, 2.0, 3.0, 5.0):
        ax.plot(p.numpy(), focal_gradient_factor(p, gamma).numpy(), label=f"γ = {gamma:g}")
    ax.set(
        xlabel="true-class probability p",
        ylabel="g(p, γ)",
        title="Focal loss: gradient = g(p, γ) · CE gradient",
    )
    ax.legend(fontsize="small")
    return fig


def _snapshot_losses(results: StudyResults, wanted: tuple[str, ...]) -> list[str]:
    return [x for x in wanted if x in losses(results)] or ["ce"]


def figure4(results: StudyResults, dataset: str, regime: str) -> Any:
    """[GRA] Fig. 4: per-sample last-layer gradient norm against Brier score (first seed)."""
    names = _snapshot_losses(results, ("flsd53", "dfl", "bsce-gra"))
    epochs = results.protocol.regime(regime).figure_epochs
    fig = new_figure((3.2 * len(epochs), 2.8 * len(names)))
    axes = np.atleast_2d(fig.subplots(len(names), len(epochs), squeeze=False))
    for i, loss in enumerate(names):
        run = results.run(dataset, loss, results.protocol.seeds[0], regime)
        for j, e in enumerate(epochs):
            ax = axes[i, j]
            if run is not None and f"brier_e{e}" in run.artefacts:
                ax.scatter(
                    results.artefact(run, f"brier_e{e}"),
                    results.artefact(run, f"grad_norm_e{e}"),
                    s=3,
                    alpha=0.4,
                )
            ax.set_title(f"{LABELS[loss]}, epoch {e}", fontsize="small")
            ax.set_xlabel("Brier score", fontsize="small")
            ax.set_ylabel("‖∇W loss‖", fontsize="small")
    fig.suptitle(f"{dataset}, {regime} regime, seed {results.protocol.seeds[0]}")
    return fig


def figure7(results: StudyResults, dataset: str, regime: str) -> Any:
    """[GRA] Figs. 7-8: true-class probability of correct vs wrong test predictions."""
    names = _snapshot_losses(results, ("ce", "flsd53", "dfl", "bsce", "bsce-gra"))
    epochs = results.protocol.regime(regime).figure_epochs
    fig = new_figure((3.2 * len(epochs), 2.6 * len(names)))
    axes = np.atleast_2d(fig.subplots(len(names), len(epochs), squeeze=False))
    bins = np.linspace(0, 1, 21)
    for i, loss in enumerate(names):
        run = results.run(dataset, loss, results.protocol.seeds[0], regime)
        for j, e in enumerate(epochs):
            ax = axes[i, j]
            if run is not None and f"true_prob_e{e}" in run.artefacts:
                prob = results.artefact(run, f"true_prob_e{e}")
                ok = results.artefact(run, f"correct_e{e}")
                ax.hist(prob[ok], bins=bins, alpha=0.6, label="correct", density=True)
                ax.hist(prob[~ok], bins=bins, alpha=0.6, label="wrong", density=True)
            ax.set_title(f"{LABELS[loss]}, epoch {e}", fontsize="small")
    axes[0, 0].legend(fontsize="small")
    fig.suptitle(f"{dataset}, {regime} regime, seed {results.protocol.seeds[0]}")
    return fig


def rest_point_figure(results: StudyResults) -> Any:
    """Left: the binary rest point against the true posterior for several gamma, with the
    binary training check's learned slope ratios. Right: the 10-class rest point's confidence
    when the true class has posterior eta and the rest is spread evenly."""
    import torch

    from selfcal.losses import BrierWeight, gra_rest_point

    fig = new_figure((10.5, 4.0))
    left, right = fig.subplots(1, 2)
    eta = torch.linspace(0.5, 0.999, 200, dtype=torch.float64)
    for gamma in REST_POINT_GAMMAS:
        binary = gra_rest_point(torch.stack([1 - eta, eta], 1), BrierWeight(gamma, 2))[:, 1]
        left.plot(eta.numpy(), binary.numpy(), label=f"γ = {gamma:g}")
        rest = (1 - eta)[:, None].expand(-1, 9) / 9
        multi = gra_rest_point(torch.cat([eta[:, None], rest], 1), BrierWeight(gamma, 2))
        right.plot(eta.numpy(), multi[:, 0].numpy(), label=f"γ = {gamma:g}")
    for ax, title in ((left, "2 classes"), (right, "10 classes, rest spread evenly")):
        ax.plot([0.5, 1], [0.5, 1], color="grey", ls="--", lw=0.8, label="calibrated (p = η)")
        ax.set(
            xlabel="true posterior of the class η",
            ylabel="rest point p*",
            title=f"BSCE-GRA rest point, {title}",
        )
        ax.legend(fontsize="small")
    learned = []
    for gamma in REST_POINT_GAMMAS:
        runs = results.runs(REST_POINT_DATASET, f"bsce-gra-{gamma:g}")
        if runs:
            learned.append((gamma, np.mean([r.metrics["slope_ratio"] for r in runs])))
    if learned:
        text = "trained, slope / Bayes slope:\n" + "\n".join(
            f"γ={g:g}: {v:.3f} (predicted {1 / (1 + g):.3f})" for g, v in learned
        )
        left.text(
            0.98, 0.02, text, transform=left.transAxes, ha="right", va="bottom", fontsize="x-small"
        )
    return fig
