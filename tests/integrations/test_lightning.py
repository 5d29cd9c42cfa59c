"""The Lightning callback (:mod:`selfcal.integrations.lightning`): a short CPU training run on
Blobs 1.7 whose logged values equal selfcal's metrics on the validation logits of the model at
each epoch, recomputed here from snapshots of its weights, and whose fitted temperature equals
``TemperatureScaling().fit`` on the final validation logits."""

from __future__ import annotations

import copy
import csv
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import selfcal.metrics as M
import selfcal.recalibration as R
from selfcal import Predictions
from selfcal.data import load_dataset
from selfcal.posthoc import TemperatureScaling

pl = pytest.importorskip("lightning.pytorch")
pytest.importorskip("torchmetrics")
from lightning.pytorch.loggers import CSVLogger  # noqa: E402

from selfcal.integrations.lightning import (  # noqa: E402
    DEFAULT_METRICS,
    METRICS,
    CalibrationCallback,
)
from selfcal.integrations.torchmetrics import AdaECE  # noqa: E402

EPOCHS = 3
BATCH = 64


class TinyMLP(pl.LightningModule):
    """Two features -> 16 hidden units -> classes; keeps a copy of its weights at the end of
    every validation epoch (sanity check excluded)."""

    def __init__(self, n_classes: int, returns: str = "logits") -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, n_classes))
        self.returns = returns
        self.snapshots: list[dict[str, torch.Tensor]] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        if self.returns == "logits":
            return {"logits": logits, "labels": y}
        if self.returns == "probs":
            return {"probs": torch.softmax(logits, 1), "labels": y}
        return logits  # the wrong thing

    def on_validation_epoch_end(self) -> None:
        if not self.trainer.sanity_checking:
            self.snapshots.append(copy.deepcopy(self.net.state_dict()))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.05)


def train(tmp_path: Path, callback: CalibrationCallback, returns: str = "logits"):
    pl.seed_everything(0, verbose=False)
    data = load_dataset("blobs-1.7", 0)
    model = TinyMLP(data.n_classes, returns)
    train_loader = DataLoader(TensorDataset(data.train.x, data.train.y), BATCH, shuffle=True)
    val_loader = DataLoader(TensorDataset(data.val.x, data.val.y), BATCH)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=EPOCHS,
        logger=CSVLogger(tmp_path),
        callbacks=[callback],
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        log_every_n_steps=1,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's tips about workers and log intervals
        trainer.fit(model, train_loader, val_loader)
    return trainer, model, data, val_loader


def validation_logits(model: TinyMLP, state: dict, loader: DataLoader) -> tuple:
    """The validation logits of the weights ``state``, batch by batch as in validation."""
    net = copy.deepcopy(model.net)
    net.load_state_dict(state)
    with torch.no_grad():
        parts = [(net(x), y) for x, y in loader]
    return torch.cat([z for z, _ in parts]), torch.cat([y for _, y in parts])


def logged_rows(trainer) -> list[dict[str, str]]:
    with open(Path(trainer.logger.log_dir) / "metrics.csv", newline="") as file:
        return list(csv.DictReader(file))


def expected_metrics(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    pred = Predictions.from_logits(logits, labels)
    return {
        "val_ece": float(M.ece(pred)),
        "val_mce": float(M.mce(pred)),
        "val_adaece": float(M.adaece(pred)),
        "val_classwise_ece": float(M.classwise_ece(pred)),
        "val_brier": float(M.brier(pred)),
        "val_nll": float(M.nll(pred)),
        "val_refinement_loss": float(R.refinement_loss(pred)),
        "val_calibration_loss": float(R.calibration_loss(pred)),
    }


def test_logged_values_are_selfcal_metrics_of_each_epoch(tmp_path):
    callback = CalibrationCallback(METRICS, fit_temperature=True)  # the refinement pair too
    trainer, model, data, val_loader = train(tmp_path, callback)
    rows = [row for row in logged_rows(trainer) if row.get("val_ece")]
    assert len(rows) == EPOCHS == len(model.snapshots) == len(callback.history)  # no sanity run
    for epoch, (row, state) in enumerate(zip(rows, model.snapshots)):
        logits, labels = validation_logits(model, state, val_loader)
        assert torch.equal(labels, data.val.y)
        expected = expected_metrics(logits, labels)
        assert int(row["epoch"]) == epoch
        for key, value in expected.items():
            assert float(row[key]) == pytest.approx(value, abs=1e-12, rel=1e-12), (epoch, key)
            assert callback.history[epoch][key] == pytest.approx(value, abs=1e-12, rel=1e-12)
    # the values differ between epochs: the model did change
    assert len({row["val_nll"] for row in rows}) == EPOCHS
    assert set(trainer.callback_metrics) >= set(expected)

    # temperature scaling on the final validation logits
    logits, labels = validation_logits(model, model.net.state_dict(), val_loader)
    reference = TemperatureScaling().fit(logits=logits.double(), labels=labels)
    ts = callback.temperature_scaling
    assert ts is not None
    assert ts.temperature_ == reference.temperature_  # the same float64 logits
    float32_fit = TemperatureScaling().fit(logits=logits, labels=labels).temperature_
    assert ts.temperature_ == pytest.approx(float32_fit, rel=1e-9)
    after = M.ece(probs=reference.predict_proba(logits=logits.double()), labels=labels)
    assert callback.ts_metrics["val_ts_ece"] == pytest.approx(float(after), abs=1e-12)
    final = [row for row in logged_rows(trainer) if row.get("val_ts_ece")]
    assert len(final) == 1
    assert float(final[0]["val_ts_temperature"]) == ts.temperature_
    assert float(final[0]["val_ts_ece"]) == callback.ts_metrics["val_ts_ece"]


def test_probabilities_and_a_subset_of_metrics(tmp_path):
    names = ["ece", "adaece", "nll"]
    callback = CalibrationCallback(names, n_bins=10, prefix="cal/", adaece_mode="sketch")
    trainer, model, _, val_loader = train(tmp_path, callback, returns="probs")
    logits, labels = validation_logits(model, model.snapshots[-1], val_loader)
    probs = torch.softmax(logits, 1)
    last = callback.history[-1]
    assert set(last) == {"epoch", "cal/ece", "cal/adaece", "cal/nll"}
    assert last["cal/ece"] == pytest.approx(float(M.ece(probs=probs, labels=labels, n_bins=10)))
    assert last["cal/nll"] == pytest.approx(float(M.nll(probs=probs, labels=labels)), rel=1e-12)
    sketch = AdaECE(10, mode="sketch")
    sketch.update(probs=probs, labels=labels)
    assert last["cal/adaece"] == pytest.approx(float(sketch.compute()), abs=1e-12)
    exact = float(M.adaece(probs=probs, labels=labels, n_bins=10))
    assert abs(last["cal/adaece"] - exact) <= float(sketch.error_bound()) + 1e-12
    assert callback.temperature_scaling is None


def test_a_validation_step_without_the_mapping_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match='return \\{"logits": logits, "labels": labels\\}'):
        train(tmp_path, CalibrationCallback(), returns="tensor")


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="metrics must be one of"):
        CalibrationCallback(["ece", "auroc"])
    with pytest.raises(ValueError, match="metrics must be a non-empty sequence"):
        CalibrationCallback("ece")
    with pytest.raises(ValueError, match="n_bins must be an integer >= 1"):
        CalibrationCallback(n_bins=0)
    with pytest.raises(ValueError, match="adaece_mode must be one of"):
        CalibrationCallback(adaece_mode="fast")
    with pytest.raises(ValueError, match="num_classes must be None or an integer >= 2"):
        CalibrationCallback(num_classes=1)


def test_the_refinement_pair_is_logged_only_when_named():
    assert CalibrationCallback().metric_names == DEFAULT_METRICS
    assert not {"refinement_loss", "calibration_loss"} & set(DEFAULT_METRICS)
    assert {"refinement_loss", "calibration_loss"} <= set(METRICS)
    old_names = CalibrationCallback(metrics=("ece", "nll_refinement", "nll_calibration"))
    assert old_names.metric_names == ("ece", "refinement_loss", "calibration_loss")
