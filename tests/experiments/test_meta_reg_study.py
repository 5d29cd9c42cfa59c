"""The meta-regularization study: quick reproduction end to end, its meta-validation split, the
CIFAR rows (fake CIFAR folder, schedule shrunk) and the per-epoch test curves of Fig. 3."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from selfcal.cli import main
from selfcal.experiments import ResultsStore
from selfcal.experiments import meta_reg as study
from selfcal.models import build_model


def test_quick_reproduction(tmp_path, capsys):
    args = ["reproduce", "meta-reg", "--quick", "--json", "--workers", "1",
            "--store", str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "rep")]
    assert main(args) == 0
    payload = json.loads(capsys.readouterr().out)
    q = study.QUICK
    assert len(payload["runs"]) == len(q.datasets) * len(q.methods) * len(q.seeds)
    runs = {r["method"]: r["metrics"] for r in payload["runs"]}
    for metrics in runs.values():
        for key in ("error", "ece", "mce", "adaece", "classwise_ece", "ece_1000_bins"):
            assert 0 <= metrics[key] <= 1
    assert "ece_ts" in runs["ce"] and "ece_ts" not in runs["flg-sece"]
    assert runs["ce"]["error_ts"] == runs["ce"]["error"]  # TS never changes the argmax
    # same seed, data and schedule: equal scores would mean mixing / the CE objective was lost
    assert runs["mixup-1"]["nll"] != runs["ce"]["nll"]
    assert runs["flg"]["nll"] != runs["flg-sece"]["nll"]
    text = (tmp_path / "rep" / "README.md").read_text()
    assert "selfcal reproduce meta-reg --quick" in text and "Not run" not in text
    table1 = text.split("## digits-images", 1)[1].split("## ", 1)[0]
    gain = text.split("## SECE gain", 1)[1].split("## ", 1)[0]
    for label in ("| Mixup α=1 | ", "| FLγ | ", "| FLγ-SECE | "):
        assert label in table1
    assert "| FLγ | " in gain and "| FLγ-SECE | " in gain and "Mixup" not in gain
    assert "our reading" in text  # the FLγ meta-objective is documented as ours
    assert "Fig. 3 on digits-images is drawn from the test set" in text
    assert "CIFAR-10/100 rows were not run" in text and "Published" not in text
    store = ResultsStore(tmp_path / "s.sqlite")
    for record in store.runs(study=study.STUDY):
        for key in ("test_ece_per_epoch", "val_ece_per_epoch"):
            assert store.artefact(record.key, key).shape == (q.epochs,)
        gamma = record.spec.method in ("flg", "flg-sece")
        assert ("test_gamma_mean" in record.artefacts) == gamma
        assert ("test_gamma_std" in record.artefacts) == gamma
    for name in ("fig3_ece_and_gamma_per_epoch", "fig4_reliability_bins", "fig5_ece_mce_vs_bins"):
        assert (tmp_path / "rep" / f"{name}_digits-images.png").stat().st_size > 5_000


def test_meta_validation_is_a_stratified_ninth_of_train_and_disjoint():
    from selfcal.data import load_dataset

    data = load_dataset("digits-images", 0)
    (x, y), (xm, ym) = study.meta_split(data, 0)
    assert len(ym) == round(len(data.train.y) / 9) and len(y) + len(ym) == len(data.train.y)
    both = torch.cat([x, xm]).reshape(len(data.train.y), -1)
    assert torch.unique(both, dim=0).shape[0] == torch.unique(
        data.train.x.reshape(len(data.train.y), -1), dim=0).shape[0]
    assert set(ym.tolist()) == set(data.train.y.tolist())  # every class represented


def test_full_fingerprint_is_the_committed_runs_and_cifar_joins_only_with_its_data(
        tmp_path, monkeypatch):
    """Without CIFAR files the full protocol is the committed mnist1d/digits sweep (same
    fingerprint, same specs); a CIFAR folder under $SELFCAL_DATA adds every method x 5 seeds
    on it, with the paper's schedule, and leaves the other specs' keys unchanged."""
    monkeypatch.delenv("SELFCAL_DATA", raising=False)
    assert study.FULL.fingerprint() == "bc050a0abb12"  # results/meta-reg (committed run)
    before = study.specs(study.FULL)
    assert {s.dataset for s in before} == {"mnist1d", "digits-images"}
    (tmp_path / "cifar-100-python").mkdir()
    monkeypatch.setenv("SELFCAL_DATA", str(tmp_path))
    after = study.specs(study.FULL)
    cifar = [s for s in after if s.dataset == "cifar100"]
    assert len(cifar) == len(study.METHODS) * 5 and {s.seed for s in cifar} == set(range(5))
    assert [s.key for s in after if s.dataset != "cifar100"] == [s.key for s in before]
    assert not any(s.dataset == "cifar10" for s in after)
    assert not any(s.dataset == "cifar100" for s in study.specs(study.QUICK))
    assert study.schedule(study.FULL, "cifar100") == (350, (150, 250))
    assert study.schedule(study.FULL, "digits-images") == (35, (15, 25))
    assert study.MODELS["cifar100"] == "resnet18"
    config = study.train_config(study.FULL, "digits-images", 0)
    assert config.device == "cpu" and config.epochs == 35 and config.restore_best


@pytest.mark.parametrize("method", ["mixup-1", "flg-sece"])
def test_test_curves_do_not_change_the_trained_model(method):
    """Recording the test curves (every epoch) leaves training bit-identical: the same final
    parameters and history with and without them; one entry per epoch; the γ statistics equal
    γ-Net's output on the test features computed independently."""
    protocol = study.Protocol("probe", seeds=(0,), datasets=(), methods=(method,), epochs=3,
                              milestones=(2,))
    data, train, meta_val = study.load_splits("digits-images", 0)
    config = study.train_config(protocol, "digits-images", 0)
    states, histories, curves = [], [], study.TestCurves(data.test.x, data.test.y, 15)
    for recorder in (None, curves):
        model = build_model("cnn2d", seed=0, n_classes=data.n_classes)
        histories.append(study.train_method(method, model, train, (data.val.x, data.val.y),
                                            meta_val, config, protocol.meta_lr,
                                            curves=recorder))
        states.append(model.state_dict())
    for k in states[0]:
        assert torch.equal(states[0][k], states[1][k]), k
    assert histories[0].val_nll == histories[1].val_nll
    art = curves.artefacts()
    assert art["test_ece_per_epoch"].shape == (3,) and art["test_ece_per_epoch"].dtype == "float64"
    assert ((0 <= art["test_ece_per_epoch"]) & (art["test_ece_per_epoch"] <= 1)).all()
    assert ("test_gamma_mean" in art) == (method == "flg-sece")
    if method == "flg-sece":
        assert art["test_gamma_mean"].shape == art["test_gamma_std"].shape == (3,)
        # the test set, not the validation set the trainer records
        assert not np.allclose(art["test_gamma_mean"], histories[1].val_gamma_mean)


def test_test_gamma_statistics_are_gamma_net_on_the_test_features():
    """``after_meta_epoch`` records mean and population std of gammaNet(features(x_test)) in
    eval mode (a BatchNorm network: running statistics untouched, train mode restored)."""
    from selfcal.bilevel import GammaNet

    model = build_model("resnet18", seed=0, n_classes=10).train()
    meta = GammaNet(model.head.in_features, 10)
    with torch.no_grad():
        meta.readout.weight.normal_(0, 0.5)
        model(torch.randn(16, 3, 8, 8) * 3 + 1)  # move the running statistics off their init
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    x, y = torch.randn(12, 3, 8, 8), torch.randint(0, 10, (12,))
    curves = study.TestCurves(x, y, 15)
    curves.after_meta_epoch(0, model, meta)
    assert model.training
    for k, v in model.named_buffers():
        assert torch.equal(v, buffers[k]), k
    model.eval()
    with torch.no_grad():
        gamma = meta(model.features(x)).double()
    art = curves.artefacts()
    assert art["test_gamma_mean"][0] == pytest.approx(float(gamma.mean()), rel=1e-6)
    assert art["test_gamma_std"][0] == pytest.approx(float(gamma.std(unbiased=False)), rel=1e-6)
    assert art["test_gamma_std"][0] > 0


def test_cifar_rows_on_a_fake_cifar_and_the_published_numbers(tmp_path, monkeypatch):
    """CIFAR rows end to end on a fake CIFAR-10 folder (the official pickle format) with the
    schedule shrunk to 2 epochs: the 8:1:1 reference split, crop + flip on the training
    batches only (the meta trainer's too), one test-curve entry per epoch; then the report,
    whose CIFAR section carries the paper's Table 1 and Table 2 numbers after ours (their
    absence without CIFAR: ``test_quick_reproduction``)."""
    import sys
    from pathlib import Path

    from selfcal.experiments import meta_reg_report as report
    from selfcal.experiments import run_sweep

    sys.path.insert(0, str(Path(__file__).parents[1] / "data"))
    from image_fakes import write_cifar10

    write_cifar10(tmp_path / "data", n_per_batch=4, n_test=10)
    monkeypatch.setenv("SELFCAL_DATA", str(tmp_path / "data"))
    monkeypatch.setattr(study, "CIFAR_SCHEDULE", (2, (1,)))
    data, (x, y), (xm, ym) = study.load_splits("cifar10", 0)
    assert (len(y), len(data.val.y), len(ym), len(data.test.y)) == (16, 2, 2, 10)
    seen, real = [], study.augmentation

    def spy(d):
        transform = real(d)
        return lambda batch, generator: seen.append(batch.shape) or transform(batch, generator)

    monkeypatch.setattr(study, "augmentation", spy)
    probe = study.Protocol("full", seeds=(0,), datasets=(), methods=("ce", "flg", "flg-sece"))
    monkeypatch.setitem(study.PROTOCOLS, "full", probe)
    store = ResultsStore(tmp_path / "s.sqlite")
    assert run_sweep(study.specs(probe), study.execute, store=store, progress=False).failed == 0
    assert seen == [(16, 3, 32, 32)] * 6  # one 16-image training batch per epoch and run
    for record in store.runs(study=study.STUDY):
        assert record.spec.dataset == "cifar10" and 0 <= record.metrics["ece"] <= 1
        keys = ["test_ece_per_epoch", "val_ece_per_epoch"]
        keys += ["test_gamma_mean", "test_gamma_std"] * (record.spec.method != "ce")
        for key in keys:
            assert store.artefact(record.key, key).shape == (2,), key
    text = report.write_report(store, probe, tmp_path / "rep", command="probe").read_text()
    head, cifar = text.split("## cifar10 (resnet18)", 1)
    cifar_t1, gain = cifar.split("## SECE gain", 1)
    assert "Published" not in head and "4.056 ± 0.092" in cifar_t1  # CE's ECE, CIFAR-10
    assert cifar_t1.index("| CE | ") < cifar_t1.index("Published, [MetaReg] Table 1")
    assert "| CE (TS) | 4.812 ± 0.122 | 0.211 ± 0.005 | 3.083 ± 0.140" in cifar_t1
    assert "5.632 ± 0.118" in gain and "5.632" not in cifar_t1  # Table 2's FLγ row
    assert "CIFAR-10/100 rows were not run" not in text
    assert "Fig. 3 on cifar10 is drawn from the test set" in text
