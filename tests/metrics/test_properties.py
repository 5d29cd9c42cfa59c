"""Property tests (hypothesis) and checks of selective prediction, bootstrap and streaming."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import selfcal.metrics as M
from selfcal import Predictions
from selfcal.metrics.bootstrap import bootstrap_ci
from selfcal.metrics.streaming import CalibrationAccumulator

BINNED = [M.ece, M.mce, M.adaece, M.classwise_ece]
ALL_WEIGHTED = BINNED + [
    M.accuracy,
    M.error,
    M.nll,
    M.brier,
    M.aurc,
    M.accuracy_at_coverage,
    M.coverage_at_accuracy,
]


@st.composite
def problems(draw, max_n=60):
    n = draw(st.integers(1, max_n))
    c = draw(st.integers(2, 6))
    coarse = draw(st.booleans())  # coarse logits make ties
    elems = st.integers(-3, 3).map(float) if coarse else st.floats(-20, 20)
    z = draw(arrays(np.float64, (n, c), elements=elems))
    y = draw(arrays(np.int64, n, elements=st.integers(0, c - 1)))
    return z, y


@settings(max_examples=150, deadline=None)
@given(problems())
def test_metrics_in_bounds_and_permutation_invariant(problem):
    z, y = problem
    perm = np.random.default_rng(0).permutation(len(y))
    for f in BINNED + [M.accuracy, M.aurc, M.accuracy_at_coverage, M.coverage_at_accuracy]:
        v = f(logits=z, labels=y)
        assert -1e-12 <= v <= 1 + 1e-12, f.__name__
        assert f(logits=z[perm], labels=y[perm]) == pytest.approx(v, abs=1e-12), f.__name__
    assert 0 <= M.brier(logits=z, labels=y) <= 2 + 1e-12
    assert M.nll(logits=z, labels=y) >= 0
    assert M.mce(logits=z, labels=y) >= M.ece(logits=z, labels=y) - 1e-12


@settings(max_examples=60, deadline=None)
@given(problems(), st.integers(1, 7))
def test_streaming_equals_one_shot(problem, n_batches):
    z, y = problem
    acc = CalibrationAccumulator(n_bins=10, keep_confidences=True)
    for part in np.array_split(np.arange(len(y)), n_batches):
        if len(part):
            acc.update(logits=z[part], labels=y[part])
    got = acc.compute()
    pred = Predictions.from_logits(z, y)
    expected = {
        "accuracy": M.accuracy(pred),
        "nll": M.nll(pred),
        "brier": M.brier(pred),
        "ece": M.ece(pred, n_bins=10),
        "rmsce": M.ece(pred, n_bins=10, norm="l2"),
        "mce": M.mce(pred, n_bins=10),
        "classwise_ece": M.classwise_ece(pred, n_bins=10),
        "adaece": M.adaece(pred, n_bins=10),
        "aurc": M.aurc(pred),
    }
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=1e-12, rel=1e-12), key
    assert torch.equal(acc.bin_stats.count, M.calibration_bins(pred, 10).count)


def test_streaming_rejects_inconsistent_classes():
    acc = CalibrationAccumulator()
    acc.update(logits=np.zeros((3, 4)), labels=[0, 1, 2])
    with pytest.raises(ValueError, match="5 classes"):
        acc.update(logits=np.zeros((3, 5)), labels=[0, 1, 2])


@pytest.mark.parametrize("n", [1_000, 10_000, 100_000])
def test_perfectly_calibrated_sample_has_vanishing_ece(n):
    """Labels drawn from the predicted distribution: ECE shrinks like 1/sqrt(N)."""
    gen = torch.Generator().manual_seed(n)
    z = torch.randn(n, 5, generator=gen, dtype=torch.float64) * 2
    y = torch.multinomial(torch.softmax(z, 1), 1, generator=gen).squeeze(1)
    assert float(M.ece(logits=z, labels=y)) < 2.5 / np.sqrt(n) * np.sqrt(15)
    assert float(M.classwise_ece(logits=z, labels=y)) < 1.5 / np.sqrt(n) * np.sqrt(15)


def test_ece_decreases_with_n_on_calibrated_data():
    values = []
    for n in (500, 5_000, 50_000):
        gen = torch.Generator().manual_seed(1)
        z = torch.randn(n, 3, generator=gen, dtype=torch.float64)
        y = torch.multinomial(torch.softmax(z, 1), 1, generator=gen).squeeze(1)
        values.append(float(M.ece(logits=z, labels=y)))
    assert values[0] > values[1] > values[2]


# ----------------------------------------------------------------- selective prediction
def brute_force_aurc(conf, correct):
    """Average AURC over every tie-breaking order (small inputs only)."""
    order = np.argsort(-conf, kind="stable")
    groups = [list(g) for _, g in itertools.groupby(order, key=lambda i: conf[i])]
    totals = []
    for perms in itertools.product(*[itertools.permutations(g) for g in groups]):
        seq = [i for p in perms for i in p]
        errs = np.cumsum(1 - correct[seq])
        totals.append(np.mean(errs / np.arange(1, len(seq) + 1)))
    return np.mean(totals)


@settings(max_examples=80, deadline=None)
@given(
    arrays(np.float64, st.integers(1, 7), elements=st.sampled_from([0.4, 0.5, 0.7, 0.9, 1.0])),
    st.data(),
)
def test_aurc_is_expectation_over_tie_breaking(conf, data):
    correct = data.draw(arrays(np.float64, len(conf), elements=st.sampled_from([0.0, 1.0])))
    probs = np.stack([conf, 1 - conf], 1)
    probs[conf == 0.4] = np.stack([1 - conf, conf], 1)[conf == 0.4]
    pred = Predictions.from_probs(probs, labels=np.zeros(len(conf), int))
    labels = np.where(correct == 1, pred.predicted.numpy(), 1 - pred.predicted.numpy())
    pred = Predictions.from_probs(probs, labels=labels)
    assert M.aurc(pred) == pytest.approx(
        brute_force_aurc(pred.confidence.numpy(), correct), abs=1e-12
    )


def test_confidence_from_logits_does_not_depend_on_the_row_order():
    """The case hypothesis found: two rows whose max-softmax differs in the last bit only (the
    maximum sits in another column). Each row's confidence must not depend on its position in
    the batch, or reordering the rows turns them into a tie (AURC) or moves an equal-mass
    edge (AdaECE)."""
    z = np.full((37, 6), -2.0)
    z[0, 0], z[-1, 1] = 0.0, 0.0
    y = np.zeros(37, dtype=int)
    perm = np.random.default_rng(0).permutation(37)
    conf = Predictions.from_logits(z, y).confidence.numpy()
    np.testing.assert_array_equal(
        Predictions.from_logits(z[perm], y[perm]).confidence.numpy(), conf[perm]
    )
    for f in (M.aurc, M.adaece, M.accuracy_at_coverage, M.coverage_at_accuracy):
        assert f(logits=z[perm], labels=y[perm]) == f(logits=z, labels=y), f.__name__


def test_selective_accuracy_and_coverage():
    conf = np.array([0.99, 0.95, 0.9, 0.8, 0.7, 0.6])
    correct = np.array([1, 1, 1, 0, 1, 0])
    probs = np.stack([conf, 1 - conf], 1)
    labels = 1 - correct
    assert M.accuracy_at_coverage(probs=probs, labels=labels, coverage=0.5) == 1.0
    assert M.accuracy_at_coverage(probs=probs, labels=labels, coverage=5 / 6) == pytest.approx(0.8)
    assert M.coverage_at_accuracy(probs=probs, labels=labels, target=1.0) == pytest.approx(0.5)
    assert M.coverage_at_accuracy(probs=probs, labels=labels, target=0.8) == pytest.approx(5 / 6)
    curve = M.risk_coverage_curve(probs=probs, labels=labels)
    np.testing.assert_allclose(curve.coverage.numpy(), np.arange(1, 7) / 6)
    np.testing.assert_allclose(curve.risk.numpy()[-1], 2 / 6)
    with pytest.raises(ValueError, match="coverage"):
        M.accuracy_at_coverage(probs=probs, labels=labels, coverage=1.5)


# ----------------------------------------------------------------- bootstrap
@pytest.mark.parametrize("metric", ALL_WEIGHTED, ids=lambda f: f.__name__)
def test_weighted_cores_equal_metric_on_repeated_rows(metric):
    """A resample given as multiplicities equals the metric on explicitly repeated rows."""
    rng = np.random.default_rng(4)
    z = np.round(rng.normal(size=(80, 4)) * 2, 1)
    y = rng.integers(0, 4, 80)
    pred = Predictions.from_logits(z, y)
    counts = torch.tensor(rng.multinomial(80, np.full(80, 1 / 80), size=3), dtype=torch.float64)
    batched = metric.core(pred, weights=counts)
    for b in range(3):
        rows = np.repeat(np.arange(80), counts[b].long().numpy())
        assert float(batched[b]) == pytest.approx(
            metric(logits=z[rows], labels=y[rows]), abs=1e-12
        ), metric.__name__


def test_bootstrap_interval_is_seeded_and_brackets_estimate():
    rng = np.random.default_rng(5)
    z = rng.normal(size=(500, 5)) * 2
    y = rng.integers(0, 5, 500)
    a = bootstrap_ci(M.ece, logits=z, labels=y, n_resamples=300, seed=3)
    b = bootstrap_ci(M.ece, logits=z, labels=y, n_resamples=300, seed=3)
    c = bootstrap_ci(M.ece, logits=z, labels=y, n_resamples=300, seed=4)
    assert a == b and a != c
    assert a.low < a.value < a.high
    wide = bootstrap_ci(M.accuracy, logits=z[:50], labels=y[:50], n_resamples=300)
    narrow = bootstrap_ci(M.accuracy, logits=z, labels=y, n_resamples=300)
    assert wide.high - wide.low > narrow.high - narrow.low


def test_bootstrap_accuracy_interval_matches_binomial_theory():
    """Percentile interval of a mean ~ normal interval with the binomial standard error."""
    rng = np.random.default_rng(6)
    n = 4000
    z = rng.normal(size=(n, 2))
    y = rng.integers(0, 2, n)
    ci = bootstrap_ci(M.accuracy, logits=z, labels=y, n_resamples=2000, seed=0)
    se = np.sqrt(ci.value * (1 - ci.value) / n)
    assert ci.high - ci.low == pytest.approx(2 * 1.96 * se, rel=0.1)


def test_shared_resamples_equal_fresh_draws_and_are_kept_or_redrawn(monkeypatch):
    """One Resamples object shared by several metrics gives each the intervals of its own
    seeded draw, whether its chunks are kept or redrawn; a size mismatch is refused."""
    from selfcal.metrics import bootstrap as B

    rng = np.random.default_rng(9)
    z = rng.normal(size=(300, 4)) * 2
    y = rng.integers(0, 4, 300)
    pred = Predictions.from_logits(z, y)
    fresh = [bootstrap_ci(f, pred, n_resamples=50, seed=7) for f in (M.ece, M.classwise_ece)]
    monkeypatch.setattr(B, "MAX_CHUNK_ELEMENTS", 300 * 8)  # several chunks
    for kept_limit in (10**9, 0):
        monkeypatch.setattr(B, "MAX_KEPT_ELEMENTS", kept_limit)
        shared = B.Resamples(300, 50, seed=7)
        got = [
            bootstrap_ci(f, pred, n_resamples=50, resamples=shared)
            for f in (M.ece, M.classwise_ece)
        ]
        assert (shared._kept is not None) == (kept_limit > 0)
        assert got[0] == fresh[0]
        assert got[1] == fresh[1]
    with pytest.raises(ValueError, match="resamples are of 300 rows x 50"):
        bootstrap_ci(M.ece, pred, n_resamples=40, resamples=B.Resamples(300, 50))


def test_bootstrap_rejects_bad_options():
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_ci(M.ece, logits=np.zeros((3, 2)), labels=[0, 1, 0], confidence=1.5)
    with pytest.raises(ValueError, match="n_resamples"):
        bootstrap_ci(M.ece, logits=np.zeros((3, 2)), labels=[0, 1, 0], n_resamples=0)


def test_basic_interval_reflects_the_percentile_quantiles_about_the_estimate():
    """basic = [2t - q_hi, 2t - q_lo]. On a perfectly calibrated sample (true ECE 0) the binned
    ECE is biased upward and resampling adds the bias again: the percentile interval sits above t
    and misses the true value 0; the basic interval reflects the bias back and covers it."""
    from selfcal.metrics.bootstrap import resampled_values

    rng = np.random.default_rng(8)
    n = 2000
    conf = rng.uniform(0.5, 1.0, n)
    y = (rng.uniform(size=n) < conf).astype(int)  # P(y = 1 | p_1 = c) = c: calibrated
    probs = np.stack([1 - conf, conf], axis=1)
    pct = M.bootstrap_ci(M.ece, probs=probs, labels=y, n_resamples=400, seed=1)
    basic = M.bootstrap_ci(M.ece, probs=probs, labels=y, n_resamples=400, seed=1, method="basic")
    pred = Predictions.from_probs(probs, y)
    vals = resampled_values(lambda w: M.ece.core(pred, weights=w), n, 400, 1, pred.device)
    q_lo, q_hi = np.nanquantile(vals.numpy(), [0.025, 0.975])
    assert (pct.low, pct.high) == pytest.approx((q_lo, q_hi), abs=1e-12)
    assert (basic.low, basic.high) == pytest.approx(
        (2 * pct.value - q_hi, 2 * pct.value - q_lo), abs=1e-12
    )
    assert (pct.low + pct.high) / 2 > pct.value > (basic.low + basic.high) / 2
    assert pct.low > 0  # misses the true ECE
    assert basic.low <= 0 <= basic.high
    assert "basic" in repr(basic) and basic.method == "basic"
    with pytest.raises(ValueError, match="method"):
        M.bootstrap_ci(M.ece, probs=probs, labels=y, method="bca")
