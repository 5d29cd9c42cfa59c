"""Selection in :mod:`selfcal.pipeline`: the selected candidate is the one with the best
validation score under the method's criterion, and every candidate trains from the same seed
with the benchmark's tabular recipe -- checked against the benchmark study's own executor,
which must give the same numbers bit for bit."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from selfcal.data import load_dataset
from selfcal.methods import METHODS, VAL_BCE, Recipe, get_method
from selfcal.pipeline import (
    Candidate,
    FeatureTable,
    fit_and_select,
    prepare,
    select_candidate,
)


def mlp(hidden: tuple[int, ...], epochs: int) -> Recipe:
    """The tabular recipe (full-batch Adam at 1e-2) with a smaller network and schedule."""
    return Recipe("mlp", epochs, "adam", 1e-2, None, hidden=hidden)


@pytest.fixture(scope="module")
def blobs():
    data = load_dataset("blobs-1.7", 0)

    def table(split: str) -> FeatureTable:
        return FeatureTable.from_arrays(
            data.raw(split).numpy(), data.split(split).y.numpy(), name=split
        )

    return data, prepare(table("train"), table("val"), table("test"), seed=0)


def fake(hyper: dict, val_ece: float, status: str = "done") -> Candidate:
    metrics = {} if status != "done" else {"val_ece": val_ece, "val_nll": 1.0}
    reason = None if status == "done" else "diverged"
    return Candidate(hyper, status, reason, metrics, 3, 0.0, None)


# ----------------------------------------------------------------------------- the rule
def test_the_lowest_finite_score_is_selected():
    rng = np.random.default_rng(0)
    for _ in range(50):
        scores = rng.uniform(0, 1, size=rng.integers(1, 8))
        scores[rng.random(scores.shape) < 0.2] = math.nan  # a diverged-looking score
        candidates = [fake({"gamma": float(i)}, float(s)) for i, s in enumerate(scores)]
        finite = [i for i, s in enumerate(scores) if math.isfinite(s)]
        if not finite:
            with pytest.raises(ValueError, match="no candidate has a finite val_ece"):
                select_candidate(candidates, METHODS["focal"].criterion)
            continue
        best = min(finite, key=lambda i: scores[i])
        assert select_candidate(candidates, METHODS["focal"].criterion) == best


def test_a_failed_candidate_is_never_selected_and_ties_go_to_the_first_grid_values():
    candidates = [
        fake({"gamma": 3.0}, 0.01, status="failed"),
        fake({"gamma": 2.0}, 0.05),
        fake({"gamma": 1.0}, 0.05),
    ]
    assert select_candidate(candidates, METHODS["focal"].criterion) == 2  # gamma=1 sorts first


def test_bo4sc_is_selected_by_its_own_objective_the_others_by_validation_ece():
    a = Candidate({"weight_lr": 1.0}, "done", None, {"val_ece": 0.1, "val_bce": 0.5}, 1, 0, None)
    b = Candidate({"weight_lr": 2.0}, "done", None, {"val_ece": 0.2, "val_bce": 0.4}, 1, 0, None)
    assert select_candidate([a, b], VAL_BCE) == 1
    assert select_candidate([a, b], METHODS["focal"].criterion) == 0


def test_trained_candidates_the_selected_one_has_the_best_validation_score(blobs):
    _, data = blobs
    method = get_method("bsce-gra").with_grid({"gamma": (1.0, 5.0), "norm": (2,)})
    selection = fit_and_select(method, mlp((16,), 15), data, seed=0)
    scores = [c.metrics["val_ece"] for c in selection.candidates]
    assert len(scores) == 2 and all(c.status == "done" for c in selection.candidates)
    assert selection.selected == int(np.argmin(scores))
    # the scores are the checkpoint's, recomputed here from its parameters
    from selfcal.methods import build_network, network_logits
    from selfcal.metrics import ece

    for c in selection.candidates:
        net = build_network(mlp((16,), 15), 5, seed=1, n_features=2)
        net.load_state_dict(c.state)
        z = network_logits(net, data.val[0])
        assert ece(logits=z, labels=data.val[1], n_bins=15) == c.metrics["val_ece"]


def test_every_candidate_starts_from_the_same_initialisation(blobs, monkeypatch):
    """One epoch of label smoothing with two ε from the seed's initialisation: the first
    layers' starting points are equal (the runs differ only through ε)."""
    _, data = blobs
    import selfcal.pipeline.fitting as fitting

    starts = []
    original = fitting.build_network

    def spy(*args, **kwargs):
        net = original(*args, **kwargs)
        starts.append({k: v.clone() for k, v in net.state_dict().items()})
        return net

    monkeypatch.setattr(fitting, "build_network", spy)
    fit_and_select(get_method("label-smoothing"), mlp((8,), 1), data, seed=3)
    assert len(starts) == 2
    assert all(torch.equal(starts[0][k], starts[1][k]) for k in starts[0])


# ----------------------------------------------------------------------------- the recipe
BENCHMARK_METHODS = ("ce", "bsce-gra", "mixup", "flγ-sece", "bo4sc")


@pytest.mark.parametrize("method", BENCHMARK_METHODS)
def test_the_recipe_is_the_benchmarks_bit_for_bit(blobs, method):
    """The benchmark's executor (its early-stop regime) and the pipeline, on the loader's raw
    features and labels (which the pipeline standardises itself), with one candidate and a
    short schedule: the same checkpoint and the same validation scores exactly -- the same
    data, split, initialisation, training steps and checkpoint rule."""
    from selfcal.experiments import RunSpec
    from selfcal.studies.benchmark.execute import train_and_evaluate
    from selfcal.studies.benchmark.protocol import QUICK

    loader, data = blobs
    assert torch.equal(data.val[0], loader.val.x)  # the loader's standardisation, bit for bit
    protocol = dataclasses.replace(QUICK, tabular=mlp((16,), 20))
    point = protocol.candidates("blobs-1.7", method)[0]
    spec = RunSpec(
        "benchmark",
        "blobs-1.7",
        method,
        0,
        {"regime": "early-stop", **{f"hp.{k}": v for k, v in point.items()}},
    )
    reference = train_and_evaluate(protocol, spec)["early-stop"].metrics
    chosen = get_method(method)
    if point:
        chosen = chosen.with_grid({k: (v,) for k, v in point.items()})
    best = fit_and_select(chosen, mlp((16,), 20), data, seed=0).best
    assert best.best_epoch + 1 == reference["hp.epochs"]
    for key in ("val_nll", "val_ece", "val_accuracy"):
        assert best.metrics[key] == reference[key], key


# ----------------------------------------------------------------------------- patience
@pytest.mark.parametrize("method", ["ce", "bo4sc"])
def test_a_candidate_stops_patience_epochs_after_its_checkpoint(blobs, method):
    """With ``patience``, training ends at the first epoch ``patience`` epochs past the
    checkpoint (BO4SC: at the end of that outer iteration, 10 full-batch epochs), keeping the
    checkpoint training every epoch finds up to there; without, every epoch runs."""
    _, prepared = blobs
    spec = get_method(method).with_grid({"weight_lr": (100.0,)} if method == "bo4sc" else {})
    recipe = Recipe("mlp", 120, "adam", 5e-2, None, hidden=(32, 32))  # over-fits by epoch 30
    kept = fit_and_select(spec, recipe, prepared, patience=5).candidates[0]
    every = fit_and_select(spec, recipe, prepared, patience=None).candidates[0]
    step = 10 if method == "bo4sc" else 1
    assert every.epochs_trained == 120
    assert kept.best_epoch + 5 < kept.epochs_trained <= kept.best_epoch + 5 + step < 120
    assert every.best_epoch >= kept.best_epoch
    if every.best_epoch < kept.epochs_trained:  # the same run up to the stop
        assert every.best_epoch == kept.best_epoch


def test_the_command_line_states_the_pipelines_default_patience():
    from selfcal.cli._train import DEFAULT_PATIENCE as CLI
    from selfcal.pipeline.fitting import DEFAULT_PATIENCE

    assert CLI == DEFAULT_PATIENCE == 50


def test_scratch_folders_of_killed_runs_are_removed_and_live_ones_kept(tmp_path):
    """``train`` writes into ``.NAME.PID.xxxx`` beside the model folder; the next run for
    that folder removes those whose process is gone (a ``kill -9`` mid-write), never a live
    run's, nor another model's."""
    import os
    import subprocess
    import sys

    from selfcal.pipeline.trainer import remove_abandoned_scratch

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    dead = tmp_path / f".model.{gone}.abcd"
    live = tmp_path / f".model.{os.getpid()}.efgh"
    other = tmp_path / f".model2.{gone}.ijkl"
    for path in (dead, live, other):
        path.mkdir()
        (path / "config.json").write_text("{}")
    remove_abandoned_scratch(tmp_path / "model")
    assert not dead.exists() and live.exists() and other.exists()
