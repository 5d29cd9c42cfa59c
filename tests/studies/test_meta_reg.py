"""The meta-regularization study: its meta-validation split, the per-epoch curves of Fig. 3 and
the CIFAR rows with the published numbers beside."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from selfcal.models import build_model
from selfcal.studies import _images
from selfcal.studies.meta_reg import execute
from selfcal.studies.meta_reg.protocol import QUICK

# Two to twelve validation rows of random images: temperature scaling's fit lands on its
# grid's bound and says so (DegenerateCalibration); not what these tests check.
TS_AT_GRID_BOUND = (
    "ignore:TemperatureScaling. the validation ECE is lowest at the grid"
    ":selfcal.exceptions.DegenerateCalibration"
)


def test_meta_validation_is_a_stratified_ninth_of_train_and_disjoint():
    from selfcal.data import load_dataset

    data = load_dataset("digits-images", 0)
    (x, y), (xm, ym) = execute.meta_split(data, 0)
    assert len(ym) == round(len(data.train.y) / 9) and len(y) + len(ym) == len(data.train.y)
    both = torch.cat([x, xm]).reshape(len(data.train.y), -1)
    assert (
        torch.unique(both, dim=0).shape[0]
        == torch.unique(data.train.x.reshape(len(data.train.y), -1), dim=0).shape[0]
    )
    assert set(ym.tolist()) == set(data.train.y.tolist())  # every class represented


@pytest.mark.parametrize(("method", "options"), [("mixup", {}), ("flg-sece", {"meta_lr": 1e-4})])
def test_curves_do_not_change_the_trained_model(method, options):
    """Recording the curves leaves training bit-identical: the same final parameters and
    history with and without them; the γ statistics are γ-Net's on the test set."""
    regime = _images.Regime("short", 3, (2,))
    data, train, meta_val = execute.load_splits(QUICK, "digits-images", 0)
    config = QUICK.train_config(regime, "digits-images", 0, restore_best=True, best_by="accuracy")
    curves = _images.Curves(data, 1, 3, 15)
    states, histories = [], []
    for recorder in (None, curves):
        model = build_model("cnn2d", seed=0, n_classes=data.n_classes)
        histories.append(
            execute.train_method(
                method, options, model, train, (data.val.x, data.val.y), meta_val, config, recorder
            )
        )
        states.append(model.state_dict())
    for k in states[0]:
        assert torch.equal(states[0][k], states[1][k]), k
    assert histories[0].val_nll == histories[1].val_nll
    art = curves.artefacts()
    assert art["curve_epoch"].tolist() == [1, 2, 3]
    assert ((0 <= art["curve_test_ece"]) & (art["curve_test_ece"] <= 1)).all()
    assert (art["curve_val_temperature"] > 0).all()
    assert ("curve_test_gamma_mean" in art) == (method == "flg-sece")
    if method == "flg-sece":
        assert not np.allclose(art["curve_test_gamma_mean"], histories[1].val_gamma_mean)


@pytest.mark.filterwarnings(TS_AT_GRID_BOUND)
def test_gamma_statistics_are_gamma_net_on_the_test_features():
    """``after_epoch`` of curves following a meta step records mean and population std of
    gammaNet(features(x_test)) in eval mode (a BatchNorm network: running statistics
    untouched, train mode restored)."""
    from types import SimpleNamespace

    from selfcal.bilevel import GammaNet

    model = build_model("resnet18", seed=0, n_classes=10).train()
    meta = GammaNet(model.head.in_features, 10)
    with torch.no_grad():
        meta.readout.weight.normal_(0, 0.5)
        model(torch.randn(16, 3, 8, 8) * 3 + 1)  # move the running statistics off their init
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    x, y = torch.randn(12, 3, 8, 8), torch.randint(0, 10, (12,))
    split = SimpleNamespace(x=x, y=y)
    curves = _images.Curves(SimpleNamespace(test=split, val=split), 1, 1, 15)
    curves.follow(SimpleNamespace(meta_module=meta))
    curves.after_epoch(0, model)
    assert model.training
    for k, v in model.named_buffers():
        assert torch.equal(v, buffers[k]), k
    model.eval()
    with torch.no_grad():
        gamma = meta(model.features(x)).double()
    art = curves.artefacts()
    assert art["curve_test_gamma_mean"][0] == pytest.approx(float(gamma.mean()), rel=1e-6)
    assert art["curve_test_gamma_std"][0] == pytest.approx(
        float(gamma.std(unbiased=False)), rel=1e-6
    )


@pytest.mark.filterwarnings(  # the same, counted over the study's runs
    "ignore:.* times in .* runs. DegenerateCalibration. TemperatureScaling. the validation ECE "
    "is lowest at the grid:RuntimeWarning"
)
def test_cifar_rows_on_a_fake_cifar_and_the_published_numbers(tmp_path, monkeypatch):
    """CIFAR rows end to end on a fake CIFAR-10 folder with the schedule shrunk to 2 epochs:
    the 8:1:1 reference split, crop + flip on the training batches only; then the report,
    whose CIFAR section carries the paper's Table 1 and Table 2 numbers."""

    from helpers.image_fakes import write_cifar10

    from selfcal.experiments import ResultsStore
    from selfcal.experiments.report import write_report
    from selfcal.experiments.study import StudyResults, get_study, run_study
    from selfcal.selection import Grid
    from selfcal.studies.meta_reg.protocol import PROTOCOLS, MetaRegProtocol

    write_cifar10(tmp_path / "data", n_per_batch=4, n_test=10)
    monkeypatch.setenv("SELFCAL_DATA", str(tmp_path / "data"))
    monkeypatch.setattr(_images.recipe, "PAPER", _images.Regime("paper", 2, (1,)))
    probe = MetaRegProtocol(
        "full",
        seeds=(0,),
        datasets=(),
        methods=("ce", "flg-sece"),
        cifar_grids=(Grid("flg-sece", meta_lr=(1e-3,)),),
    )
    monkeypatch.setitem(PROTOCOLS, "full", probe)
    data, (x, y), (xm, ym) = execute.load_splits(probe, "cifar10", 0)
    assert (len(y), len(data.val.y), len(ym), len(data.test.y)) == (16, 2, 2, 10)
    study = get_study("meta-reg")
    with ResultsStore(tmp_path / "s.sqlite") as store:
        assert run_study(study, probe, store).failed == 0
        results = StudyResults.load(study, probe, store)
        assert {r.spec.dataset for r in results.records} == {"cifar10"}
        for record in results.records:
            assert 0 <= record.metrics["ece"] <= 1
            assert results.artefact(record, "curve_test_ece").shape == (2,)
        text = write_report(results, tmp_path / "rep", command="probe").read_text()
    assert "4.056 ± 0.092" in text  # CE's published ECE on CIFAR-10
    assert "| CE (TS) | 4.812 ± 0.122 | 0.211 ± 0.005 | 3.083 ± 0.140" in text
    assert "5.632 ± 0.118" in text  # Table 2's FLγ row
    assert "CIFAR-10/100 rows were not run" not in text
