"""The conformal study's figure, per regime: the average set size at alpha = 0.1 of every
training method on every dataset, with no post-hoc step, after TS and after SMS (score APS;
mean over seeds with its 95% t-interval)."""

from __future__ import annotations

from typing import Any

from selfcal.experiments.study import StudyResults
from selfcal.experiments.tables import mean_interval
from selfcal.plots.save import new_figure
from selfcal.studies.conformal.execute import key
from selfcal.studies.conformal.report import MAIN_ALPHA, _grid, _records, by_seed, regimes

SCORE = "aps"
MARKERS = {"none": "o", "ts": "s", "sms": "^"}


def figures(results: StudyResults) -> dict[str, Any]:
    return {f"set_size_{r or 'sklearn'}.png": set_size(results, r) for r in regimes(results)}


def set_size(results: StudyResults, regime: str) -> Any:
    records = _records(results, regime)
    datasets, methods = _grid(results, records)
    if not datasets:
        return None
    fig = new_figure((3.2 * len(datasets), 0.28 * len(methods) + 1.6))
    axes = fig.subplots(1, len(datasets), sharey=True, squeeze=False)[0]
    for ax, dataset in zip(axes, datasets):
        for j, step in enumerate(results.protocol.posthoc):
            for i, method in enumerate(methods):
                values = by_seed(records, dataset, method, key("size", step, SCORE, MAIN_ALPHA))
                if not values:
                    continue
                mean, low, high = mean_interval(list(values.values()))
                y = i + (j - 1) * 0.22
                ax.plot([low, high], [y, y], color=f"C{j}", lw=1.0)
                ax.plot(
                    [mean],
                    [y],
                    MARKERS.get(step, "o"),
                    color=f"C{j}",
                    ms=4,
                    label=step if i == 0 else None,
                )
        ax.set_title(dataset, fontsize=9)
        ax.set_xlabel(f"set size, α = {MAIN_ALPHA:g} ({SCORE})", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].set_yticks(range(len(methods)), methods)
    axes[0].invert_yaxis()
    axes[-1].legend(fontsize=7, title="post-hoc", title_fontsize=7)
    fig.suptitle(f"Conformal set size ({regime or 'scikit-learn models'})", fontsize=10)
    return fig
