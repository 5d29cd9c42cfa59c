"""The abstention threshold chosen on validation (:mod:`selfcal.pipeline.selective`), against
the rule written out by brute force: every distinct confidence as a threshold, accept
``conf >= t``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from selfcal.metrics import coverage_at_accuracy
from selfcal.pipeline import choose_threshold


def brute_force(conf: np.ndarray, correct: np.ndarray, kind: str, target: float):
    """``(threshold, coverage, accuracy)`` by scanning every distinct confidence."""
    n = len(conf)
    rows = []
    for t in np.unique(conf):
        accepted = conf >= t
        rows.append((float(t), accepted.mean(), correct[accepted].mean()))
    if kind == "accuracy":
        ok = [r for r in rows if r[2] >= target - 1e-12]
        return min(ok, key=lambda r: r[0]) if ok else (None, 0.0, None)
    needed = math.ceil(target * n - 1e-9)
    ok = [r for r in rows if round(r[1] * n) >= needed]
    return max(ok, key=lambda r: r[0])


def random_case(rng: np.random.Generator, ties: bool) -> tuple[np.ndarray, np.ndarray]:
    n = int(rng.integers(1, 300))
    conf = rng.uniform(0.2, 1.0, n)
    if ties:
        conf = np.round(conf, 1)  # a few distinct values, as top-label isotonic gives
    correct = rng.random(n) < conf  # roughly calibrated
    return conf, correct


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("kind", ["accuracy", "coverage"])
def test_the_threshold_is_the_rule_written_out(kind, ties):
    rng = np.random.default_rng(1 + ties)
    for _ in range(200):
        conf, correct = random_case(rng, ties)
        target = float(rng.choice([0.5, 0.8, 0.9, 0.95, 1.0]))
        got = choose_threshold(conf, correct, kind=kind, target=target)
        want = brute_force(conf, correct, kind, target)
        assert got.threshold == want[0]
        assert got.coverage == pytest.approx(want[1], abs=1e-12)
        if want[2] is None:
            assert got.accuracy is None
        else:
            assert got.accuracy == pytest.approx(want[2], abs=1e-12)


def test_without_ties_the_accuracy_threshold_keeps_the_coverage_the_metric_reports():
    """``coverage_at_accuracy`` (selfcal.metrics) is the largest coverage meeting the target;
    without ties the chosen threshold gives exactly it."""
    rng = np.random.default_rng(5)
    for _ in range(100):
        conf, correct = random_case(rng, ties=False)
        target = float(rng.choice([0.6, 0.8, 0.9]))
        got = choose_threshold(conf, correct, kind="accuracy", target=target)
        others = np.repeat(((1 - conf) / 9)[:, None], 9, axis=1)  # below conf > 0.2
        probs = np.concatenate([conf[:, None], others], axis=1)
        labels = np.where(correct, 0, 1)
        assert got.coverage == pytest.approx(
            coverage_at_accuracy(probs=probs, labels=labels, target=target), abs=1e-12
        )


def test_coverage_target_without_ties_keeps_exactly_the_ceiling():
    conf = np.linspace(0.3, 0.99, 300)
    got = choose_threshold(conf, conf > 0.5, kind="coverage", target=0.8)
    assert got.coverage == 240 / 300
    assert ((conf >= got.threshold).mean(), got.abstain(conf).mean()) == (0.8, 0.2)


def test_an_unreachable_accuracy_abstains_on_everything():
    conf = np.array([0.9, 0.8, 0.7])
    got = choose_threshold(conf, np.array([0, 1, 1]), kind="accuracy", target=0.99)
    assert (got.threshold, got.coverage, got.accuracy) == (None, 0.0, None)
    assert got.abstain(np.array([1.0, 0.5])).all()


def test_bad_targets_are_value_errors():
    conf, correct = np.array([0.9, 0.6]), np.array([1, 0])
    with pytest.raises(ValueError, match="target accuracy must be a finite number in"):
        choose_threshold(conf, correct, kind="accuracy", target=1.5)
    with pytest.raises(ValueError, match="kind must be one of"):
        choose_threshold(conf, correct, kind="risk", target=0.5)
