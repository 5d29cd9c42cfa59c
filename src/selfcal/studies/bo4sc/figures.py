"""The BO4SC figures ([BO4SC] Figs. 1-3, and risk-coverage curves), one set per regime, drawn
from the first seed's selected runs: their stored parameters rebuild each model, so confidence
maps are computed here rather than stored for every candidate."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from selfcal.experiments.selection import hyperparameters, regime
from selfcal.experiments.store import RunRecord
from selfcal.experiments.study import StudyResults
from selfcal.plots.save import new_figure
from selfcal.studies.bo4sc.execute import (
    FIG3_DATASET,
    PARAMS,
    TRAIN_MISCLASSIFIED,
    WEIGHT_HISTORY,
)
from selfcal.studies.bo4sc.protocol import LABELS, REGIONS

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

            with torch.no_grad():
                z = self.model(self.data.val.x).double()
            self.iso = IsotonicCalibration().fit(logits=z, labels=self.data.val.y)

    def confidence(self, x: torch.Tensor) -> torch.Tensor:
        """The method's top-label confidence on model inputs ``x`` (float64)."""
        from selfcal.bilevel.bo4sc import boltzmann_confidence

        with torch.no_grad():
            z = self.model(x.float()).double()
        method = self.run.spec.method
        if method == "isoreg":
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

        with torch.no_grad():
            z = self.model(self.data.test.x).double()
        pred = Predictions.from_logits(z, self.data.test.y)
        return pred.with_confidence(self.confidence(self.data.test.x))


def _rebuilt(results: StudyResults, dataset: str, method: str, regime_name: str) -> Rebuilt | None:
    run = results.run(dataset, method, results.protocol.seeds[0], regime_name)
    return None if run is None or PARAMS not in run.artefacts else Rebuilt(results, run)


def figure1(results: StudyResults, regime_name: str) -> Any:
    """Fig. 1: confidence maps of every method on Blobs 1.7 (first seed)."""
    from selfcal.plots import ConfidenceRegionDisplay, bo4sc_figure1
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
    from selfcal.plots import bo4sc_figure2

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
    from selfcal.plots import WeightMapDisplay, WeightTrajectoryDisplay, bo4sc_figure3

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
