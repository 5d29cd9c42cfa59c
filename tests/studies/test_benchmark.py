"""The benchmark study: one training run gives both regimes, the early-stopped checkpoint is the
lowest validation NLL offered, BO4SC offers one checkpoint per epoch, the candidates are the
protocol's, and ``--quick --json`` lists every method with raw and post-TS ECE."""

from __future__ import annotations

import io
import json
import math
from contextlib import redirect_stdout

import pytest
import torch
from helpers.studies import quick_args

from selfcal.cli import main
from selfcal.experiments.study import get_study
from selfcal.models import build_model
from selfcal.studies import _images
from selfcal.studies.benchmark import execute
from selfcal.studies.benchmark.protocol import (
    FULL,
    METHODS,
    QUICK,
    REGIMES,
    REUSED,
    image_recipe,
)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    root = tmp_path_factory.mktemp("benchmark")
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        assert main(quick_args("benchmark", root)) == 0
    return json.loads(buffer.getvalue()), root


def test_quick_json_lists_every_method_with_raw_and_post_ts_ece(quick):
    payload, root = quick
    board = payload["leaderboard"]
    for regime in REGIMES:
        rows = [r for r in board if r["regime"] == regime]
        assert [r["method"] for r in rows if r["method"] == "ce"] == ["ce"]
        assert {r["method"] for r in rows} == set(METHODS)
        for row in rows:
            for metric in ("ece", "ece_ts", "ece_iso"):
                assert 0.0 <= row[metric]["mean"] <= 1.0 and row[metric]["n"] == 2
            verdicts = [
                row[k] and row[k]["verdict"]
                for k in ("ece_vs_ce", "ece_vs_ce_ts", "ece_ts_vs_ce_ts")
            ]
            if row["method"] == "ce":
                assert verdicts == [None] * 3 and row["time_ratio"] == 1.0
            else:
                assert set(verdicts) <= {"better", "tied", "worse"} and row["time_ratio"] > 0
        means = [r["ece_ts"]["mean"] for r in rows]
        assert means == sorted(means)  # the leaderboard's order
    text = (root / "report" / "README.md").read_text()
    assert text.index("## Summary") < text.index("## Protocol")
    for name in ("ece_vs_error_blobs-1.7_memorise.png", "reliability_blobs-1.7_early-stop.png"):
        assert (root / "report" / name).stat().st_size > 10_000


def test_the_early_stopped_record_is_the_runs_best_validation_nll(quick):
    """Both records of a (method, seed) come from one run: the early-stopped checkpoint's
    validation NLL is at most the last iterate's (the last epoch is offered too), it is
    an earlier or the same epoch, and both carry the same training time."""
    payload, _ = quick
    runs = {(r["method"], r["seed"], r["regime"]): r["metrics"] for r in payload["runs"]}
    assert len(runs) == len(payload["runs"])  # one candidate per method in --quick
    pairs = 0
    for (method, seed, regime), last in runs.items():
        if regime != "memorise":
            continue
        best = runs[(method, seed, "early-stop")]
        assert best["val_nll"] <= last["val_nll"]
        assert best["hp.epochs"] <= last["hp.epochs"] == QUICK.tabular.epochs
        assert best["train_seconds"] == last["train_seconds"]
        pairs += 1
    assert pairs == len(METHODS) * len(QUICK.seeds)


def test_a_group_is_trained_once(monkeypatch):
    calls = []
    train_as = _images.train_as
    monkeypatch.setattr(_images, "train_as", lambda *a, **k: calls.append(1) or train_as(*a, **k))
    study = get_study("benchmark")
    group = [s for s in study.specs(QUICK) if s.method == "focal" and s.seed == 0]
    assert [s.hparams["regime"] for s in group] == list(REGIMES)
    assert len({study.batch_by(s) for s in group}) == 1
    results = execute.execute(QUICK, group)
    assert len(calls) == 1 and len(results) == 2
    assert results[0].metrics["hp.epochs"] == QUICK.tabular.epochs


def test_best_checkpoint_keeps_the_lowest_finite_validation_nll():
    torch.manual_seed(0)
    x, y = torch.randn(40, 2), torch.randint(0, 3, (40,))
    model = torch.nn.Linear(2, 3)
    checkpoint = execute.BestCheckpoint(x, y)
    states, nlls = [], []
    for epoch in range(4):
        with torch.no_grad():
            model.weight.mul_(3.0 if epoch == 2 else 0.5)  # epoch 2 is a bad one
        checkpoint.after_epoch(epoch, model)
        states.append({k: v.clone() for k, v in model.state_dict().items()})
        with torch.no_grad():
            nlls.append(float(torch.nn.functional.cross_entropy(model(x).double(), y)))
    best = min(range(4), key=nlls.__getitem__)
    assert checkpoint.epoch == best and checkpoint.nll == pytest.approx(nlls[best])
    with torch.no_grad():
        model.weight.fill_(float("nan"))
    checkpoint.after_epoch(4, model)  # a NaN NLL is never kept
    checkpoint.restore(model)
    assert all(torch.equal(model.state_dict()[k], states[best][k]) for k in states[best])
    params = {k: v + 1.0 for k, v in model.state_dict().items()}  # functional parameters
    shifted = execute.BestCheckpoint(x, y)
    shifted.offer(0, model, params)
    assert shifted.nll == pytest.approx(
        float(
            torch.nn.functional.cross_entropy(
                torch.func.functional_call(model, params, (x,)).double(), y
            )
        )
    )
    with pytest.raises(RuntimeError, match="no checkpoint"):
        execute.BestCheckpoint(x, y).restore(model)


def test_bo4sc_offers_one_checkpoint_per_epoch_with_the_recipes_budget():
    recipe = image_recipe("cnn2d", epochs=3, milestones=(2,))
    data, train, meta_val = _images.load_splits(QUICK, "digits-images", 0)
    model = build_model("cnn2d", seed=0, n_classes=data.n_classes)

    offered = []

    class Counting(execute.BestCheckpoint):
        def offer(self, epoch, model, params=None):
            offered.append(epoch)
            super().offer(epoch, model, params)

    checkpoint = Counting(data.val.x, data.val.y)
    summary = execute.train_bo4sc(
        QUICK,
        recipe,
        model,
        train,
        meta_val,
        {"weight_lr": 30.0, "inner_steps": 4, "beta": 20.0},
        None,
        0,
        checkpoint,
    )
    assert offered == [0, 1, 2]
    assert 0.0 < summary["weight_mean"] < 1.0 and math.isfinite(checkpoint.nll)


def test_candidates_reuse_paper_studies_on_images_and_grid_the_tabular_sets():
    for dataset in REUSED:
        for method in METHODS:
            assert len(FULL.candidates(dataset, method)) == 1
        assert FULL.recipe(dataset).epochs == 105
    assert len(FULL.candidates("blobs-1.7", "bsce-gra")) == 6
    assert FULL.candidates("breast-cancer", "ce") == [{}]
    assert FULL.recipe("cifar10").epochs == 350 and FULL.recipe("spiral-3.5").batch_size is None
    assert FULL.candidates("cifar100", "focal") == [{"gamma": 1.0}]
