"""Shared plumbing for the displays: the display base classes, lazy matplotlib, axes creation,
colours, conversions.

Every display follows scikit-learn's display protocol: the constructor stores the data drawn
(public attributes), ``plot(ax=None, ..., title=None)`` draws them -- on a new figure of the
class's :attr:`Display.figsize` when ``ax`` is None -- and ends with :meth:`Display._finish`,
which sets the title and the ``ax_`` / ``figure_`` attributes and returns the display. A
:class:`PredictionsDisplay` is computed from one labelled prediction set:
``from_predictions(predictions=None, /, *, labels=, logits= | probs=, ax=None, title=None,
**options)`` resolves the inputs with :func:`resolve`, computes the display with the class's
``_compute(pred, **options)`` and draws it with ``plot(ax=ax, title=title)``, so each display
writes only its own options, computation and drawing.

Nothing here imports matplotlib at module level; :func:`pyplot` does it on first use so that
``import selfcal.plots`` stays cheap and works without the optional dependency.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self

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
    fig = ax.get_figure(root=True)
    assert fig is not None  # an axes is always in a figure
    return ax, fig


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


# --------------------------------------------------------------------------- base classes
class Display:
    """Base of every display: :attr:`figsize` of a new figure, and the end of ``plot``.

    After ``plot``: ``ax_`` (the axes drawn on) and ``figure_`` (its root figure).
    """

    figsize: ClassVar[tuple[float, float]] = (6.4, 4.8)
    """Size in inches of the figure ``plot`` creates when given no axes."""
    ax_: Axes
    figure_: Figure

    def _axes(self, ax: Axes | None) -> tuple[Axes, Figure]:
        """``ax`` and its figure, or a new figure of :attr:`figsize` with one axes."""
        return get_axes(ax, figsize=self.figsize)

    def _finish(self, ax: Axes, fig: Figure, title: str | None) -> Self:
        """The last step of ``plot``: set ``title`` (when not None), ``ax_`` and ``figure_``;
        returns ``self``."""
        if title is not None:
            ax.set_title(title)
        self.ax_, self.figure_ = ax, fig
        return self


INPUTS = ("labels", "logits", "probs")
"""The array inputs ``from_predictions`` accepts instead of a :class:`Predictions` object
(resolved by :func:`resolve`: labels with logits or probabilities)."""
DRAWING = ("ax", "title")
"""The keyword arguments of ``from_predictions`` that go to ``plot`` (both default to None)."""


class PredictionsDisplay(Display):
    """A display computed from one labelled prediction set (see the module docstring).

    Subclasses implement ``_compute(pred, **options)`` (a classmethod building the undrawn
    display; its keyword-only parameters are the display's options of
    :meth:`from_predictions`, with their defaults; an unknown option is a ``TypeError``) and
    ``_draw(ax)``; :meth:`_heading` may turn ``title`` into the heading.
    """

    @classmethod
    def from_predictions(cls, predictions: Predictions | None = None, /, **options: Any) -> Self:
        """Compute the display of ``predictions`` -- or of the arrays ``labels=`` with
        ``logits=`` or ``probs=`` (:data:`INPUTS`) -- with the display's options and draw it on
        ``ax=`` (a new figure when None) under ``title=`` (:data:`DRAWING`); ``options`` holds
        all of these keyword arguments."""
        arrays = {name: options.pop(name, None) for name in INPUTS}
        drawing = {name: options.pop(name, None) for name in DRAWING}
        return cls._compute(resolve(predictions, **arrays), **options).plot(**drawing)

    @classmethod
    def _compute(cls, pred: Predictions) -> Self:  # pragma: no cover - abstract
        raise NotImplementedError

    def plot(self, ax: Axes | None = None, *, title: str | None = None) -> Self:
        """Draw on ``ax`` (a new figure when None) and return ``self``."""
        ax, fig = self._axes(ax)
        self._draw(ax)
        return self._finish(ax, fig, self._heading(title))

    def _draw(self, ax: Axes) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _heading(self, title: str | None) -> str | None:
        """The axes title for ``plot(title=...)``: ``title`` itself unless a display adds to
        it."""
        return title


class OverlayDisplay(PredictionsDisplay):
    """A :class:`PredictionsDisplay` whose curves of several prediction sets share one axes
    (pass the same ``ax=``, or use :meth:`from_predictions_dict`)."""

    @classmethod
    def from_predictions_dict(
        cls,
        predictions: Mapping[str, Predictions],
        *,
        ax: Axes | None = None,
        title: str | None = None,
        **options: Any,
    ) -> dict[str, Self]:
        """One display per named prediction set (e.g. ``{"CE": p1, "FL": p2}``, the name in
        the legend), all on one axes, each computed with ``options``; returns the displays
        by name (they share ``ax_``)."""
        return plot_many(cls.from_predictions, predictions, ax, title=title, **options)
