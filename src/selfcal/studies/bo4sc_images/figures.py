"""BO4SC's weights on images: [BO4SC] Fig. 3 (right panel) as a scatter of every training row's
final weight against its final cross-entropy, coloured by correctness, one panel per regime."""

from __future__ import annotations

from typing import Any

import numpy as np

from selfcal.experiments.study import StudyResults
from selfcal.plots.save import new_figure
from selfcal.studies._images import regimes


def figures(results: StudyResults) -> dict[str, Any]:
    return {f"fig3_weights_{d}.png": weight_figure(results, d) for d in results.datasets}


def weight_figure(results: StudyResults, dataset: str) -> Any:
    """The first seed's selected BO4SC run in each regime (``None`` when none ran)."""
    seed = results.protocol.seeds[0]
    runs = [
        (r, run)
        for r in regimes(results, dataset)
        if (run := results.run(dataset, "bo4sc", seed, r)) is not None
        and "train_weight" in run.artefacts
    ]
    if not runs:
        return None
    fig = new_figure((5.0 * len(runs), 3.8))
    axes = np.atleast_1d(fig.subplots(1, len(runs)))
    for ax, (regime, run) in zip(axes, runs):
        weight = results.artefact(run, "train_weight")
        loss = results.artefact(run, "train_loss")
        correct = results.artefact(run, "train_correct").astype(bool)
        for mask, colour, label in (
            (correct, "tab:blue", "classified correctly"),
            (~correct, "tab:red", "misclassified"),
        ):
            ax.scatter(
                np.maximum(loss[mask], 1e-6),
                weight[mask],
                s=4,
                alpha=0.5,
                color=colour,
                label=f"{label} ({int(mask.sum())})",
            )
        ax.set(
            xscale="log",
            xlabel="cross-entropy of the row under the final model",
            ylabel="final weight",
            ylim=(-0.03, 1.03),
            title=f"{dataset}, {regime}, seed {seed}",
        )
        ax.legend(fontsize="x-small", loc="lower left")
    return fig
