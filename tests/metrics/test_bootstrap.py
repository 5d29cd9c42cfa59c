"""Bootstrap intervals (:mod:`selfcal.metrics.bootstrap`) and the resampling weights every
metric core accepts."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import selfcal.metrics as M
from selfcal import Predictions
from selfcal.metrics.bootstrap import bootstrap_ci

ALL_WEIGHTED = [
    M.ece,
    M.mce,
    M.adaece,
    M.classwise_ece,
    M.accuracy,
    M.error,
    M.nll,
    M.brier,
    M.aurc,
    M.accuracy_at_coverage,
    M.coverage_at_accuracy,
]


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
    pct = M.bootstrap_ci(M.ece, probs=probs, labels=y, n_resamples=400, seed=1, method="percentile")
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


def test_the_default_centred_interval_always_contains_the_point_estimate():
    """centred = [t - (q_mid - q_lo), t + (q_hi - q_mid)]: the percentile interval moved so its
    median sits on t. On 300 rows of a calibrated model the resampled AdaECE lies above t in
    more than 97.5% of resamples, so the percentile and basic intervals both exclude t (what
    a user saw: ``adaece 0.0257 [0.0299, 0.0577]``); the centred one never does."""
    from selfcal.metrics.bootstrap import quantiles, resampled_values

    rng = np.random.default_rng(4)
    n = 300
    conf = rng.uniform(0.5, 1.0, n)
    y = (rng.uniform(size=n) < conf).astype(int)
    probs = np.stack([1 - conf, conf], axis=1)
    pred = Predictions.from_probs(probs, y)
    options = {"n_resamples": 400, "seed": 0}
    centred = M.bootstrap_ci(M.adaece, pred, **options)
    pct = M.bootstrap_ci(M.adaece, pred, method="percentile", **options)
    basic = M.bootstrap_ci(M.adaece, pred, method="basic", **options)
    assert centred.method == "centred" and "centred" not in repr(centred)
    assert not pct.low <= pct.value <= pct.high
    assert not basic.low <= basic.value <= basic.high
    assert centred.low <= centred.value <= centred.high
    vals = resampled_values(lambda w: M.adaece.core(pred, weights=w), n, 400, 0, pred.device)
    lo, mid, hi = quantiles(vals, [0.025, 0.5, 0.975]).tolist()
    assert (centred.low, centred.high) == pytest.approx(
        (centred.value - (mid - lo), centred.value + (hi - mid)), abs=1e-12
    )
    for seed in range(20):  # containment is by construction: any data, any seed
        z = 3 * rng.normal(size=(200, 4))
        labels = rng.integers(0, 4, 200)
        for metric in (M.ece, M.adaece, M.mce, M.nll, M.brier):
            iv = M.bootstrap_ci(metric, logits=z, labels=labels, n_resamples=50, seed=seed)
            assert iv.low <= iv.value <= iv.high


def test_infinite_resampled_values_stay_infinite():
    from selfcal.metrics.bootstrap import quantiles

    values = torch.tensor([1.0, 2.0, math.inf, math.inf, math.inf])
    assert quantiles(values, [0.1, 0.9]).tolist() == [1.4, math.inf]
