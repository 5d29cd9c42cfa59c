"""The BO4SC study: the quick reproduction end to end, resumption, and the protocol's
guarantees (batched Standard == the plain loop; selection never reads the test set)."""

from __future__ import annotations

import json

import pytest
import torch

from selfcal.cli import main
from selfcal.experiments import bo4sc as study


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """``selfcal reproduce bo4sc --quick --json`` once, in process (workers=1)."""
    root = tmp_path_factory.mktemp("bo4sc")
    store, out = root / "runs.sqlite", root / "report"
    args = ["reproduce", "bo4sc", "--quick", "--json", "--workers", "1",
            "--store", str(store), "--out", str(out)]
    return args, store, out


def run_cli(capsys, args):
    code = main(args)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def test_quick_reproduction_report_and_resume(quick_run, capsys):
    args, store, out = quick_run
    payload = run_cli(capsys, args)
    q = study.QUICK
    assert len(payload["runs"]) == len(q.datasets) * len(study.METHODS) * len(q.seeds) == 16
    assert payload["failures"] == []
    keys = {(a["dataset"], a["method"], a["metric"]) for a in payload["aggregates"]}
    for d in q.datasets:
        for m in study.METHODS:
            for metric in ("ece", "accuracy", "mce", "adaece", "nll", "brier", "sece", "aurc",
                           "acc_at_80", "acc_at_90"):
                assert (d, m, metric) in keys
        assert (d, "bo4sc", "ece_smooth") in keys
    for a in payload["aggregates"]:
        if a["metric"] in ("ece", "accuracy"):
            assert 0 <= a["mean"] <= 1 and a["n"] == len(q.seeds)
            assert a["ci"][0] <= a["mean"] <= a["ci"][1]
    # IsoReg keeps Standard's predictions; BO4SC's hard and smooth confidences differ
    runs = {(r["dataset"], r["method"], r["seed"]): r["metrics"] for r in payload["runs"]}
    for d in q.datasets:
        for s in q.seeds:
            assert runs[(d, "isoreg", s)]["accuracy"] == runs[(d, "standard", s)]["accuracy"]
            assert runs[(d, "bo4sc", s)]["hp.T"] in q.inner_steps
    text = (out / "README.md").read_text()
    assert "selfcal reproduce bo4sc --quick" in text and "seeds [0, 1]" in text
    assert "torch" in text and "(0.016)" in text  # versions; published BO4SC ECE on blobs-1.7
    for name in ("fig1_confidence_regions_blobs-1.7.png", "fig2_histograms_reliability_"
                 "spiral-3.5.png", "fig3_weights_blobs-1.7.png", "rejection_risk_coverage.png"):
        assert (out / name).stat().st_size > 10_000
    # a rerun executes nothing and reports the same numbers
    again = run_cli(capsys, args)
    assert again["aggregates"] == payload["aggregates"]


def test_table_text_output(quick_run, capsys):
    args, _, _ = quick_run
    code = main([a for a in args if a != "--json"])
    out = capsys.readouterr().out
    assert code == 0
    assert "0 runs done, 16 already stored" in out or "16 runs done" in out
    assert "| BO4SC (p̂) |" in out and "published" in out


def test_batched_standard_equals_the_plain_training_loop():
    """One problem of the vmapped trainer == selfcal.training.fit (full-batch Adam, mean CE)."""
    from selfcal.data import load_dataset
    from selfcal.models import build_model
    from selfcal.training import TrainConfig, fit

    data = load_dataset("blobs-1.7", 3)
    make = dict(n_features=2, n_classes=5, hidden=(16, 16))
    model = build_model("mlp", seed=3, **make)
    params = {k: v.detach().clone().unsqueeze(0) for k, v in model.named_parameters()}
    template = build_model("mlp", seed=0, **make).to("meta")
    x, y = data.train.x.unsqueeze(0), data.train.y.unsqueeze(0)
    xv, yv = data.val.x.unsqueeze(0), data.val.y.unsqueeze(0)
    scores, snaps = study.train_standard(template, params, x, y, xv, yv,
                                         torch.tensor([1e-2]), 30, 15)
    fit(model, (data.train.x, data.train.y), config=TrainConfig(epochs=30, lr=1e-2))
    for name, p in model.named_parameters():
        torch.testing.assert_close(snaps[-1][name][0], p.detach(), rtol=1e-5, atol=1e-6)
    nll = torch.nn.functional.cross_entropy(model(data.val.x), data.val.y)
    assert scores[0, -1] == pytest.approx(float(nll.detach()), rel=1e-5)


def test_selection_never_reads_the_test_set(monkeypatch):
    """Shuffling test labels changes test metrics but not one selected hyperparameter."""
    from selfcal.data import load_dataset

    protocol = study.Protocol("probe", seeds=(0,), datasets=("blobs-1.3",), max_epochs=40,
                              checkpoint_every=20, standard_lrs=(3e-3, 3e-2),
                              inner_lrs=(3e-3, 1e-2),
                              weight_lrs=(30.0, 3000.0), betas=(10.0,), grid_size=8)

    def shuffled(protocol_, dataset, seeds):
        out = {}
        for seed in seeds:
            d = load_dataset(dataset, seed)
            perm = torch.randperm(len(d.test.y), generator=torch.Generator().manual_seed(1))
            test = type(d.test)(d.test.x, d.test.y[perm])
            out[seed] = type(d)(**{**d.__dict__, "test": test})
        return out

    honest = {**study._run_standard(protocol, "blobs-1.3", [0]),
              **study._run_bo4sc(protocol, "blobs-1.3", [0])}
    monkeypatch.setattr(study, "_load", shuffled)
    blind = {**study._run_standard(protocol, "blobs-1.3", [0]),
             **study._run_bo4sc(protocol, "blobs-1.3", [0])}
    for key, result in honest.items():
        chosen = {k: v for k, v in result.metrics.items() if k.startswith("hp.")}
        assert chosen == {k: v for k, v in blind[key].metrics.items() if k.startswith("hp.")}
        assert result.metrics["accuracy"] != blind[key].metrics["accuracy"]


def test_protocol_validation_and_fingerprint():
    with pytest.raises(ValueError, match="multiple of every T"):
        study.Protocol("x", checkpoint_every=50, inner_steps=(20,))
    with pytest.raises(ValueError, match="unknown BO4SC datasets"):
        study.Protocol("x", datasets=("mnist",))
    assert study.FULL.fingerprint() != study.QUICK.fingerprint()
    assert study.Protocol("full").fingerprint() == study.FULL.fingerprint()
    spec = study.specs(study.QUICK)[0]
    stale = spec.replace(hparams={**spec.hparams, "fingerprint": "0" * 12})
    with pytest.raises(ValueError, match="another version"):
        study.protocol_of(stale)


def test_protocol_option_errors(tmp_path, capsys):
    base = ["reproduce", "bo4sc", "--store", str(tmp_path / "s.sqlite"), "--out", str(tmp_path)]
    assert main(base + ["--protocol", "nonsense"]) == 2
    assert "--protocol must be one of full, quick" in capsys.readouterr().err
    assert main(base + ["--quick", "--protocol", "full"]) == 2
    assert "name different protocols" in capsys.readouterr().err
