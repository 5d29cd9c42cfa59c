"""The post-hoc leaderboard: the quick protocol end to end, the cluster bootstrap, and the
one-line error when the benchmark's predictions are missing. (That it scores the predictions
the benchmark stored: tests/studies/test_benchmark.py.)"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers.studies import run_quick

from selfcal.experiments.study import get_study
from selfcal.studies.posthoc.protocol import BINARY_ONLY, FULL, QUICK
from selfcal.studies.posthoc.report import bootstrap_mean, cluster_weights


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    root = tmp_path_factory.mktemp("posthoc")
    return run_quick("posthoc", root), root


def test_every_calibrator_is_scored_on_every_set(quick):
    payload, root = quick
    assert len(payload["runs"]) == len(QUICK.datasets) * len(QUICK.models) * len(QUICK.seeds)
    for run in payload["runs"]:
        metrics = run["metrics"]
        binary = metrics["n_classes"] == 2
        for name in QUICK.calibrators:
            if name in BINARY_ONLY and not binary:
                assert f"nll.{name}" not in metrics
                continue
            assert np.isfinite(metrics[f"nll.{name}"]) and metrics[f"seconds.{name}"] > 0
            assert 0.0 <= metrics[f"ece.{name}"] <= 1.0
        assert metrics["nll.auto"] <= 10 * metrics["nll.ts"]
    board = payload["binary, small validation"]
    assert board["ts"]["win_rate"]["mean"] == 0.5 and board["ts"]["nll_minus_ts"]["mean"] == 0.0
    text = (root / "report" / "README.md").read_text()
    assert "| calibrator | sets | win rate vs TS |" in text and "`auto` chose:" in text


def test_a_cluster_is_resampled_as_a_whole():
    clusters = np.array([0, 0, 1, 2, 2, 2])
    weights = cluster_weights(clusters)
    assert weights.shape == (2000, 6)
    assert (weights[:, 0] == weights[:, 1]).all() and (weights[:, 3] == weights[:, 5]).all()
    assert weights[:, [0, 2, 3]].sum(1).tolist() == [3.0] * 2000  # three clusters drawn


def test_the_bootstrap_mean_drops_missing_sets_and_covers_its_estimate():
    values = np.array([1.0, 2.0, np.nan, 4.0, 5.0, 6.0])
    found = bootstrap_mean(values, cluster_weights(np.arange(6)))
    assert found.n == 5 and found.mean == pytest.approx(3.6)
    assert found.low < found.mean < found.high


def test_without_the_benchmark_store_it_names_the_command_to_run(tmp_path):
    protocol = dataclasses.replace(FULL, benchmark_store=str(tmp_path / "none.sqlite"))
    with pytest.raises(FileNotFoundError, match="run `selfcal reproduce benchmark --store"):
        get_study("posthoc").specs(protocol)
