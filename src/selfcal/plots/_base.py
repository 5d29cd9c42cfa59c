"""Shared plumbing for the displays: lazy matplotlib, axes creation, colours, conversions.

Nothing here imports matplotlib at module level; :func:`pyplot` does it on first use so that
``import selfcal.plots`` stays cheap and works without the optional dependency.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from selfcal.predictions import Predictions, as_predictions

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ACCURACY_COLOR = "#1f77b4"
"""Blue of the per-bin accuracy bars and the confidence histogram."""
OVERCONFIDENCE_COLOR = "#ff7f0e"
"""Orange: accuracy below confidence ([BO4SC] Fig. 2)."""
UNDERCONFIDENCE_COLOR = "#d62728"
"""Red: accuracy above confidence ([BO4SC] Fig. 2)."""
MEAN_ACCURACY_COLOR = "#222222"
MEAN_CONFIDENCE_COLOR = "#a8a8a8"
IDENTITY_COLOR = "#7f7f7f"
EDGE_COLOR = "#333333"

INSTALL_HINT = "selfcal.plots needs matplotlib: pip install 'selfcal[full]' (or matplotlib)"


def pyplot() -> Any:
    """Import and return ``matplotlib.pyplot``, with an install hint if it is missing."""
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(INSTALL_HINT) from exc
    return plt


def get_axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Axes, Figure]:
    """``ax`` and its figure, or a fresh ``pyplot`` figure with one axes of ``figsize``."""
    if ax is None:
        fig, ax = pyplot().subplots(figsize=figsize, layout="constrained")
        return ax, fig
    return ax, ax.get_figure(root=True)


def to_numpy(x: torch.Tensor | np.ndarray | float) -> np.ndarray:
    """A float64 numpy copy of a tensor (any device) or array."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().to(torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def resolve(predictions: Predictions | None, labels: Any, logits: Any, probs: Any) -> Predictions:
    """Validate the public ``(predictions | logits= | probs=, labels=)`` arguments."""
    return as_predictions(predictions, labels=labels, logits=logits, probs=probs)


def percent(x: float) -> str:
    """A fraction as a percentage with two decimals, e.g. ``0.0321 -> '3.21%'``."""
    return f"{100 * x:.2f}%"


def plot_many(
    factory: Any, predictions: Mapping[str, Predictions], ax: Axes | None, **kwargs: Any
) -> dict[str, Any]:
    """Call ``factory(pred, name=name, ax=ax, **kwargs)`` for each named prediction set, all
    on one axes (created by the first call when ``ax`` is None); returns the displays by name."""
    if not predictions:
        raise ValueError("predictions must name at least one prediction set")
    displays = {}
    for name, pred in predictions.items():
        if not isinstance(pred, Predictions):
            raise ValueError(
                f"predictions[{name!r}] must be a selfcal Predictions object "
                "(build one with Predictions.from_logits / from_probs)"
            )
        disp = factory(pred, name=name, ax=ax, **kwargs)
        ax = disp.ax_
        displays[name] = disp
    return displays


def autoscale_from_zero(ax: Axes) -> None:
    """Re-fit the y-limits to everything drawn on ``ax`` so far, keeping 0 as the bottom
    (so curves added later with the same ``ax`` stay inside the view)."""
    ax.relim()
    ax.autoscale(enable=True, axis="y")
    ax.autoscale_view(scalex=False)
    ax.set_ylim(bottom=0)
