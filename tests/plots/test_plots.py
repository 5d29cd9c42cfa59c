"""Calibration figures: the drawn data equals selfcal's metrics, colours follow the gap sign,
files are written, and importing selfcal.plots does not import matplotlib."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402

from selfcal import Predictions  # noqa: E402
from selfcal.metrics import (  # noqa: E402
    accuracy,
    adaece,
    ece,
    mce,
    risk_coverage_curve,
)
from selfcal.metrics.binning import top_label_bins  # noqa: E402
from selfcal.metrics.bootstrap import percentile_interval, resample_counts  # noqa: E402
from selfcal.plots import (  # noqa: E402
    BinSweepDisplay,
    ConfidenceHistogramDisplay,
    ReliabilityDiagramDisplay,
    RiskCoverageDisplay,
    save_figures,
)
from selfcal.plots._base import (  # noqa: E402
    MEAN_ACCURACY_COLOR,
    MEAN_CONFIDENCE_COLOR,
    OVERCONFIDENCE_COLOR,
    UNDERCONFIDENCE_COLOR,
)


@pytest.fixture(scope="module")
def data():
    """Noisy 5-class logits with labels drawn from a sharper/flatter model than predicted."""
    rng = np.random.default_rng(0)
    n, c = 3000, 5
    z = rng.normal(size=(n, c))
    z[np.arange(n), rng.integers(0, c, n)] += 2.0
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    u = rng.random((n, 1))
    y = (p.cumsum(1) < u).sum(1).clip(max=c - 1)
    return y, z


def fixed_confidence(conf: float, acc: float, n: int = 100):
    """Binary probabilities with top-label confidence ``conf`` everywhere and a fraction
    ``acc`` of the predictions (class 1) correct."""
    probs = np.full(n, conf)
    labels = (np.arange(n) < round(acc * n)).astype(int)
    return labels, probs


def hexes(container) -> set[str]:
    return {to_hex(patch.get_facecolor()) for patch in container.patches}


# ------------------------------------------------------------------------ import contract
def test_import_does_not_import_matplotlib():
    code = (
        "import sys, selfcal.plots\n"
        "assert 'matplotlib' not in sys.modules, 'matplotlib imported eagerly'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------ reliability
def test_reliability_bars_equal_top_label_bins(data):
    y, z = data
    disp = ReliabilityDiagramDisplay.from_predictions(labels=y, logits=z, n_bins=15)
    stats = top_label_bins(Predictions.from_logits(z, y), n_bins=15)
    shown = stats.count.numpy() > 0
    heights = [bar.get_height() for bar in disp.bars_.patches]
    lefts = [bar.get_x() for bar in disp.bars_.patches]
    np.testing.assert_array_equal(heights, stats.accuracy.numpy()[shown])
    np.testing.assert_array_equal(lefts, stats.edges.numpy()[:-1][shown])
    np.testing.assert_array_equal(disp.bin_count, stats.count.numpy())
    assert len(disp.bars_.patches) == int(shown.sum())  # empty bins drawn as nothing
    assert disp.figure_ is disp.ax_.figure


def test_reliability_title_carries_ece_and_mce(data):
    y, z = data
    disp = ReliabilityDiagramDisplay.from_predictions(
        labels=y, logits=z, n_bins=10, title="Model A"
    )
    assert disp.ece == ece(labels=y, logits=z, n_bins=10)
    assert disp.mce == mce(labels=y, logits=z, n_bins=10)
    title = disp.ax_.get_title()
    assert title.startswith("Model A\n")
    assert f"ECE = {100 * disp.ece:.2f}%" in title
    assert f"MCE = {100 * disp.mce:.2f}%" in title


def test_reliability_quantile_bins_report_adaece(data):
    y, z = data
    disp = ReliabilityDiagramDisplay.from_predictions(
        labels=y, logits=z, n_bins=10, strategy="quantile"
    )
    assert disp.ece == pytest.approx(adaece(labels=y, logits=z, n_bins=10), abs=1e-15)
    assert "AdaECE" in disp.ax_.get_title()
    assert np.all(disp.bin_count > 0)


@pytest.mark.parametrize(
    ("conf", "acc", "key", "color"),
    [(0.9, 0.5, "over", OVERCONFIDENCE_COLOR), (0.6, 1.0, "under", UNDERCONFIDENCE_COLOR)],
)
def test_gap_colour_follows_sign(conf, acc, key, color):
    labels, probs = fixed_confidence(conf, acc)
    disp = ReliabilityDiagramDisplay.from_predictions(labels=labels, probs=probs)
    assert set(disp.gaps_) == {key}
    (gap,) = disp.gaps_[key].patches
    assert to_hex(gap.get_facecolor()) == to_hex(color)
    assert gap.get_y() == pytest.approx(min(conf, acc))
    assert gap.get_height() == pytest.approx(abs(conf - acc))
    legend = [t.get_text() for t in disp.ax_.get_legend().get_texts()]
    assert f"Gap: {key}-confident" in legend


def test_mixed_sample_draws_both_colours(data):
    y, z = data
    disp = ReliabilityDiagramDisplay.from_predictions(labels=y, logits=z, n_bins=15)
    acc, conf = disp.bin_accuracy, disp.bin_confidence
    n_over = int(np.sum(acc < conf))
    n_under = int(np.sum(acc > conf))
    drawn = {k: len(v.patches) for k, v in disp.gaps_.items()}
    assert drawn.get("over", 0) == n_over and drawn.get("under", 0) == n_under
    for key, color in (("over", OVERCONFIDENCE_COLOR), ("under", UNDERCONFIDENCE_COLOR)):
        if key in disp.gaps_:
            assert hexes(disp.gaps_[key]) == {to_hex(color)}


def test_error_bars_bracket_bin_accuracy(data):
    y, z = data
    disp = ReliabilityDiagramDisplay.from_predictions(
        labels=y, logits=z, n_bins=10, error_bars=True, n_resamples=300, seed=3
    )
    shown = disp.bin_count > 0
    acc, low, high = disp.bin_accuracy[shown], disp.low[shown], disp.high[shown]
    assert np.all(np.isfinite(low)) and np.all(np.isfinite(high))
    assert np.all(low <= acc) and np.all(acc <= high)
    assert np.all(high - low > 0)
    assert disp.errorbar_ is not None
    assert np.all(np.isnan(disp.low[~shown]))


def test_error_bars_equal_per_resample_loop(data):
    """The vectorised intervals equal binning each resample on its own."""
    y, z = data
    pred = Predictions.from_logits(z, y)
    n_resamples = 40
    disp = ReliabilityDiagramDisplay.from_predictions(
        pred, n_bins=8, error_bars=True, n_resamples=n_resamples, confidence=0.9, seed=7
    )
    gen = torch.Generator().manual_seed(7)
    weights = resample_counts(pred.n_samples, n_resamples, gen)
    rows = [top_label_bins(pred, 8, "uniform", w.unsqueeze(0)).accuracy[0] for w in weights]
    low, high = percentile_interval(torch.stack(rows), 0.9)
    np.testing.assert_allclose(disp.low, low.numpy(), rtol=1e-12)
    np.testing.assert_allclose(disp.high, high.numpy(), rtol=1e-12)
    legend = [t.get_text() for t in disp.ax_.get_legend().get_texts()]
    assert "90% bootstrap interval" in legend


def test_error_bars_are_seeded(data):
    y, z = data
    kw = dict(labels=y, logits=z, error_bars=True, n_resamples=50)
    a = ReliabilityDiagramDisplay.from_predictions(seed=1, **kw)
    b = ReliabilityDiagramDisplay.from_predictions(seed=1, **kw)
    np.testing.assert_array_equal(a.low, b.low)
    np.testing.assert_array_equal(a.high, b.high)


def test_from_bins_matches_from_predictions_and_rejects_batches(data):
    y, z = data
    pred = Predictions.from_logits(z, y)
    stats = top_label_bins(pred, n_bins=12)
    a = ReliabilityDiagramDisplay.from_bins(stats)
    b = ReliabilityDiagramDisplay.from_predictions(pred, n_bins=12)
    np.testing.assert_array_equal(a.bin_accuracy, b.bin_accuracy)
    assert a.ece == b.ece and a.errorbar_ is None
    ones = torch.ones(2, pred.n_samples, dtype=torch.float64)
    batched = top_label_bins(pred, 12, "uniform", ones)
    with pytest.raises(ValueError, match="batched"):
        ReliabilityDiagramDisplay.from_bins(batched)


def test_reliability_reuses_axes_and_accepts_torch(data):
    y, z = data
    fig, ax = plt.subplots()
    disp = ReliabilityDiagramDisplay.from_predictions(
        labels=torch.as_tensor(y), logits=torch.as_tensor(z), ax=ax
    )
    assert disp.ax_ is ax and disp.figure_ is fig
    assert disp.ece == pytest.approx(ece(labels=y, logits=z), abs=1e-15)


def test_labels_are_required(data):
    _, z = data
    with pytest.raises(ValueError, match="labels"):
        ReliabilityDiagramDisplay.from_predictions(logits=z)


# ------------------------------------------------------------------------ histogram
def test_confidence_histogram(data):
    y, z = data
    disp = ConfidenceHistogramDisplay.from_predictions(labels=y, logits=z, n_bins=20)
    pred = Predictions.from_logits(z, y)
    widths = np.diff(disp.bin_edges)
    assert np.sum(disp.density * widths) == pytest.approx(1.0)
    np.testing.assert_array_equal(disp.bin_count, top_label_bins(pred, 20).count.numpy())
    np.testing.assert_array_equal([b.get_height() for b in disp.bars_.patches], disp.density)
    assert disp.mean_accuracy == pytest.approx(accuracy(labels=y, logits=z))
    assert disp.mean_confidence == pytest.approx(float(pred.confidence.mean()))
    assert disp.accuracy_line_.get_xdata()[0] == disp.mean_accuracy
    assert disp.confidence_line_.get_xdata()[0] == disp.mean_confidence
    assert to_hex(disp.accuracy_line_.get_color()) == to_hex(MEAN_ACCURACY_COLOR)
    assert to_hex(disp.confidence_line_.get_color()) == to_hex(MEAN_CONFIDENCE_COLOR)
    assert disp.accuracy_line_.get_linestyle() == "--"
    labels = [t.get_text() for t in disp.ax_.get_legend().get_texts()]
    assert any(t.startswith("Accuracy") for t in labels)
    assert any(t.startswith("Avg. confidence") for t in labels)


# ------------------------------------------------------------------------ bin sweep
def test_bin_sweep_equals_ece_and_mce(data):
    y, z = data
    counts = (10, 20, 50, 100, 200, 500, 1000)
    disp = BinSweepDisplay.from_predictions(labels=y, logits=z, n_bins=counts)
    np.testing.assert_array_equal(disp.n_bins, counts)
    np.testing.assert_array_equal(disp.ece, [ece(labels=y, logits=z, n_bins=k) for k in counts])
    np.testing.assert_array_equal(disp.mce, [mce(labels=y, logits=z, n_bins=k) for k in counts])
    np.testing.assert_allclose(disp.ece_line_.get_ydata(), 100 * disp.ece)
    np.testing.assert_allclose(disp.mce_line_.get_ydata(), 100 * disp.mce)
    assert disp.ax_.get_xscale() == "log"
    assert disp.ax_.get_ylim()[1] >= 100 * disp.mce.max()


def test_bin_sweep_dict_shares_axes(data):
    y, z = data
    sets = {
        "CE": Predictions.from_logits(z, y),
        "sharp": Predictions.from_logits(3 * z, y),
    }
    disps = BinSweepDisplay.from_predictions_dict(sets, n_bins=(10, 100))
    assert list(disps) == ["CE", "sharp"]
    ax = disps["CE"].ax_
    assert disps["sharp"].ax_ is ax and len(ax.get_lines()) == 4
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["CE: ECE", "CE: MCE", "sharp: ECE", "sharp: MCE"]
    top = max(100 * d.mce.max() for d in disps.values())
    assert ax.get_ylim()[1] >= top  # later curves stay in view
    assert disps["sharp"].ece[0] == ece(sets["sharp"], n_bins=10)


# ------------------------------------------------------------------------ risk-coverage
def test_risk_coverage_equals_metric_and_overlays(data):
    y, z = data
    pred = Predictions.from_logits(z, y)
    curve = risk_coverage_curve(pred)
    disp = RiskCoverageDisplay.from_predictions(pred, name="CE")
    np.testing.assert_array_equal(disp.coverage, curve.coverage.numpy())
    np.testing.assert_array_equal(disp.risk, curve.risk.numpy())
    assert disp.aurc == curve.aurc
    np.testing.assert_array_equal(disp.line_.get_ydata(), disp.risk)
    other = RiskCoverageDisplay.from_predictions(labels=y, logits=0.2 * z, ax=disp.ax_, name="flat")
    assert other.ax_ is disp.ax_ and len(disp.ax_.get_lines()) == 2
    labels = [t.get_text() for t in disp.ax_.get_legend().get_texts()]
    assert labels[-1] == f"flat (AURC = {other.aurc:.4f})"
    assert other.aurc == pytest.approx(float(risk_coverage_curve(labels=y, logits=0.2 * z).aurc))


def test_risk_coverage_dict_rejects_arrays(data):
    y, z = data
    with pytest.raises(ValueError, match="Predictions"):
        RiskCoverageDisplay.from_predictions_dict({"raw": z})


# ------------------------------------------------------------------------ files
def test_save_figures_writes_four_pngs(data, tmp_path):
    y, z = data
    before = plt.get_fignums()
    paths = save_figures(Predictions.from_logits(z, y), tmp_path / "figs", prefix="run1_")
    names = [p.name for p in paths]
    assert names == [
        "run1_reliability.png",
        "run1_confidence_hist.png",
        "run1_ece_vs_bins.png",
        "run1_risk_coverage.png",
    ]
    for path in paths:
        data_bytes = path.read_bytes()
        assert data_bytes[:8] == b"\x89PNG\r\n\x1a\n" and len(data_bytes) > 5000
    assert plt.get_fignums() == before  # nothing left open
