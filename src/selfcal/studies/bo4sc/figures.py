"""The BO4SC figures ([BO4SC] Figs. 1-3, and risk-coverage curves), one set per regime, drawn
from the first seed's selected runs: their stored parameters rebuild each model, so confidence
maps are computed here rather than stored for every candidate.

The paper's figures are composed of the general displays of :mod:`selfcal.plots`:
:func:`bo4sc_figure1` puts confidence maps side by side with one colour bar,
:func:`bo4sc_figure2` draws a confidence histogram over a reliability diagram per method from
``(correct, confidence)`` pairs -- needed because BO4SC's confidence is the Boltzmann value
``p_hat``, not the max of a probability vector -- and :func:`bo4sc_figure3` puts the weight
trajectories beside the final weight map.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from selfcal.experiments.selection import hyperparameters, regime
from selfcal.experiments.store import RunRecord
from selfcal.experiments.study import StudyResults
from selfcal.metrics.binning import confidence_bins
from selfcal.models.inference import predict_logits
from selfcal.plots import (
    ConfidenceHistogramDisplay,
    ConfidenceRegionDisplay,
    ReliabilityDiagramDisplay,
    WeightMapDisplay,
    WeightTrajectoryDisplay,
)
from selfcal.plots._base import to_numpy
from selfcal.plots.regions import DEFAULT_LEVELS, check_confidence
from selfcal.plots.save import new_figure
from selfcal.predictions import Predictions
from selfcal.studies.bo4sc.execute import (
    FIG3_DATASET,
    PARAMS,
    TRAIN_MISCLASSIFIED,
    WEIGHT_HISTORY,
)
from selfcal.studies.bo4sc.protocol import LABELS, REGIONS

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.figure import Figure

FIG1_DATASET, FIG2_DATASET = "blobs-1.7", "spiral-3.5"
FIGURE_METHODS = ("standard", "isoreg", "ts", "bo4sc")
REGION_MARGIN = 0.5
"""Confidence maps cover the raw training data's bounding box plus this margin."""


def figures(results: StudyResults) -> dict[str, Any]:
    out = {}
    for r in results.protocol.regimes:
        out[f"fig1_confidence_regions_{FIG1_DATASET}_{r.name}.png"] = figure1(results, r.name)
        out[f"fig2_histograms_reliability_{FIG2_DATASET}_{r.name}.png"] = figure2(results, r.name)
        out[f"fig3_weights_{FIG3_DATASET}_{r.name}.png"] = figure3(results, r.name)
        out[f"rejection_risk_coverage_{r.name}.png"] = rejection_figure(results, r.name)
    return out


# --------------------------------------------------------------------------- paper figures
def bo4sc_figure1(
    maps: Mapping[str, ConfidenceRegionDisplay],
    *,
    levels: Sequence[float] = DEFAULT_LEVELS,
    panel_size: float = 4.0,
) -> Figure:
    """[BO4SC] Fig. 1: one confidence map per method (titled by its key), side by side, all
    with the same ``levels`` and one shared colour bar. The figure is not registered with
    pyplot (save it with ``fig.savefig``)."""
    if not maps:
        raise ValueError("maps must name at least one ConfidenceRegionDisplay")
    for name, disp in maps.items():
        if not isinstance(disp, ConfidenceRegionDisplay):
            raise ValueError(f"maps[{name!r}] must be a ConfidenceRegionDisplay")
    fig = new_figure((panel_size * len(maps) + 1.0, panel_size))
    axes = fig.subplots(1, len(maps), squeeze=False)[0]
    for ax, (name, disp) in zip(axes, maps.items(), strict=True):
        disp.plot(ax=ax, levels=levels, title=name, colorbar=False)
    fig.colorbar(disp.contour_, ax=list(axes), label="Confidence")
    return fig


PredictionPair = tuple[Any, Any]
"""``(correct, confidence)``: ``(N,)`` booleans ``1[y_hat = y]`` and ``(N,)`` confidences."""


def correctness_and_confidence(
    value: Predictions | PredictionPair, name: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Float64 ``(correct, confidence)`` tensors from a labelled :class:`Predictions` (its
    top-label confidence) or a ``(correct, confidence)`` pair."""
    if isinstance(value, Predictions):
        return value.correct.double().cpu(), value.confidence.double().cpu()
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise ValueError(
            f"predictions[{name!r}] must be a Predictions object or a (correct, confidence) pair"
        )
    correct = to_numpy(value[0])
    if correct.ndim != 1 or correct.size < 1:
        raise ValueError(f"predictions[{name!r}]: correct must be 1-D and non-empty")
    if not np.isin(correct, (0.0, 1.0)).all():
        raise ValueError(f"predictions[{name!r}]: correct must hold only 0/1 (or booleans)")
    conf = check_confidence(value[1], correct.shape, f"predictions[{name!r}] confidence")
    return torch.from_numpy(correct), torch.from_numpy(conf)


def histogram_display(
    correct: torch.Tensor, confidence: torch.Tensor, n_bins: int
) -> ConfidenceHistogramDisplay:
    """An undrawn :class:`ConfidenceHistogramDisplay` of ``confidence`` (equal-width bins)."""
    stats = confidence_bins(confidence, correct, n_bins, "uniform")
    return ConfidenceHistogramDisplay(
        bin_edges=to_numpy(stats.edges),
        bin_count=to_numpy(stats.count),
        mean_accuracy=float(correct.mean()),
        mean_confidence=float(confidence.mean()),
    )


def bo4sc_figure2(
    predictions: Mapping[str, Predictions | PredictionPair],
    *,
    n_bins: int = 15,
    hist_bins: int = 20,
    panel_size: float = 4.0,
) -> Figure:
    """[BO4SC] Fig. 2: for each method (a column, titled by its key) the confidence
    histogram (top; dashed mean accuracy and mean confidence) and the reliability diagram
    with ``n_bins`` equal-width bins (bottom; over-/under-confidence gaps in orange/red).

    Each value is a labelled :class:`Predictions` (top-label confidence) or a
    ``(correct, confidence)`` pair -- use the pair for BO4SC's Boltzmann confidence
    ``p_hat`` and for an isotonic map of the max-prob. ``ECE`` in the titles is computed from
    the same bins as the diagram.
    """
    if not predictions:
        raise ValueError("predictions must name at least one method")
    pairs = {name: correctness_and_confidence(v, name) for name, v in predictions.items()}
    fig = new_figure((panel_size * len(pairs), 2.4 * panel_size))
    axes = fig.subplots(2, len(pairs), squeeze=False, height_ratios=(3, 4))
    for col, (name, (correct, conf)) in enumerate(pairs.items()):
        histogram_display(correct, conf, hist_bins).plot(ax=axes[0, col], title=name)
        ReliabilityDiagramDisplay.from_bins(
            confidence_bins(conf, correct, n_bins, "uniform"), ax=axes[1, col]
        )
    return fig


def bo4sc_figure3(
    trajectory: WeightTrajectoryDisplay,
    weight_map: WeightMapDisplay,
    *,
    panel_size: float = 4.0,
) -> Figure:
    """[BO4SC] Fig. 3: weight trajectories (left) and final weight map (right) of the same
    training run -- the two must describe the same ``n`` samples with the same
    misclassification mask. The figure is not registered with pyplot."""
    if not isinstance(trajectory, WeightTrajectoryDisplay):
        raise ValueError("trajectory must be a WeightTrajectoryDisplay")
    if not isinstance(weight_map, WeightMapDisplay):
        raise ValueError("weight_map must be a WeightMapDisplay")
    if not np.array_equal(trajectory.misclassified, weight_map.misclassified):
        raise ValueError(
            "trajectory and weight_map must share the misclassification mask (same samples, "
            f"got n = {len(trajectory.misclassified)} and {len(weight_map.misclassified)})"
        )
    fig = new_figure((2.4 * panel_size + 1.0, panel_size))
    left, right = fig.subplots(1, 2, width_ratios=(1.3, 1.0))
    trajectory.plot(ax=left)
    weight_map.plot(ax=right)
    return fig


# --------------------------------------------------------------------------- from the runs
class Rebuilt:
    """A stored run's model on its seed's data, and the method's confidence function."""

    def __init__(self, results: StudyResults, run: RunRecord) -> None:
        from selfcal.data import load_dataset
        from selfcal.models import build_model

        self.run = run
        self.data = load_dataset(run.spec.dataset, run.spec.seed)
        hidden = results.protocol.regime(regime(run)).hidden
        self.model = build_model(
            "mlp",
            seed=0,
            n_features=self.data.n_features,
            n_classes=self.data.n_classes,
            hidden=hidden,
        )
        flat = torch.from_numpy(results.artefact(run, PARAMS))
        torch.nn.utils.vector_to_parameters(flat, self.model.parameters())
        self.iso = None
        if run.spec.method == "isoreg":  # refitted: the same model on the same validation set
            from selfcal.posthoc import IsotonicCalibration

            z = predict_logits(self.model, self.data.val.x).double()
            self.iso = IsotonicCalibration(mix=0).fit(logits=z, labels=self.data.val.y)

    def confidence(self, x: torch.Tensor) -> torch.Tensor:
        """The method's top-label confidence on model inputs ``x`` (float64)."""
        from selfcal.bilevel.bo4sc import boltzmann_confidence

        z = predict_logits(self.model, x.float()).double()
        method = self.run.spec.method
        if method == "isoreg":
            assert self.iso is not None
            return torch.as_tensor(self.iso.predict_confidence(logits=z))
        if method == "ts":
            z = z / self.run.metrics["temperature"]
        probs = torch.softmax(z, 1)
        if method == "bo4sc":
            beta = float(hyperparameters(self.run)["beta"])
            return boltzmann_confidence(probs, beta).clamp(0, 1)
        return probs.amax(1)

    def prediction(self) -> Any:
        """Test predictions judged by the method's confidence."""
        from selfcal import Predictions

        z = predict_logits(self.model, self.data.test.x).double()
        pred = Predictions.from_logits(z, self.data.test.y)
        return pred.with_confidence(self.confidence(self.data.test.x))


def _rebuilt(results: StudyResults, dataset: str, method: str, regime_name: str) -> Rebuilt | None:
    run = results.run(dataset, method, results.protocol.seeds[0], regime_name)
    return None if run is None or PARAMS not in run.artefacts else Rebuilt(results, run)


def figure1(results: StudyResults, regime_name: str) -> Any:
    """Fig. 1: confidence maps of every method on Blobs 1.7 (first seed)."""
    from selfcal.plots.regions import grid_axes

    if FIG1_DATASET not in REGIONS or FIG1_DATASET not in results.datasets:
        return None
    maps = {}
    for method in FIGURE_METHODS:
        rebuilt = _rebuilt(results, FIG1_DATASET, method, regime_name)
        if rebuilt is None:
            return None
        raw = rebuilt.data.raw("train").numpy()
        ax, ay = grid_axes(raw, results.protocol.grid_size, REGION_MARGIN)
        xx, yy = np.meshgrid(ax, ay)
        points = torch.from_numpy(np.stack([xx.ravel(), yy.ravel()], 1))
        conf = rebuilt.confidence(rebuilt.data.standardize(points)).numpy().reshape(xx.shape)
        maps[f"{LABELS[method]} ({regime_name})"] = ConfidenceRegionDisplay(
            xx=xx,
            yy=yy,
            confidence=np.clip(conf, 0, 1),
            x=rebuilt.data.raw("test").numpy(),
            y=rebuilt.data.test.y.numpy(),
            name=LABELS[method],
        )
    return bo4sc_figure1(maps)


def figure2(results: StudyResults, regime_name: str) -> Any:
    """Fig. 2: confidence histograms and reliability diagrams on Spiral 3.5 (first seed)."""
    preds = {}
    for method in FIGURE_METHODS:
        rebuilt = _rebuilt(results, FIG2_DATASET, method, regime_name)
        if rebuilt is None:
            return None
        preds[f"{LABELS[method]} ({regime_name})"] = rebuilt.prediction()
    return bo4sc_figure2(preds, n_bins=results.protocol.n_bins)


def figure3(results: StudyResults, regime_name: str) -> Any:
    """Fig. 3: BO4SC's weight trajectories and final weights on Blobs 1.7 (first seed)."""
    from selfcal.data import load_dataset

    run = results.run(FIG3_DATASET, "bo4sc", results.protocol.seeds[0], regime_name)
    if run is None or WEIGHT_HISTORY not in run.artefacts:
        return None
    history = results.artefact(run, WEIGHT_HISTORY).astype(np.float64)
    wrong = results.artefact(run, TRAIN_MISCLASSIFIED)
    data = load_dataset(FIG3_DATASET, run.spec.seed)
    return bo4sc_figure3(
        WeightTrajectoryDisplay(
            history=history, misclassified=wrong, epoch_unit=int(hyperparameters(run)["T"])
        ),
        WeightMapDisplay(x=data.raw("train").numpy(), weights=history[-1], misclassified=wrong),
    )


def rejection_figure(results: StudyResults, regime_name: str) -> Any:
    """Risk-coverage curves of the first seed, one panel per dataset."""
    from selfcal.plots import RiskCoverageDisplay

    datasets = results.datasets
    fig = new_figure((4.0 * len(datasets), 3.6))
    axes = np.atleast_1d(fig.subplots(1, len(datasets)))
    for ax, d in zip(axes, datasets):
        for method in FIGURE_METHODS:
            rebuilt = _rebuilt(results, d, method, regime_name)
            if rebuilt is not None:
                RiskCoverageDisplay.from_predictions(
                    rebuilt.prediction(), name=LABELS[method], ax=ax, title=f"{d} ({regime_name})"
                )
    return fig
