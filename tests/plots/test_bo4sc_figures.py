"""BO4SC figures: the confidence grid is exactly the bounding box + margin and the function is
evaluated on exactly its points, colours are fixed by the levels (not the data), trajectories
and weight maps carry the right data and colours, bad input raises, figures save as PNG."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402

from selfcal import Predictions  # noqa: E402
from selfcal.metrics import ece  # noqa: E402
from selfcal.plots import (  # noqa: E402
    ConfidenceRegionDisplay,
    WeightMapDisplay,
    WeightTrajectoryDisplay,
    bo4sc_figure1,
    bo4sc_figure2,
    bo4sc_figure3,
    confidence_grid,
)
from selfcal.plots.regions import DEFAULT_LEVELS  # noqa: E402
from selfcal.plots.weights import CORRECT_COLOR, MISCLASSIFIED_COLOR  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def blobs():
    """Three Gaussian blobs in 2-D: points ``(90, 2)`` and labels ``(90,)``."""
    rng = np.random.default_rng(0)
    centres = np.array([[-3.0, 0.0], [3.0, 1.0], [0.0, 4.0]])
    y = np.repeat(np.arange(3), 30)
    return centres[y] + rng.normal(scale=1.0, size=(90, 2)), y


@pytest.fixture(scope="module")
def weight_run():
    """A fake BO4SC run: 40 samples, 12 outer iterations, weights in [0, 1]."""
    rng = np.random.default_rng(1)
    n, iters = 40, 12
    steps = rng.uniform(0.0, 0.08, size=(iters, n))
    history = np.clip(1.0 - np.vstack([np.zeros((1, n)), steps.cumsum(0)]), 0.0, 1.0)
    misclassified = rng.random(n) < 0.25
    misclassified[:2] = [True, False]
    return history, misclassified, rng.normal(size=(n, 2))


def radial(points: np.ndarray) -> np.ndarray:
    """``1 / (1 + x^2 + 2 y^2)``: in (0, 1], different along the two axes."""
    return 1.0 / (1.0 + points[:, 0] ** 2 + 2.0 * points[:, 1] ** 2)


def softmax_max(points: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Independent numpy top-label confidence of a linear softmax model."""
    z = points @ weight
    p = np.exp(z - z.max(1, keepdims=True))
    return (p / p.sum(1, keepdims=True)).max(1)


def ece_numpy(correct: np.ndarray, conf: np.ndarray, n_bins: int = 15) -> float:
    """Equal-width ECE with (lower, upper] bins, written out independently."""
    edges = np.linspace(0, 1, n_bins + 1)
    total = 0.0
    for lo, hi in itertools.pairwise(edges):
        in_bin = (conf > lo) & (conf <= hi)
        if in_bin.any():
            total += in_bin.mean() * abs(correct[in_bin].mean() - conf[in_bin].mean())
    return total


# ------------------------------------------------------------------------ confidence grid
def test_grid_spans_bounding_box_plus_margin(blobs):
    x, _ = blobs
    xx, yy, conf = confidence_grid(radial, x, grid_size=31, margin=0.7)
    assert xx.shape == yy.shape == conf.shape == (31, 31)
    np.testing.assert_allclose(xx[0], np.linspace(x[:, 0].min() - 0.7, x[:, 0].max() + 0.7, 31))
    np.testing.assert_allclose(yy[:, 0], np.linspace(x[:, 1].min() - 0.7, x[:, 1].max() + 0.7, 31))
    assert (xx == xx[0]).all() and (yy.T == yy[:, 0]).all()  # a regular "xy" mesh


def test_function_sees_exactly_the_grid_points_and_values_land_in_place():
    x = np.array([[-1.5, -0.5], [1.5, 0.5]])  # margin 0.5 -> xs = -2..2, ys = -1..1, 5 each
    seen = []

    def recording(points):
        seen.append(points.copy())
        return radial(points)

    xx, yy, conf = confidence_grid(recording, x, grid_size=5, margin=0.5)
    xs, ys = np.array([-2.0, -1, 0, 1, 2]), np.array([-1.0, -0.5, 0, 0.5, 1])
    expected_points = np.array([[a, b] for b in ys for a in xs])
    np.testing.assert_allclose(np.concatenate(seen), expected_points, atol=1e-12)
    # hand-computed values: conf[i, j] = f(xs[j], ys[i])
    assert conf[2, 2] == pytest.approx(1.0)
    assert conf[4, 0] == pytest.approx(1 / 7)  # f(-2, 1) = 1 / (1 + 4 + 2)
    assert conf[0, 3] == pytest.approx(1 / 4)  # f(1, -1) = 1 / (1 + 1 + 2)
    assert conf[3, 4] == pytest.approx(1 / 5.5)  # f(2, 0.5) = 1 / (1 + 4 + 0.5)


def test_chunked_evaluation_equals_one_call(blobs):
    x, _ = blobs
    calls = []

    def counting(points):
        calls.append(len(points))
        return radial(points)

    _, _, whole = confidence_grid(counting, x, grid_size=23, chunk_size=None)
    assert calls == [23 * 23]
    calls.clear()
    _, _, chunked = confidence_grid(counting, x, grid_size=23, chunk_size=50)
    assert len(calls) == math.ceil(23 * 23 / 50) and sum(calls) == 23 * 23
    assert max(calls) == 50
    np.testing.assert_array_equal(chunked, whole)


def test_torch_model_output_without_autograd(blobs):
    x, _ = blobs
    weight = np.array([[1.0, -0.5, 0.2], [0.3, 0.8, -1.0]])
    lin = torch.nn.Linear(2, 3, bias=False, dtype=torch.float64)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(weight.T))

    def model_confidence(points):
        assert not torch.is_grad_enabled()
        return torch.softmax(lin(torch.from_numpy(points)), dim=1).amax(1)

    xx, yy, conf = confidence_grid(model_confidence, x, grid_size=17)
    expected = softmax_max(np.column_stack([xx.ravel(), yy.ravel()]), weight)
    np.testing.assert_allclose(conf.ravel(), expected, rtol=1e-12)


@pytest.mark.parametrize(
    ("fn", "match"),
    [
        (lambda p: radial(p) + 0.5, r"\[0, 1\]"),
        (lambda p: -radial(p), r"\[0, 1\]"),
        (lambda p: np.full(len(p), np.nan), "NaN"),
        (lambda p: radial(p)[:, None], "shape"),
        (lambda p: radial(p)[:-1], "shape"),
    ],
)
def test_bad_confidence_function_output_raises(blobs, fn, match):
    with pytest.raises(ValueError, match=match):
        confidence_grid(fn, blobs[0], grid_size=5)


def test_rounding_slack_is_clipped_not_rejected(blobs):
    _, _, conf = confidence_grid(lambda p: np.full(len(p), 1 + 1e-9), blobs[0], grid_size=4)
    assert (conf == 1.0).all()
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        confidence_grid(lambda p: np.full(len(p), 1 + 1e-4), blobs[0], grid_size=4)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"x": np.zeros((5, 3))},
        {"x": np.zeros(5)},
        {"x": np.array([[0.0, np.nan]])},
        {"x": np.array([[1.0, 2.0]]), "margin": 0.0},  # a single point spans no area
        {"grid_size": 1},
        {"margin": -1.0},
        {"chunk_size": 0},
    ],
)
def test_bad_grid_arguments_raise(blobs, kwargs):
    args = {"x": blobs[0], "grid_size": 5, **kwargs}
    with pytest.raises(ValueError):
        confidence_grid(radial, args.pop("x"), **args)


# ------------------------------------------------------------------------ region display
def test_from_function_stores_grid_and_draws_classes(blobs):
    x, y = blobs
    disp = ConfidenceRegionDisplay.from_function(radial, x, y, grid_size=40, name="Standard")
    xx, yy, conf = confidence_grid(radial, x, grid_size=40)
    np.testing.assert_array_equal(disp.confidence, conf)
    np.testing.assert_array_equal(disp.xx, xx)
    assert disp.ax_.get_title() == "Standard"
    assert disp.colorbar_ is not None
    np.testing.assert_allclose(disp.contour_.levels, DEFAULT_LEVELS)
    tab10 = matplotlib.colormaps["tab10"].colors
    expected = np.array([to_rgba(tab10[k]) for k in y])
    np.testing.assert_allclose(disp.scatter_.get_facecolors(), expected)
    np.testing.assert_allclose(disp.scatter_.get_offsets(), x)


def test_band_colours_are_fixed_by_levels_not_data(blobs):
    x, y = blobs
    xx, yy, _ = confidence_grid(radial, x, grid_size=20)
    low = ConfidenceRegionDisplay.from_grid(xx, yy, np.full(xx.shape, 0.25), x, y)
    high = ConfidenceRegionDisplay.from_grid(
        xx, yy, np.linspace(0.85, 1.0, xx.size).reshape(xx.shape), x, y
    )
    low_colors, high_colors = low.contour_.get_facecolor(), high.contour_.get_facecolor()
    assert len(low_colors) == len(DEFAULT_LEVELS) - 1
    np.testing.assert_allclose(low_colors, high_colors)
    viridis = matplotlib.colormaps["viridis"]
    np.testing.assert_allclose(high_colors[-1], viridis(1.0))  # (0.9, 1] is yellow
    np.testing.assert_allclose(high_colors[0], viridis(0.0))


def test_bo4sc_figure1_one_panel_per_method_one_colourbar(blobs, tmp_path):
    x, y = blobs
    maps = {
        name: ConfidenceRegionDisplay.from_function(
            lambda p, s=scale: radial(p / s), x, y, grid_size=30, colorbar=False
        )
        for name, scale in (("Standard", 1.0), ("IsoReg", 2.0), ("BO4SC", 4.0))
    }
    fig = bo4sc_figure1(maps)
    panels = [d.ax_ for d in maps.values()]
    assert [ax.get_title() for ax in panels] == ["Standard", "IsoReg", "BO4SC"]
    assert all(ax.get_figure() is fig for ax in panels)
    assert len(fig.axes) == 4  # three maps + one shared colour bar
    for disp in maps.values():
        np.testing.assert_allclose(disp.contour_.levels, DEFAULT_LEVELS)
        np.testing.assert_allclose(
            disp.contour_.get_facecolor(), maps["Standard"].contour_.get_facecolor()
        )
    path = tmp_path / "fig1.png"
    fig.savefig(path, dpi=50)
    assert path.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize(
    ("xx", "yy", "conf", "match"),
    [
        (np.zeros((4, 5)), np.zeros((4, 4)), np.zeros((4, 5)), "equal 2-D shapes"),
        (np.zeros(5), np.zeros(5), np.zeros(5), "equal 2-D shapes"),
        (np.zeros((4, 5)), np.zeros((4, 5)), np.zeros((5, 4)), "shape"),
        (np.zeros((4, 5)), np.zeros((4, 5)), np.full((4, 5), 1.2), r"\[0, 1\]"),
    ],
)
def test_from_grid_validates(blobs, xx, yy, conf, match):
    x, y = blobs
    with pytest.raises(ValueError, match=match):
        ConfidenceRegionDisplay.from_grid(xx, yy, conf, x, y)


def test_region_labels_and_levels_are_validated(blobs):
    x, y = blobs
    xx, yy, conf = confidence_grid(radial, x, grid_size=5)
    with pytest.raises(ValueError, match="shape"):
        ConfidenceRegionDisplay.from_grid(xx, yy, conf, x, y[:-1])
    with pytest.raises(ValueError, match="integer"):
        ConfidenceRegionDisplay.from_grid(xx, yy, conf, x, y + 0.5)
    disp = ConfidenceRegionDisplay.from_grid(xx, yy, conf, x, y)
    with pytest.raises(ValueError, match="cover"):
        disp.plot(levels=(0.2, 0.5, 1.0))
    with pytest.raises(ValueError, match="increasing"):
        disp.plot(levels=(0.0, 0.5, 0.5, 1.0))


# ------------------------------------------------------------------------ figure 2
def test_bo4sc_figure2_matches_independent_ece_and_histogram(tmp_path):
    rng = np.random.default_rng(2)
    n = 500
    conf = rng.uniform(0.5, 1.0, n)
    correct = rng.random(n) < conf - 0.1
    logits = rng.normal(size=(n, 3)) * 2
    labels = rng.integers(0, 3, n)
    pred = Predictions.from_logits(logits, labels)
    fig = bo4sc_figure2({"Standard": pred, "BO4SC": (correct, conf)}, n_bins=15, hist_bins=20)
    axes = fig.axes
    assert len(axes) == 4
    hist_bo4sc, rel_standard, rel_bo4sc = axes[1], axes[2], axes[3]
    assert axes[0].get_title() == "Standard" and hist_bo4sc.get_title() == "BO4SC"
    assert f"ECE = {100 * ece_numpy(correct.astype(float), conf):.2f}%" in rel_bo4sc.get_title()
    assert f"ECE = {100 * ece(pred):.2f}%" in rel_standard.get_title()
    density, _ = np.histogram(conf, bins=np.linspace(0, 1, 21), density=True)
    heights = [patch.get_height() for patch in hist_bo4sc.patches]
    np.testing.assert_allclose(heights, density)
    accuracy_line, confidence_line = hist_bo4sc.lines[:2]
    assert accuracy_line.get_xdata()[0] == pytest.approx(correct.mean())
    assert confidence_line.get_xdata()[0] == pytest.approx(conf.mean())
    path = tmp_path / "fig2.png"
    fig.savefig(path, dpi=50)
    assert path.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize(
    "value",
    [
        (np.array([1, 0, 2]), np.array([0.5, 0.6, 0.7])),  # correctness not 0/1
        (np.array([1, 0, 1]), np.array([0.5, 1.6, 0.7])),  # confidence above 1
        (np.array([1, 0, 1]), np.array([0.5, 0.6])),  # lengths differ
        np.array([0.5, 0.6]),  # not a pair
    ],
)
def test_bo4sc_figure2_rejects_bad_pairs(value):
    with pytest.raises(ValueError):
        bo4sc_figure2({"m": value})


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


def test_bo4sc_figure3_saves_and_checks_consistency(weight_run, tmp_path):
    history, wrong, x = weight_run
    trajectory = WeightTrajectoryDisplay.from_history(history, wrong)
    weight_map = WeightMapDisplay.from_weights(x, history[-1], wrong)
    fig = bo4sc_figure3(trajectory, weight_map)
    assert trajectory.ax_.get_figure() is fig and weight_map.ax_.get_figure() is fig
    path = tmp_path / "fig3.png"
    fig.savefig(path, dpi=50)
    assert path.read_bytes()[:8] == PNG_MAGIC
    other = WeightMapDisplay.from_weights(x, history[-1], ~wrong)
    with pytest.raises(ValueError, match="misclassification mask"):
        bo4sc_figure3(trajectory, other)
    with pytest.raises(ValueError, match="WeightMapDisplay"):
        bo4sc_figure3(trajectory, trajectory)
