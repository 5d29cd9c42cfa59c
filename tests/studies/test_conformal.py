"""The conformal study: the quick protocol end to end (scikit-learn sets), its halvings, that
its sets are :class:`selfcal.conformal.SplitConformal`'s, and the one-line error when the
benchmark's predictions are missing. (That it reads the predictions the benchmark stored:
tests/studies/test_benchmark.py.)"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from helpers.studies import run_quick

from selfcal.conformal import SplitConformal
from selfcal.experiments.study import get_study
from selfcal.studies.conformal.execute import conformalise, halvings, key
from selfcal.studies.conformal.protocol import FULL, QUICK


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    root = tmp_path_factory.mktemp("conformal")
    return run_quick("conformal", root), root


def test_every_step_score_and_level_is_scored(quick):
    payload, root = quick
    assert len(payload["runs"]) == len(QUICK.datasets) * len(QUICK.models) * len(QUICK.seeds)
    for run in payload["runs"]:
        m = run["metrics"]
        for step in QUICK.posthoc:
            for name in QUICK.score_names:
                for alpha in QUICK.alphas:
                    k = key("coverage", step, name, alpha)
                    if m["n_test"] // 2 < 1 / alpha - 1:  # too few rows for this level
                        assert k not in m
                        continue
                    assert m[k] >= 1 - alpha - 0.2  # three halvings of a small test split
                    assert 0 < m[key("size", step, name, alpha)] <= m["n_classes"]
    text = (root / "report" / "README.md").read_text()
    assert "### (b) Post-hoc calibration vs none" in text and "No CE runs" in text


def test_halvings_are_disjoint_seeded_and_shared():
    first = halvings(11, 3, seed=2)
    assert all(len(c) == 5 and len(s) == 6 and not set(c) & set(s) for c, s in first)
    assert all((a[0] == b[0]).all() for a, b in zip(first, halvings(11, 3, seed=2)))
    assert not (first[0][0] == halvings(11, 3, seed=3)[0][0]).all()


@pytest.mark.parametrize("tied", [False, True], ids=["distinct", "tied"])
@pytest.mark.parametrize("name", ["lac", "lac-mondrian"])
def test_the_sets_are_split_conformals(name, tied):
    """LAC draws no ``u``: the study's sets are exactly SplitConformal's on each halving, also
    when most scores tie at the threshold (saturated probabilities: a threshold rounded to
    float32 once left those sets empty)."""
    rng = np.random.default_rng(0)
    probs = torch.softmax(torch.from_numpy(rng.normal(size=(400, 4)) * 2), 1)
    labels_np = rng.integers(0, 4, 400)
    if tied:  # 90% of rows: the same confident row on their own label, score 1 - top
        confident = torch.from_numpy(rng.random(400) < 0.9)
        top = 1 - 0.0058139534883  # float32 rounds its score 1 - top down
        probs[confident] = (1 - top) / 3
        probs[confident, labels_np[confident.numpy()]] = top
    labels = torch.from_numpy(labels_np)
    splits = halvings(400, 2, seed=0)
    found = conformalise(probs, labels, splits, name, (0.1,))
    sizes, coverage = [], []
    for cal, scored in splits:
        sets = SplitConformal(alpha=0.1, nonconformity="lac", mondrian=name.endswith("mondrian"))
        sets = sets.fit(probs=probs[cal], labels=labels[cal]).predict_set(probs=probs[scored])
        sizes.append(float(sets.sum(1).double().mean()))
        coverage.append(float(sets[torch.arange(len(scored)), labels[scored]].double().mean()))
    assert found[("size", 0.1)] == pytest.approx(np.mean(sizes), abs=1e-12)
    assert found[("coverage", 0.1)] == pytest.approx(np.mean(coverage), abs=1e-12)


def test_without_the_benchmark_store_it_names_the_command_to_run(tmp_path):
    protocol = dataclasses.replace(FULL, benchmark_store=str(tmp_path / "none.sqlite"))
    with pytest.raises(FileNotFoundError, match="run `selfcal reproduce benchmark --store"):
        get_study("conformal").specs(protocol)
