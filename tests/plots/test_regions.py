"""Confidence regions: the grid is exactly the bounding box + margin and the function is
evaluated on exactly its points, colours are fixed by the levels (not the data), bad input
raises."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers.plots import three_blobs

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
from matplotlib.colors import to_rgba  # noqa: E402

from selfcal.plots import ConfidenceRegionDisplay, confidence_grid  # noqa: E402
from selfcal.plots.regions import DEFAULT_LEVELS  # noqa: E402


@pytest.fixture(scope="module")
def blobs():
    return three_blobs()


def radial(points: np.ndarray) -> np.ndarray:
    """``1 / (1 + x^2 + 2 y^2)``: in (0, 1], different along the two axes."""
    return 1.0 / (1.0 + points[:, 0] ** 2 + 2.0 * points[:, 1] ** 2)


def softmax_max(points: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Independent numpy top-label confidence of a linear softmax model."""
    z = points @ weight
    p = np.exp(z - z.max(1, keepdims=True))
    return (p / p.sum(1, keepdims=True)).max(1)


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
    with pytest.raises(ValueError, match="one label per row"):
        ConfidenceRegionDisplay.from_grid(xx, yy, conf, x, y[:-1])
    with pytest.raises(ValueError, match="integer"):
        ConfidenceRegionDisplay.from_grid(xx, yy, conf, x, y + 0.5)
    disp = ConfidenceRegionDisplay.from_grid(xx, yy, conf, x, y)
    with pytest.raises(ValueError, match="cover"):
        disp.plot(levels=(0.2, 0.5, 1.0))
    with pytest.raises(ValueError, match="increasing"):
        disp.plot(levels=(0.0, 0.5, 0.5, 1.0))
