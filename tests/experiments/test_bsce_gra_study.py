"""The BSCE-GRA study: the quick reproduction end to end and the Fig. 4 gradient norms."""

from __future__ import annotations

import json

import pytest
import torch

from selfcal.cli import main
from selfcal.experiments import bsce_gra as study


def test_quick_reproduction(tmp_path, capsys):
    args = ["reproduce", "bsce-gra", "--quick", "--json", "--workers", "1",
            "--store", str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "rep")]
    assert main(args) == 0
    payload = json.loads(capsys.readouterr().out)
    q = study.QUICK
    assert len(payload["runs"]) == len(q.datasets) * len(q.losses) * len(q.seeds)
    for run in payload["runs"]:
        m = run["metrics"]
        for key in ("ece_pre", "ece_post", "adaece_pre", "classwise_ece_post", "accuracy"):
            assert 0 <= m[key] <= 1
        assert 0.05 < m["temperature"] < 10.05
    text = (tmp_path / "rep" / "README.md").read_text()
    assert "selfcal reproduce bsce-gra --quick" in text and "BSCE-GRA" in text
    assert "cifar10 resnet50: ECE | 4.36/1.32" in text  # the published numbers beside
    for name in ("fig1_focal_gradient_factor.png", "fig4_gradient_norm_vs_brier_digits-images.png",
                 "fig5a_test_ece_per_epoch_digits-images.png",
                 "fig7_true_class_probability_digits-images.png"):
        assert (tmp_path / "rep" / name).stat().st_size > 5_000
    assert main(args[:-4] + ["--store", str(tmp_path / "s.sqlite"), "--out",
                             str(tmp_path / "rep")]) == 0  # a rerun resumes: nothing to do
    assert json.loads(capsys.readouterr().out)["aggregates"] == payload["aggregates"]


@pytest.mark.parametrize("loss_name", ["ce", "flsd53", "dfl", "bsce-gra"])
def test_last_layer_gradient_norms_match_per_sample_autograd(loss_name):
    from selfcal.losses import build_loss
    from selfcal.models import build_model

    torch.manual_seed(0)
    model = build_model("cnn2d", seed=0, n_classes=10).double()
    x, y = torch.randn(6, 1, 8, 8, dtype=torch.float64), torch.randint(0, 10, (6,))
    loss = build_loss(loss_name)
    norms, brier = study.last_layer_gradient_norms(model, loss, x, y)
    model.eval()
    for i in range(6):
        (g,) = torch.autograd.grad(loss(model(x[i : i + 1]), y[i : i + 1]), model.head.weight)
        assert float(norms[i]) == pytest.approx(float(g.norm()), rel=1e-9)
    p = torch.softmax(model(x), 1).detach()
    expected = (p - torch.nn.functional.one_hot(y, 10)).square().sum(1)
    torch.testing.assert_close(brier, expected)


def test_gra_toy_quick(tmp_path, capsys):
    args = ["reproduce", "gra-toy", "--quick", "--json", "--workers", "1",
            "--store", str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "rep")]
    assert main(args) == 0
    payload = json.loads(capsys.readouterr().out)
    (run,) = payload["runs"]
    for key in ("fl", "dfl", "gbs"):
        assert -1 <= run["metrics"][f"pearson_{key}"] <= 1
    assert payload["published"] == {"fl": 0.550, "dfl": 0.638, "gbs": 0.664}
    assert "published" in (tmp_path / "rep" / "README.md").read_text()


def test_cifar_rows_join_when_the_data_is_present(tmp_path, monkeypatch):
    """No CIFAR files: the CPU study only. A CIFAR folder under $SELFCAL_DATA adds its rows,
    with the papers' schedule (350 epochs, drops at 150 / 250) and figure epochs."""
    monkeypatch.delenv("SELFCAL_DATA", raising=False)
    assert {s.dataset for s in study.specs(study.FULL)} == set(study.FULL.datasets)
    (tmp_path / "cifar-10-batches-py").mkdir()
    monkeypatch.setenv("SELFCAL_DATA", str(tmp_path))
    specs = study.specs(study.FULL)
    assert sum(s.dataset == "cifar10" for s in specs) == len(study.FULL.losses) * 3
    assert not any(s.dataset == "cifar10" for s in study.specs(study.QUICK))
    assert study.schedule(study.FULL, "cifar10") == (350, (150, 250))
    assert study.figure_epochs(study.FULL, "cifar10") == (50, 150, 250, 350)
    assert study.schedule(study.FULL, "mnist1d") == (35, (15, 25))


def test_cifar_run_plumbing_on_a_fake_cifar(tmp_path, monkeypatch):
    """A CIFAR row end to end on a fake CIFAR-10 folder (the official pickle format), with the
    schedule and the network shrunk so it runs in seconds: crop + flip augmentation, the scaled
    figure epochs, pre/post-TS metrics."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "data"))
    from image_fakes import write_cifar10

    write_cifar10(tmp_path, n_per_batch=10, n_test=20)
    monkeypatch.setenv("SELFCAL_DATA", str(tmp_path))
    monkeypatch.setattr(study, "CIFAR_SCHEDULE", (2, (1,)))
    monkeypatch.setitem(study.MODELS, "cifar10", "resnet18")
    protocol = study.Protocol("probe", datasets=(), losses=("bsce-gra",), epochs=2,
                              milestones=(1,), figure_epochs=(1, 2), gradient_samples=16)
    result = study.train_and_evaluate(protocol, "cifar10", "bsce-gra", 0)
    assert 0 <= result.metrics["ece_pre"] <= 1 and result.metrics["temperature"] > 0
    assert set(result.artefacts) >= {"test_ece_per_epoch", "grad_norm_e1", "true_prob_e2"}
    assert len(result.artefacts["test_ece_per_epoch"]) == 2
