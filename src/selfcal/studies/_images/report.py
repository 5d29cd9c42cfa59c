"""The image studies' shared report pieces: the opening, per-regime sections, per-epoch curve
figures, specs and the quick protocols' fields."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from selfcal.studies._images.recipe import CIFAR, ImageProtocol, Regime


def curve_figure(
    results: Any,
    dataset: str,
    curve: str,
    label: str,
    scale: float,
    names: Sequence[str],
    labels: dict[str, str],
) -> Any:
    """A per-epoch curve of :class:`Curves` (seed mean of the selected runs) for the methods
    ``names``, one panel per regime."""
    from selfcal.plots import method_colours, new_figure

    panels = [r.name for r in results.protocol.regimes_for(dataset)]
    fig = new_figure((5.2 * len(panels), 3.8))
    axes = np.atleast_1d(fig.subplots(1, len(panels)))
    colours = method_colours(len(names))
    for ax, regime in zip(axes, panels):
        for method, colour in zip(names, colours):
            runs = [
                r for r in results.runs(dataset, method, regime) if f"curve_{curve}" in r.artefacts
            ]
            if runs:
                values = np.mean([results.artefact(r, f"curve_{curve}") for r in runs], 0)
                epochs = results.artefact(runs[0], "curve_epoch")
                ax.plot(epochs, scale * values, label=labels[method], color=colour)
        ax.set(xlabel="epoch", ylabel=label, title=f"{dataset}, {regime} regime")
        if curve == "val_temperature":
            ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    axes[0].legend(fontsize="x-small", ncol=2)
    return fig


def intro(
    results: Any, docs: Sequence[str | None], criterion: Any, cells: str, shared: str | None
) -> list[str]:
    """The image reports' opening: the study's own text (``docs``), the recipe and regimes
    (``shared``: the docstring of :mod:`selfcal.studies._images`, less its first paragraph),
    how hyperparameters are selected and the cells and verdicts read, and whether the CIFAR
    rows ran."""
    from selfcal.experiments.report import prose

    parts = [line for doc in docs for line in prose(doc)]
    parts += [
        *prose(str(shared).split("\n\n", 1)[1]),
        f"Tuned and unstated hyperparameters are selected per seed by the {criterion} "
        "among each method's candidates (listed at the end with every seed's choice). "
        f"Cells: mean ± 95% CI half-width over seeds, {cells}. Ranks and verdicts come "
        "from paired t-intervals of the per-seed differences (95%, no multiple-comparison "
        "correction); 'tied' means the interval contains 0.",
        "",
    ]
    if not any(d in CIFAR for d in results.datasets):
        parts += [
            "CIFAR-10/100 rows were not run: their files are not under `$SELFCAL_DATA` "
            "(they run for real, with the papers' 350-epoch schedule and settings, when "
            "present).",
            "",
        ]
    return parts


def regimes(results: Any, dataset: str) -> list[str]:
    """The names of the regimes ``dataset`` ran in."""
    return [r.name for r in results.protocol.regimes_for(dataset)]


def regime_sections(
    results: Any,
    datasets: Sequence[str],
    models: dict[str, str],
    table: Any,
    verdicts: Any,
    after: Any = lambda dataset: [],
) -> list[str]:
    """Per dataset, ``table(results, dataset, regime)`` under a heading for each regime, then
    ``after(dataset)``; then a "Verdicts" section of ``verdicts(results, dataset, regime)``."""
    parts = []
    for d in datasets:
        for regime in regimes(results, d):
            parts += [
                f"## {d} ({models[d]}), {regime} regime "
                f"({results.protocol.regime(regime).epochs} epochs)",
                "",
                *table(results, d, regime),
                "",
            ]
        parts += after(d)
    parts += ["## Verdicts", ""]
    for d in datasets:
        for regime in regimes(results, d):
            parts += verdicts(results, d, regime)
    return parts


def regime_specs(
    study: Any, protocol: ImageProtocol, methods: Sequence[str], datasets: Sequence[str]
) -> list[Any]:
    """One spec per (dataset, regime, method, candidate, seed)."""
    return [
        study.spec(protocol, d, m, seed, regime=r.name, config=c)
        for d in datasets
        for r in protocol.regimes_for(d)
        for m in methods
        for c in protocol.candidates(d, m)
        for seed in protocol.seeds
    ]


def quick_fields(epochs: int, note: str) -> dict[str, Any]:
    """The fields the ``quick`` protocols share: digits only, seeds 0 and 1, one ``short``
    regime of ``epochs`` epochs (the learning rate drops before the last), and ``note``."""
    short = Regime("short", epochs, (epochs - 1,))
    return {"seeds": (0, 1), "datasets": ("digits-images",), "regimes": (short,), "notes": (note,)}


def study_texts(package: Any, execute: Any) -> list[str | None]:
    """:func:`intro`'s ``docs``: the study package's docstring, then its ``execute`` module's
    without the first paragraph (its summary)."""
    return [package.__doc__, str(execute.__doc__).split("\n\n", 1)[1]]


def regime_summary(
    results: Any, datasets: Sequence[str], caption: str, table: Any, verdicts: Any
) -> list[str]:
    """What ``selfcal reproduce`` prints: per dataset and regime, ``"<dataset>, <regime>
    regime (<caption>)"``, ``table(results, dataset, regime)``, a blank line, the verdicts."""
    lines = []
    for d in datasets:
        for regime in regimes(results, d):
            caption_line = f"{d}, {regime} regime ({caption})"
            lines += [caption_line, *table(results, d, regime), "", *verdicts(results, d, regime)]
    return lines
