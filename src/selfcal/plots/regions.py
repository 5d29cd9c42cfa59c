"""Confidence-region maps of 2-D classifiers ([BO4SC] Fig. 1).

A map evaluates a model's confidence on a dense regular grid over the data's bounding box
(plus a margin) and draws it as filled contours with *fixed* levels, so panels of different
methods share one colour scale: yellow is ``(0.9, 1]``, lower bands run through green to dark
blue. The training/test points are drawn on top, coloured by class.

The model is passed as ``confidence_fn(points) -> confidences``: ``points`` is a float64
``(m, 2)`` array of raw 2-D coordinates and the caller maps them to model inputs and applies
the model, the isotonic map of the grid max-prob (IsoReg) or the Boltzmann confidence (BO4SC).
It is called on chunks of ``chunk_size`` rows so a 300 x 300 grid of a large model fits in
memory. :func:`confidence_grid` only computes (the experiment store saves ``xx, yy,
confidence``); :meth:`ConfidenceRegionDisplay.from_grid` redraws a stored grid. The BO4SC
study composes such maps into the paper's figure
(:func:`selfcal.studies.bo4sc.figures.bo4sc_figure1`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self, cast

import numpy as np
import torch

from selfcal._inputs import as_labels
from selfcal._validation import check_int, check_nonnegative, check_optional_int
from selfcal.plots._base import Display, pyplot, to_numpy

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.axes import Axes

ConfidenceFn = Callable[[np.ndarray], Any]
"""``(m, 2)`` float64 points -> ``(m,)`` confidences in ``[0, 1]`` (numpy or torch)."""

DEFAULT_LEVELS: tuple[float, ...] = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
"""Band edges of the filled contours: ``[0, 0.2]``, ``(0.2, 0.3]``, ..., ``(0.9, 1]``.

``0.2`` is the lowest max-prob of a 5-class model; the lowest band also catches the
sub-0.5 (even sub-0.2) confidences an isotonic map can produce."""

REGION_CMAP = "viridis"
"""Colour map of the confidence bands (top band yellow, low bands blue-green)."""
CLASS_CMAP = "tab10"
"""Qualitative colours of the overlaid points (class ``k`` gets colour ``k mod 10``)."""
DEFAULT_CHUNK_SIZE = 1 << 14
"""Grid points per ``confidence_fn`` call."""
CONFIDENCE_ATOL = 1e-6
"""Rounding slack: confidences in ``[-atol, 1 + atol]`` are clipped to ``[0, 1]`` (a float32
Boltzmann average of probabilities can exceed 1 by an ulp); anything further out raises."""


# --------------------------------------------------------------------------- validation
def check_points(x: Any, name: str = "x") -> np.ndarray:
    """``x`` as a finite float64 ``(n, 2)`` array with ``n >= 1``."""
    arr = to_numpy(x)
    if arr.ndim != 2 or arr.shape[1] != 2 or arr.shape[0] < 1:
        raise ValueError(f"{name} must have shape (n, 2) with n >= 1, got {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return arr


def check_labels(y: Any, n: int, name: str = "y") -> np.ndarray:
    """``y`` as an int64 ``(n,)`` array of non-negative whole numbers: the one label rule
    (:func:`selfcal._inputs.as_labels`) with no class count, so ``[0, inf)``."""
    return as_labels(y, n, None, name=name).values.cpu().numpy()


def check_confidence(conf: Any, shape: tuple[int, ...], name: str = "confidence") -> np.ndarray:
    """``conf`` as a float64 array of ``shape`` with every value in ``[0, 1]`` (up to
    :data:`CONFIDENCE_ATOL`, clipped)."""
    arr = to_numpy(conf)
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
    if np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN")
    if (arr < -CONFIDENCE_ATOL).any() or (arr > 1 + CONFIDENCE_ATOL).any():
        raise ValueError(
            f"{name} must lie in [0, 1], got values in [{arr.min():.6g}, {arr.max():.6g}]"
        )
    return np.clip(arr, 0.0, 1.0)


def check_levels(levels: Sequence[float]) -> np.ndarray:
    """Strictly increasing band edges covering ``[0, 1]`` (so every confidence is drawn)."""
    arr = np.asarray(levels, dtype=np.float64)
    if arr.ndim != 1 or arr.size < 2 or (np.diff(arr) <= 0).any():
        raise ValueError(f"levels must be a strictly increasing sequence of >= 2 values: {levels}")
    if arr[0] > 0 or arr[-1] < 1:
        raise ValueError(f"levels must cover [0, 1], got [{arr[0]}, {arr[-1]}]")
    return arr


# --------------------------------------------------------------------------- computation
def grid_axes(x: np.ndarray, grid_size: int, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """``grid_size`` equally spaced coordinates per axis spanning
    ``[min - margin, max + margin]`` of the points ``x`` (``margin`` in data units)."""
    check_int("grid_size", grid_size, minimum=2)
    check_nonnegative("margin", margin)
    low, high = x.min(axis=0) - margin, x.max(axis=0) + margin
    if (high <= low).any():
        raise ValueError("the points span no area: use margin > 0 for a single point")
    return np.linspace(low[0], high[0], grid_size), np.linspace(low[1], high[1], grid_size)


def evaluate_in_chunks(
    confidence_fn: ConfidenceFn, points: np.ndarray, chunk_size: int | None
) -> np.ndarray:
    """``confidence_fn`` on consecutive blocks of ``chunk_size`` rows (one call when None),
    concatenated; each block's output must be ``(rows,)`` in ``[0, 1]``."""
    check_optional_int("chunk_size", chunk_size)
    step = points.shape[0] if chunk_size is None else chunk_size
    parts = []
    for start in range(0, points.shape[0], step):
        block = points[start : start + step]
        with torch.no_grad():
            out = confidence_fn(block)
        parts.append(check_confidence(out, (block.shape[0],), "confidence_fn output"))
    return np.concatenate(parts)


def confidence_grid(
    confidence_fn: ConfidenceFn,
    x: Any,
    *,
    grid_size: int = 300,
    margin: float = 0.5,
    chunk_size: int | None = DEFAULT_CHUNK_SIZE,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(xx, yy, confidence)``, each ``(grid_size, grid_size)``, on the bounding box of ``x``.

    ``xx[i, j]`` is the ``j``-th x coordinate and ``yy[i, j]`` the ``i``-th y coordinate
    (``np.meshgrid`` "xy" indexing); ``confidence_fn`` receives the grid points row by row,
    i.e. ``np.column_stack([xx.ravel(), yy.ravel()])``, under ``torch.no_grad()``.
    """
    points_x = check_points(x)
    xs, ys = grid_axes(points_x, grid_size, margin)
    xx, yy = np.meshgrid(xs, ys)
    points = np.column_stack([xx.ravel(), yy.ravel()])
    conf = evaluate_in_chunks(confidence_fn, points, chunk_size)
    return xx, yy, conf.reshape(xx.shape)


# --------------------------------------------------------------------------- display
@dataclass(kw_only=True, eq=False, repr=False)
class ConfidenceRegionDisplay(Display):
    """Filled confidence map over a 2-D input plane with the data on top ([BO4SC] Fig. 1).

    Attributes: ``xx``, ``yy``, ``confidence`` (float64 ``(G_y, G_x)``), ``x`` ``(n, 2)``,
    ``y`` ``(n,)`` class labels, ``name``. After :meth:`plot`: ``ax_``, ``figure_``,
    ``contour_`` (the filled contour set; one face colour per band), ``scatter_``,
    ``colorbar_`` (or None).
    """

    figsize = (5.0, 4.2)
    xx: np.ndarray
    yy: np.ndarray
    confidence: np.ndarray
    x: np.ndarray
    y: np.ndarray
    name: str | None = None

    @classmethod
    def from_function(
        cls,
        confidence_fn: ConfidenceFn,
        x: Any,
        y: Any,
        *,
        grid_size: int = 300,
        margin: float = 0.5,
        chunk_size: int | None = DEFAULT_CHUNK_SIZE,
        **draw: Any,
    ) -> ConfidenceRegionDisplay:
        """Evaluate ``confidence_fn`` on a ``grid_size``-square grid over the bounding box of
        ``x`` widened by ``margin`` (see :func:`confidence_grid`) and draw the map; ``draw``
        holds :meth:`from_grid`'s options (``name=None``, ``ax=None``, ``title=None``,
        ``colorbar=True``)."""
        xx, yy, conf = confidence_grid(
            confidence_fn, x, grid_size=grid_size, margin=margin, chunk_size=chunk_size
        )
        return cls.from_grid(xx, yy, conf, x, y, **draw)

    @classmethod
    def from_grid(
        cls,
        xx: Any,
        yy: Any,
        confidence: Any,
        x: Any,
        y: Any,
        *,
        name: str | None = None,
        ax: Axes | None = None,
        title: str | None = None,
        colorbar: bool = True,
    ) -> ConfidenceRegionDisplay:
        """Draw a stored map: ``xx``, ``yy``, ``confidence`` of one 2-D shape (at least 2 x 2),
        ``x`` ``(n, 2)`` points and ``y`` ``(n,)`` labels."""
        grid_x, grid_y = to_numpy(xx), to_numpy(yy)
        if grid_x.ndim != 2 or min(grid_x.shape) < 2 or grid_y.shape != grid_x.shape:
            raise ValueError(
                f"xx and yy must be equal 2-D shapes of at least 2 x 2, got {grid_x.shape} "
                f"and {grid_y.shape}"
            )
        if not (np.isfinite(grid_x).all() and np.isfinite(grid_y).all()):
            raise ValueError("xx and yy must be finite")
        points = check_points(x)
        disp = cls(
            xx=grid_x,
            yy=grid_y,
            confidence=check_confidence(confidence, grid_x.shape),
            x=points,
            y=check_labels(y, points.shape[0]),
            name=name,
        )
        return disp.plot(ax=ax, title=title, colorbar=colorbar)

    def plot(
        self,
        ax: Axes | None = None,
        *,
        levels: Sequence[float] = DEFAULT_LEVELS,
        title: str | None = None,
        colorbar: bool = True,
        show_points: bool = True,
        point_size: float = 9.0,
    ) -> Self:
        """Draw on ``ax`` (a new figure when None) and return ``self``.

        Bands are ``levels`` (default :data:`DEFAULT_LEVELS`) coloured with a
        ``BoundaryNorm`` over them, so a band's colour depends only on the levels, never on
        the data: maps drawn with the same levels are comparable. ``title`` defaults to
        ``name``.
        """
        bounds = check_levels(levels)
        ax, fig = self._axes(ax)
        cmap, norm = region_colors(bounds)
        self.contour_ = ax.contourf(
            self.xx, self.yy, self.confidence, levels=bounds, cmap=cmap, norm=norm, zorder=1
        )
        self.scatter_ = self._draw_points(ax, point_size) if show_points else None
        self.colorbar_ = (
            fig.colorbar(self.contour_, ax=ax, label="Confidence") if colorbar else None
        )
        ax.set_xlim(self.xx.min(), self.xx.max())
        ax.set_ylim(self.yy.min(), self.yy.max())
        ax.set_aspect("equal", adjustable="box")
        return self._finish(ax, fig, self.name if title is None else title)

    def _draw_points(self, ax: Axes, size: float) -> Any:
        """The data points, class ``k`` in colour ``k mod 10`` of :data:`CLASS_CMAP`."""
        colors = class_colors(self.y)
        return ax.scatter(
            self.x[:, 0],
            self.x[:, 1],
            c=colors,
            s=size,
            edgecolors="black",
            linewidths=0.3,
            zorder=2,
        )


def region_colors(levels: np.ndarray) -> tuple[Any, Any]:
    """``(cmap, norm)``: :data:`REGION_CMAP` with a ``BoundaryNorm`` on ``levels`` (band ``k``
    of ``B`` gets the colour ``k / (B - 1)`` of the map; the top band is pure yellow)."""
    pyplot()
    import matplotlib
    from matplotlib.colors import BoundaryNorm

    cmap = matplotlib.colormaps[REGION_CMAP]
    return cmap, BoundaryNorm(levels, cmap.N)


def class_colors(labels: np.ndarray) -> np.ndarray:
    """RGBA ``(n, 4)`` colour of each label from :data:`CLASS_CMAP`."""
    pyplot()
    import matplotlib

    palette = np.asarray(cast(Any, matplotlib.colormaps[CLASS_CMAP]).colors)  # a ListedColormap
    rgb = palette[labels % len(palette)]
    return np.column_stack([rgb, np.ones(len(labels))])
