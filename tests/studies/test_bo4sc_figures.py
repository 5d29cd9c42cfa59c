"""The BO4SC study's paper figures (:mod:`selfcal.studies.bo4sc.figures`): one panel per
method with one shared colour bar (Fig. 1), histograms and reliability diagrams that match an
independent ECE and histogram (Fig. 2), trajectories beside the weight map of the same samples
(Fig. 3); bad input raises, figures save as PNG."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers.plots import fake_weight_run, three_blobs

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

from selfcal import Predictions  # noqa: E402
from selfcal.metrics import ece  # noqa: E402
from selfcal.plots import (  # noqa: E402
    ConfidenceRegionDisplay,
    WeightMapDisplay,
    WeightTrajectoryDisplay,
)
from selfcal.plots.regions import DEFAULT_LEVELS  # noqa: E402
from selfcal.studies.bo4sc.figures import (  # noqa: E402
    bo4sc_figure1,
    bo4sc_figure2,
    bo4sc_figure3,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def blobs():
    return three_blobs()


@pytest.fixture(scope="module")
def weight_run():
    return fake_weight_run()


def radial(points: np.ndarray) -> np.ndarray:
    """``1 / (1 + x^2 + 2 y^2)``: in (0, 1], different along the two axes."""
    return 1.0 / (1.0 + points[:, 0] ** 2 + 2.0 * points[:, 1] ** 2)


def ece_numpy(correct: np.ndarray, conf: np.ndarray, n_bins: int = 15) -> float:
    """Equal-width ECE with (lower, upper] bins, written out independently."""
    edges = np.linspace(0, 1, n_bins + 1)
    total = 0.0
    for lo, hi in itertools.pairwise(edges):
        in_bin = (conf > lo) & (conf <= hi)
        if in_bin.any():
            total += in_bin.mean() * abs(correct[in_bin].mean() - conf[in_bin].mean())
    return total


# ------------------------------------------------------------------------ figure 1
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


# ------------------------------------------------------------------------ figure 3
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
