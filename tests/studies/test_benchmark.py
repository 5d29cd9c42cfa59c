"""The benchmark study: one training run gives the three regimes, the early-stopped checkpoint is
the lowest validation NLL offered and the refine-stopped one the lowest validation refinement
loss (their rule: tests/training/test_checkpoint.py), every record is scored on every shifted
test set, BO4SC offers one checkpoint per epoch, the candidates are the protocol's, and
``--quick --json`` lists every method, regime and severity."""

from __future__ import annotations

import math

import pytest
from helpers.studies import run_quick

from selfcal.experiments.study import get_study
from selfcal.methods import train_method
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
from selfcal.training import BestCheckpoint


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    root = tmp_path_factory.mktemp("benchmark")
    return run_quick("benchmark", root), root


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
    assert text.index("## Summary") < text.index("## Stopping by refinement")
    assert text.index("## Under shift") < text.index("## Protocol")
    for name in (
        "ece_vs_error_blobs-1.7_memorise.png",
        "reliability_blobs-1.7_early-stop.png",
        "shift_blobs-1.7_refine-stop.png",
    ):
        assert (root / "report" / name).stat().st_size > 10_000


def test_quick_json_lists_every_regime_and_severity(quick):
    """The payload names the three regimes and blobs' shifted sets, and holds one comparison
    with CE + TS per (regime, metric, test set, method other than CE), with BH's q >= p."""
    payload, _ = quick
    assert payload["regimes"] == list(REGIMES)
    sets = [(c, s) for c in ("noise", "covariate") for s in range(1, 6)]
    assert [tuple(x) for x in payload["shifted_sets"]["blobs-1.7"]] == sets
    rows = payload["shift"]
    others = len(METHODS) - 1
    assert len(rows) == len(REGIMES) * 2 * (1 + len(sets)) * others
    for regime in REGIMES:
        here = {(r["corruption"], r["severity"]) for r in rows if r["regime"] == regime}
        assert here == {("clean", 0), *sets}
    for r in rows:
        assert r["verdict"] in {"better", "tied", "worse"}
        if r["p"] is not None:
            assert r["q"] >= r["p"] - 1e-12
    refine = payload["refine_vs_early"]
    assert {(r["method"], r["metric"]) for r in refine} == {
        (m, k) for m in METHODS for k in ("nll_ts", "ece_ts")
    }


def test_the_stopped_records_are_the_runs_best_validation_nll_and_refinement(quick):
    """The records of a (method, seed) come from one run: the early-stopped checkpoint's
    validation NLL is at most the other two's (the last epoch is offered too), the
    refine-stopped one's validation refinement loss (NLL after a temperature fitted on the
    validation split) at most theirs, both at an earlier or the same epoch, and all carry the
    same training time."""
    payload, _ = quick
    runs = {(r["method"], r["seed"], r["regime"]): r["metrics"] for r in payload["runs"]}
    assert len(runs) == len(payload["runs"])  # one candidate per method in --quick
    pairs = 0
    for (method, seed, regime), last in runs.items():
        if regime != "memorise":
            continue
        best = runs[(method, seed, "early-stop")]
        refined = runs[(method, seed, "refine-stop")]
        assert best["val_nll"] <= min(last["val_nll"], refined["val_nll"]) + 1e-9
        tol = 1e-6  # the checkpoint's TS fit and the record's agree to the solver's tolerance
        assert (
            refined["val_refinement"] <= min(last["val_refinement"], best["val_refinement"]) + tol
        )
        assert best["hp.epochs"] <= last["hp.epochs"] == QUICK.tabular.epochs
        assert refined["hp.epochs"] <= last["hp.epochs"]
        assert best["train_seconds"] == last["train_seconds"] == refined["train_seconds"]
        pairs += 1
    assert pairs == len(METHODS) * len(QUICK.seeds)


def test_a_group_is_trained_once(monkeypatch):
    calls = []
    train = execute.train_method
    monkeypatch.setattr(execute, "train_method", lambda *a, **k: calls.append(1) or train(*a, **k))
    study = get_study("benchmark")
    group = [s for s in study.specs(QUICK) if s.method == "focal" and s.seed == 0]
    assert [s.hparams["regime"] for s in group] == list(REGIMES)
    assert len({study.batch_by(s) for s in group}) == 1
    results = execute.execute(QUICK, group)
    assert len(calls) == 1 and len(results) == 3
    assert results[0].metrics["hp.epochs"] == QUICK.tabular.epochs


def test_every_record_is_scored_on_every_shifted_test_set(quick):
    """Blobs' two corruptions at five severities, raw and after the clean-validation TS, SMS
    and auto: ECE, NLL and accuracy; TS keeps the class, so its accuracy is the raw one."""
    payload, _ = quick
    for run in payload["runs"]:
        m = run["metrics"]
        for corruption in ("noise", "covariate"):
            for severity in range(1, 6):
                key = f"shift.{corruption}.{severity}."
                for suffix in ("", "_ts", "_sms", "_auto"):
                    assert 0.0 <= m[f"{key}ece{suffix}"] <= 1.0
                    assert m[f"{key}nll{suffix}"] > 0.0
                assert m[f"{key}accuracy_ts"] == m[f"{key}accuracy"]
        assert not any(k.startswith("shift.") and ".0." in k for k in m)


def test_bo4sc_offers_one_checkpoint_per_epoch_with_the_recipes_budget():
    recipe = image_recipe("cnn2d", epochs=3, milestones=(2,))
    data, train, meta_val = _images.load_splits(QUICK, "digits-images", 0)
    model = build_model("cnn2d", seed=0, n_classes=data.n_classes)

    offered = []

    class Counting(BestCheckpoint):
        def offer(self, epoch, model, params=None):
            offered.append(epoch)
            super().offer(epoch, model, params)

    checkpoint, epochs = Counting(data.val.x, data.val.y), []
    summary = train_method(
        METHODS["bo4sc"],
        {"weight_lr": 30.0, "inner_steps": 4, "beta": 20.0},
        recipe,
        model,
        train,
        meta_val,
        checkpoint,
        seed=0,
        val_batch_size=QUICK.val_batch_size,
        on_epochs=epochs.append,
    )
    assert offered == [0, 1, 2] and sum(epochs) == 3
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


def test_the_summary_names_the_runs_whose_post_hoc_fits_were_degenerate():
    from types import SimpleNamespace

    from selfcal.studies.benchmark.report import degenerate

    def run(method, seed, count):
        spec = SimpleNamespace(dataset="breast-cancer", method=method, seed=seed)
        return SimpleNamespace(spec=spec, metrics={"degenerate_fits": float(count)})

    methods = ["ce", "focal", "brier", "mmce"]
    runs = [run(m, 3, 2) for m in methods] + [run("ce", 4, 0), run("label-smoothing", 0, 2)]
    results = SimpleNamespace(runs=lambda regime_name: runs)
    line = degenerate(results, "memorise")
    assert line.startswith("5 of 6 runs, breast-cancer seed 0 (Label smoothing); ")
    assert "breast-cancer seed 3 (4 methods)" in line and "seed 4" not in line
    assert degenerate(SimpleNamespace(runs=lambda regime_name: runs[4:5]), "x") == "none"


def test_the_posthoc_leaderboard_scores_the_predictions_the_benchmark_stored(quick):
    """The post-hoc study reads a benchmark record's stored validation / test logits: its TS,
    SMS and auto scores are the benchmark's own ``*_ts``, ``*_sms`` and ``*_auto``."""
    import dataclasses

    from selfcal.studies.posthoc import execute as posthoc
    from selfcal.studies.posthoc.protocol import QUICK as POSTHOC_QUICK

    payload, root = quick
    protocol = dataclasses.replace(
        POSTHOC_QUICK,
        datasets=(),
        benchmark=True,
        benchmark_store=str(root / "s.sqlite"),
        benchmark_protocol="quick",
        calibrators=("ts", "sms", "auto"),
    )
    from selfcal.studies.posthoc import BENCHMARK_REGIMES

    specs = get_study("posthoc").specs(protocol)
    # one candidate per method: all selected; refine-stop records are not read (often the
    # early-stop checkpoint itself, they would count a set twice)
    kept = [r for r in payload["runs"] if r["regime"] in BENCHMARK_REGIMES]
    assert len(specs) == len(kept) == 2 * len(payload["runs"]) // 3
    assert {s.hparams["regime"] for s in specs} == set(BENCHMARK_REGIMES)
    runs = {(r["method"], r["seed"], r["regime"]): r["metrics"] for r in payload["runs"]}
    for spec in specs[:3]:
        mine = posthoc.evaluate(protocol, spec).metrics
        theirs = runs[(spec.method.removeprefix("nn:"), spec.seed, spec.hparams["regime"])]
        for name in ("ts", "sms", "auto"):
            assert mine[f"nll.{name}"] == pytest.approx(theirs[f"nll_{name}"], rel=1e-9)
            assert mine[f"ece.{name}"] == pytest.approx(theirs[f"ece_{name}"], abs=1e-9)


def test_the_conformal_study_reads_the_predictions_the_benchmark_stored(quick):
    """The conformal study reads a benchmark record's stored validation / test logits: its
    records are the benchmark's of its regimes, and the error of the softmax of the stored test
    logits is the benchmark's own."""
    import dataclasses

    from selfcal.studies.conformal import execute as conformal
    from selfcal.studies.conformal.protocol import FULL as CONFORMAL_FULL

    payload, root = quick
    protocol = dataclasses.replace(
        CONFORMAL_FULL,
        seeds=(0, 1),
        benchmark_store=str(root / "s.sqlite"),
        benchmark_protocol="quick",
        posthoc=("none", "ts"),
        scores=("lac",),
        halvings=2,
    )
    specs = get_study("conformal").specs(protocol)
    kept = [r for r in payload["runs"] if r["regime"] in protocol.regimes]
    assert len(specs) == len(kept) and {s.hparams["regime"] for s in specs} == set(protocol.regimes)
    runs = {(r["method"], r["seed"], r["regime"]): r["metrics"] for r in payload["runs"]}
    spec = specs[0]
    mine = conformal.evaluate(protocol, spec).metrics
    theirs = runs[(spec.method, spec.seed, spec.hparams["regime"])]
    assert mine["error"] == pytest.approx(theirs["error"], abs=1e-12)
    assert mine[conformal.key("coverage", "ts", "lac", 0.1)] >= 0.8
