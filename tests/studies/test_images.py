"""What the image studies share: regimes, CIFAR rows, evaluation and the per-epoch curves."""

from __future__ import annotations

import pytest
import torch

from selfcal.studies import _images
from selfcal.studies._images import PAPER, Regime


def test_regime_snapshot_epochs_scale_the_papers_and_curves_take_about_12_points():
    assert PAPER.figure_epochs == (50, 150, 250, 350)
    assert Regime("short", 35, (15, 25)).figure_epochs == (5, 15, 25, 35)
    assert Regime("long", 105, (45, 75)).figure_epochs == (15, 45, 75, 105)
    assert Regime("short", 35, (15, 25)).curve_every == 2 and PAPER.curve_every == 29
    with pytest.raises(ValueError, match="milestones"):
        Regime("bad", 10, (10,))


def test_cifar_rows_join_only_the_full_protocol_when_the_data_is_present(tmp_path, monkeypatch):
    from selfcal.studies.bsce_gra.protocol import FULL, QUICK

    monkeypatch.delenv("SELFCAL_DATA", raising=False)
    assert _images.sweep_datasets(FULL) == FULL.datasets
    (tmp_path / "cifar-10-batches-py").mkdir()
    monkeypatch.setenv("SELFCAL_DATA", str(tmp_path))
    assert _images.sweep_datasets(FULL) == (*FULL.datasets, "cifar10")
    assert _images.sweep_datasets(QUICK) == QUICK.datasets
    assert FULL.regimes_for("cifar10") == (PAPER,) and FULL.regimes_for("mnist1d") == FULL.regimes
    assert FULL.candidates("cifar10", "bsce-gra") == [{"gamma": 4.0, "norm": 2}]
    assert len(FULL.candidates("mnist1d", "bsce-gra")) == 10
    config = FULL.train_config(PAPER, "cifar10", 0)
    assert (config.epochs, config.milestones, config.optimizer, config.batch_size) == (
        350,
        (150, 250),
        "sgd",
        128,
    )


def test_evaluate_scores_validation_test_and_temperature_scaling():
    from selfcal.models import build_model
    from selfcal.studies.bsce_gra.protocol import QUICK

    data = _images.load(QUICK, "digits-images", 0)
    model = build_model("cnn2d", seed=0, n_classes=10)
    metrics, z = _images.evaluate(QUICK, model, data)
    assert z.shape == (len(data.test.y), 10) and z.dtype == torch.float64
    for key in (
        "val_nll",
        "val_ece",
        "val_accuracy",
        "temperature",
        "train_error",
        "ece",
        "ece_ts",
        "nll_ts",
        "adaece",
        "classwise_ece_ts",
        "accuracy",
        "error_ts",
    ):
        assert key in metrics
    assert metrics["error_ts"] == metrics["error"]  # temperature never changes the argmax
    assert 0.05 < metrics["temperature"] < 10.05
