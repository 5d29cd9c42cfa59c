"""Calibration per group (:mod:`selfcal.metrics.groups`): each group's ECE is the ECE of its
rows, resampling weights are repeated rows, and the calibrated yardstick says what noise alone
gives at each group's size."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from selfcal import Predictions
from selfcal.metrics import (
    bootstrap_ci,
    debiased_group_ece,
    ece,
    group_calibration,
    group_ece,
    nll,
    worst_group_debiased_ece,
    worst_group_ece,
)
from selfcal.metrics.groups import null_group_ece


def calibrated_case(seed: int, n: int = 2000, k: int = 4, groups: int = 20):
    """Logits with labels drawn from their own softmax (perfectly calibrated in every group)
    and ``groups`` groups of very different sizes."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, k)) * 2
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    labels = (p.cumsum(1) < rng.random((n, 1))).sum(1)
    sizes = rng.dirichlet(np.full(groups, 0.7))
    names = rng.choice([f"g{i:02d}" for i in range(groups)], n, p=sizes)
    return logits, labels, names


def test_each_groups_ece_is_the_ece_of_its_rows():
    logits, labels, names = calibrated_case(0)
    pred = Predictions.from_logits(logits, labels, names)
    got = group_ece(pred)
    for g, rows in enumerate(pred.groups.rows()):
        assert float(got[g]) == pytest.approx(float(ece(pred.subset(rows))), abs=1e-15)
    assert float(worst_group_ece(pred)) == float(got.max())
    # overlapping groups: each column is scored as the rows it holds
    member = {"first half": np.arange(2000) < 1000, "even": np.arange(2000) % 2 == 0}
    both = group_ece(logits=logits, labels=labels, groups=member, n_bins=10, norm="l2")
    assert both[0] == pytest.approx(
        ece(logits=logits[:1000], labels=labels[:1000], n_bins=10, norm="l2")
    )
    assert both[1] == pytest.approx(
        ece(logits=logits[::2], labels=labels[::2], n_bins=10, norm="l2")
    )


def test_resampling_weights_are_repeated_rows():
    logits, labels, names = calibrated_case(1, n=300, groups=5)
    pred = Predictions.from_logits(logits, labels, names)
    counts = torch.from_numpy(np.random.default_rng(2).integers(0, 3, (2, 300))).double()
    weighted = group_ece.core(pred, counts)
    debiased = debiased_group_ece.core(pred, counts, n_draws=20)
    for b in range(2):
        repeated = torch.repeat_interleave(torch.arange(300), counts[b].long())
        again = pred.subset(repeated)
        torch.testing.assert_close(weighted[b], group_ece.core(again), rtol=1e-12, atol=1e-15)
        # the draws are the rows' own: a repeated row repeats its draw
        null = null_group_ece(pred, counts[b : b + 1], n_draws=20)[0]
        assert null.shape == (20, 5)
        assert debiased[b] == pytest.approx(weighted[b] - null.mean(0), abs=1e-12)
    ones = torch.ones(1, 300, dtype=torch.float64)
    torch.testing.assert_close(
        null_group_ece(pred, ones, n_draws=20)[0], null_group_ece(pred, n_draws=20)
    )


def test_a_calibrated_model_shows_ece_on_small_groups_and_no_excess():
    """Noise alone gives small groups a large ECE; the excess over the calibrated yardstick
    is about 0 whatever the size, and the worst group is what the worst of the draws shows."""
    logits, labels, names = calibrated_case(3, n=3000, groups=30)
    report = group_calibration(Predictions.from_logits(logits, labels, names), draw_seed=1)
    small = report.size < 40
    assert small.any() and (~small).any()
    assert float(report.ece[small].mean()) > 0.08  # large raw ECE on small groups ...
    assert abs(float(report.excess_ece.mean())) < 0.015  # ... that is all noise
    assert float(report.ece[small].mean()) > float(report.ece[~small].mean())
    assert 0.05 < report.worst_p_value  # the worst of 30 calibrated groups is no evidence
    assert float(report.worst_null.mean()) == pytest.approx(float(report.ece.max()), rel=0.5)


def test_a_miscalibrated_group_stands_out():
    logits, labels, names = calibrated_case(4, n=3000, groups=10)
    bad = names == names[0]
    rng = np.random.default_rng(5)
    labels = np.where(bad & (rng.random(3000) < 0.5), rng.integers(0, 4, 3000), labels)
    pred = Predictions.from_logits(logits, labels, names)
    report = group_calibration(pred, n_draws=100)
    worst = int(report.excess_ece.argmax())
    assert report.names[worst] == names[0]
    assert float(report.p_value[worst]) == pytest.approx(1 / 101)
    # (the largest raw ECE may be a small group's: that is what the excess corrects)
    assert float(worst_group_debiased_ece(pred, n_draws=100)) == float(report.excess_ece.max())


def test_report_per_group_accuracy_and_nll():
    logits, labels, names = calibrated_case(6, n=500, groups=4)
    pred = Predictions.from_logits(logits, labels, names)
    report = group_calibration(pred, n_draws=10)
    for g, rows in enumerate(pred.groups.rows()):
        part = pred.subset(rows)
        assert float(report.size[g]) == len(rows)
        assert float(report.accuracy[g]) == pytest.approx(float(part.correct.mean()))
        assert float(report.nll[g]) == pytest.approx(float(nll(part)))
    assert report.names == tuple(sorted(set(names)))


def test_a_group_without_rows_has_no_ece_and_is_not_the_worst():
    logits, labels, _ = calibrated_case(7, n=200)
    member = {"all": np.ones(200), "none": np.zeros(200)}
    pred = Predictions.from_logits(logits, labels, member)
    values = group_ece(pred)
    assert np.isnan(values[1]) and not np.isnan(values[0])
    assert float(worst_group_ece(pred)) == float(values[0])
    report = group_calibration(pred, n_draws=10)
    assert float(report.size[1]) == 0 and torch.isnan(report.p_value[1])
    assert report.worst == 0


def test_worst_group_has_a_bootstrap_interval():
    logits, labels, names = calibrated_case(8, n=600, groups=6)
    pred = Predictions.from_logits(logits, labels, names)
    for metric in (worst_group_ece, worst_group_debiased_ece):
        options = {"n_draws": 20} if metric is worst_group_debiased_ece else {}
        interval = bootstrap_ci(metric, pred, n_resamples=30, **options)
        assert interval.low <= interval.value <= interval.high
        assert interval.value == pytest.approx(float(metric(pred, **options)))


def test_the_draws_are_seeded():
    logits, labels, names = calibrated_case(9, n=300, groups=3)
    pred = Predictions.from_logits(logits, labels, names)
    first = debiased_group_ece(pred, n_draws=30, draw_seed=4)
    assert np.array_equal(first, debiased_group_ece(pred, n_draws=30, draw_seed=4))
    assert not np.array_equal(first, debiased_group_ece(pred, n_draws=30, draw_seed=5))
    with pytest.raises(ValueError, match="n_draws must be an integer >= 1"):
        debiased_group_ece(pred, n_draws=0)
    with pytest.raises(ValueError, match="groups are required"):
        group_ece(logits=logits, labels=labels)


def numpy_ece(conf: np.ndarray, correct: np.ndarray, n_bins: int = 15) -> float:
    """A plain transcription of the equal-width ECE: bins ``((m-1)/M, m/M]``, one loop."""
    total = 0.0
    for m in range(n_bins):
        inside = (conf > m / n_bins) & (conf <= (m + 1) / n_bins)
        if m == 0:
            inside |= conf == 0
        if inside.any():
            total += abs(correct[inside].sum() - conf[inside].sum())
    return total / len(conf)


def test_the_yardstick_is_a_loop_over_draws_and_groups():
    """Each draw scored group by group with a plain numpy ECE: the same numbers, also under
    resampling weights (a row repeated with its own draw)."""
    from selfcal.metrics.groups import calibrated_draws

    logits, labels, names = calibrated_case(10, n=400, groups=4)
    pred = Predictions.from_logits(logits, labels, names)
    draws = torch.cat(calibrated_draws(pred, 25, 3)).numpy()
    conf = pred.confidence.numpy()
    counts = np.random.default_rng(11).integers(0, 3, 400)
    null = null_group_ece(pred, n_draws=25, draw_seed=3).numpy()
    weighted = null_group_ece(
        pred, torch.from_numpy(counts[None]).double(), n_draws=25, draw_seed=3
    )[0].numpy()
    for g, name in enumerate(sorted(set(names))):
        rows = np.flatnonzero(names == name)
        repeated = np.repeat(rows, counts[rows])
        for r in range(25):
            assert null[r, g] == pytest.approx(numpy_ece(conf[rows], draws[r, rows]), abs=1e-12)
            expected = numpy_ece(conf[repeated], draws[r, repeated])
            assert weighted[r, g] == pytest.approx(expected, abs=1e-12)
