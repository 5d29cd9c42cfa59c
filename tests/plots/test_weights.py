"""BO4SC weight displays: trajectories and weight maps carry the right data and colours, bad
input raises."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.plots import fake_weight_run

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
from matplotlib.colors import to_rgba  # noqa: E402

from selfcal.plots import WeightMapDisplay, WeightTrajectoryDisplay  # noqa: E402
from selfcal.plots.weights import CORRECT_COLOR, MISCLASSIFIED_COLOR  # noqa: E402


@pytest.fixture(scope="module")
def weight_run():
    return fake_weight_run()


# ------------------------------------------------------------------------ weights
def test_trajectories_one_line_per_sample_red_exactly_for_misclassified(weight_run):
    history, wrong, _ = weight_run
    disp = WeightTrajectoryDisplay.from_history(torch.from_numpy(history), wrong, epoch_unit=10)
    red, dark = disp.misclassified_lines_, disp.correct_lines_
    assert len(red.get_segments()) == wrong.sum()
    assert len(red.get_segments()) + len(dark.get_segments()) == history.shape[1]
    epochs = np.arange(history.shape[0]) * 10.0
    for seg, i in zip(red.get_segments(), np.flatnonzero(wrong), strict=True):
        np.testing.assert_allclose(seg, np.column_stack([epochs, history[:, i]]))
    for seg, i in zip(dark.get_segments(), np.flatnonzero(~wrong), strict=True):
        np.testing.assert_allclose(seg, np.column_stack([epochs, history[:, i]]))
    assert {tuple(c[:3]) for c in red.get_colors()} == {to_rgba(MISCLASSIFIED_COLOR)[:3]}
    assert {tuple(c[:3]) for c in dark.get_colors()} == {to_rgba(CORRECT_COLOR)[:3]}
    assert red.get_zorder() > dark.get_zorder()  # red drawn on top
    assert red.get_alpha() > dark.get_alpha()
    assert disp.ax_.get_xlim() == (0.0, epochs[-1])
    low, high = disp.ax_.get_ylim()
    assert low < 0 < 1 < high < 1.05


def test_trajectory_y_range_widens_to_data_outside_unit_interval(weight_run):
    history, wrong, _ = weight_run
    wide = history.copy()
    wide[-1, 0], wide[-1, 1] = -0.5, 1.5
    low, high = WeightTrajectoryDisplay.from_history(wide, wrong).ax_.get_ylim()
    assert low <= -0.5 and high >= 1.5


@pytest.mark.parametrize(
    ("history", "mask", "kwargs", "match"),
    [
        (np.ones(5), np.zeros(5, bool), {}, "2-D"),
        (np.ones((1, 5)), np.zeros(5, bool), {}, ">= 2 rows"),
        (np.full((3, 5), np.nan), np.zeros(5, bool), {}, "finite"),
        (np.ones((3, 5)), np.zeros(4, bool), {}, "shape"),
        (np.ones((3, 5)), np.full(5, 2), {}, "booleans"),
        (np.ones((3, 5)), np.zeros(5, bool), {"epoch_unit": 0}, "epoch_unit"),
    ],
)
def test_trajectory_validates(history, mask, kwargs, match):
    with pytest.raises(ValueError, match=match):
        WeightTrajectoryDisplay.from_history(history, mask, **kwargs)


def test_weight_map_colours_follow_weights_and_outlines_misclassified(weight_run):
    history, wrong, x = weight_run
    final = history[-1]
    disp = WeightMapDisplay.from_weights(x, final, wrong)
    disp.figure_.canvas.draw()
    viridis = matplotlib.colormaps["viridis"]
    np.testing.assert_allclose(disp.points_.get_facecolors(), viridis(final), atol=1 / 255)
    np.testing.assert_allclose(disp.points_.get_offsets(), x)
    assert (disp.norm_.vmin, disp.norm_.vmax) == (0.0, 1.0)
    np.testing.assert_allclose(disp.outlines_.get_offsets(), x[wrong])
    np.testing.assert_allclose(disp.outlines_.get_edgecolors(), [to_rgba(MISCLASSIFIED_COLOR)])
    assert len(disp.outlines_.get_facecolors()) == 0  # rings, not discs
    assert disp.colorbar_ is not None
    # darker means lower weight
    lum = disp.points_.get_facecolors()[:, :3] @ [0.2126, 0.7152, 0.0722]
    order = np.argsort(final)
    assert lum[order[0]] < lum[order[-1]]


def test_weight_map_validates(weight_run):
    history, wrong, x = weight_run
    with pytest.raises(ValueError, match="shape"):
        WeightMapDisplay.from_weights(x, history[-1, :-1], wrong)
    with pytest.raises(ValueError, match="finite"):
        WeightMapDisplay.from_weights(x, np.full(len(x), np.inf), wrong)
    with pytest.raises(ValueError, match="shape"):
        WeightMapDisplay.from_weights(x, history[-1], wrong[:-1])
    with pytest.raises(ValueError, match=r"\(n, 2\)"):
        WeightMapDisplay.from_weights(x[:, :1], history[-1], wrong)
