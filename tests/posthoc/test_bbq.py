"""BBQ against the paper's formulas written out independently (per model, per bin, with
``scipy.special.gammaln``), against a transcription of the authors' binning, and against
netcal's ``BBQ`` where the conventions meet -- with the differences pinned."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers.posthoc import make_logits, softmax

from selfcal.exceptions import DegenerateCalibration
from selfcal.posthoc import BBQ
from selfcal.posthoc.bbq import bin_count_range


def authors_cut_points(s_sorted: np.ndarray, b: int) -> list[float]:
    """A transcription of ``HistCalibrationFreq_local`` of the authors' ``BBQ/build.m`` for
    scores without ties (1-based indices as in MATLAB): chunks of ``floor(N / b)`` sorted
    scores, the rest in the last bin; the cut between chunks ``i`` and ``i + 1`` is
    ``(T{i}.Yhat(end) + T{i+1}.Yhat(1)) / 2``."""
    n = len(s_sorted)
    if b == 1:
        return []
    c = n // b
    ends = [i * c for i in range(1, b)]  # idx2 of chunks 1 .. b-1 (1-based)
    return [(s_sorted[e - 1] + s_sorted[e]) / 2 for e in ends]


def paper_bbq(scores: np.ndarray, target: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``P(z = 1 | x) = sum_M Score(M) / sum Score * P(z = 1 | x, M)``, the marginal likelihood
    of each binning model as the paper's product of gamma-function ratios, bin lookups by
    direct comparison -- loops and ``gammaln``, nothing shared with selfcal."""
    from scipy.special import gammaln

    order = np.argsort(scores, kind="stable")
    s, t = scores[order], target[order]
    n = len(s)
    lo = max(1, math.floor(n ** (1 / 3) / 10))
    hi = min(math.ceil(n / 5), math.ceil(10 * n ** (1 / 3)))
    log_scores, predictions = [], []
    for b in range(lo, hi + 1):
        cuts = authors_cut_points(s, b)
        edges = [0.0, *cuts, 1.0]
        member = [sum(c < v for c in cuts) for v in s]  # bins (e, e']
        log_ml = 0.0
        theta = []
        for j in range(len(edges) - 1):
            nb = member.count(j)
            mb = sum(tt for tt, m in zip(t, member) if m == j)
            pb = min(max((edges[j] + edges[j + 1]) / 2, 0.005), 0.995)
            a, bb = 2 * pb, 2 * (1 - pb)  # N'/B = 2 pseudo-samples per bin
            log_ml += gammaln(2) - gammaln(nb + 2)
            log_ml += gammaln(mb + a) - gammaln(a) + gammaln(nb - mb + bb) - gammaln(bb)
            theta.append((mb + a) / (nb + 2))
        log_scores.append(log_ml)
        predictions.append([theta[sum(c < v for c in cuts)] for v in x])
    w = np.exp(np.array(log_scores) - max(log_scores))
    return (w / w.sum()) @ np.array(predictions)


@pytest.mark.parametrize("seed", range(6))
def test_binary_map_equals_the_papers_formula(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 400))
    s = rng.beta(2, 2, n)
    y = (rng.random(n) < s**2).astype(int)
    x = np.concatenate([rng.random(50), s[:10], [0.0, 1.0]])
    cal = BBQ(mix=0).fit(probs=s, labels=y)  # the paper's map, un-mixed
    ours = cal.predict_proba(probs=x)[:, 1]
    np.testing.assert_allclose(ours, paper_bbq(s, y, x), rtol=0, atol=1e-12)


def test_cut_points_are_the_authors():
    """Without ties, the stored cut points (the union over the models, ``B = 1..8`` at
    ``N = 40``) are exactly the authors' midpoints of every model."""
    rng = np.random.default_rng(3)
    s = rng.random(40)
    y = (rng.random(40) < s).astype(int)
    cal = BBQ().fit(probs=s, labels=y)
    stored = set(cal.cut_points_.tolist())
    lo, hi = bin_count_range(40)
    wanted = {c for b in range(lo, hi + 1) for c in authors_cut_points(np.sort(s), b)}
    assert wanted == stored


def test_one_vs_rest_renormalises_binary_maps():
    z, y = make_logits(4, 300, 4)
    p = softmax(z)
    cal = BBQ(mix=0).fit(logits=z, labels=y)
    zt, _ = make_logits(5, 60, 4)
    pt = softmax(zt)
    columns = [
        BBQ(mix=0)
        .fit(probs=p[:, j], labels=(y == j).astype(int))
        .predict_proba(probs=pt[:, j])[:, 1]
        for j in range(4)
    ]
    expected = np.stack(columns, 1)
    expected /= expected.sum(1, keepdims=True)
    np.testing.assert_allclose(cal.predict_proba(logits=zt), expected, atol=1e-12)
    assert cal.table_sizes_.shape == (4,) and (cal.table_sizes_ <= 299).all()


def test_ties_share_a_bin():
    s = np.repeat([0.2, 0.5, 0.8], 30)
    y = np.tile([0, 1, 1], 30)
    cal = BBQ().fit(probs=s, labels=y)
    out = cal.predict_proba(probs=s)[:, 1]
    for v in (0.2, 0.5, 0.8):
        assert np.ptp(out[s == v]) == 0.0  # tied scores get one value
    assert (cal.cut_points_ < 0.8).all() and np.isin(cal.cut_points_, [0.35, 0.65]).all()


def test_map_is_a_step_function_in_the_unit_interval():
    z, y = make_logits(6, 500, 2)
    cal = BBQ().fit(logits=z, labels=y)
    grid = np.linspace(0, 1, 2001)
    out = cal.predict_proba(probs=grid)[:, 1]
    assert ((0 < out) & (out < 1)).all()
    assert len(np.unique(out)) <= len(cal.cut_points_) + 1
    assert np.all(np.diff(cal.cut_points_) > 0)


# ----------------------------------------------------------------------------- netcal
@pytest.mark.reference
def test_netcal_treats_two_classes_as_binary_as_we_do():
    """netcal's BBQ fits one map on the class-1 probability when ``C <= 2`` and
    renormalises one-vs-rest maps otherwise; so does ours. Its bins are equal-width and its
    weights BIC with elbow pruning, so the maps differ -- but both are maps of ``p_1`` only
    (two rows with the same ``p_1`` get the same output) and keep rows summing to 1."""
    netcal = pytest.importorskip("netcal.binning")
    z, y = make_logits(7, 400, 2)
    p = softmax(z)
    ref = netcal.BBQ().fit(p, y).transform(p)
    ours = BBQ(mix=0).fit(probs=p, labels=y).predict_proba(probs=p)
    assert ref.ndim == 1  # netcal returns the class-1 probability for binary input
    np.testing.assert_allclose(ours.sum(1), 1.0, atol=1e-15)
    np.testing.assert_allclose(
        np.corrcoef(ours[:, 1], ref)[0, 1], 1.0, atol=0.1
    )  # the same trend in p_1 ...


@pytest.mark.reference
def test_pinned_difference_quantile_bins_against_netcals_equal_width_bins():
    """Confident scores all above 0.9 (a typical network): netcal's equal-width bins (at most
    ``ceil(N/5)`` of them, 8 here) put every score in one bin and return one value; our
    equal-frequency bins separate the half of the scores whose accuracy is 1/2 from the half
    whose accuracy is 1."""
    netcal = pytest.importorskip("netcal.binning")
    rng = np.random.default_rng(0)
    low = rng.uniform(0.90, 0.95, 20)
    high = rng.uniform(0.95, 1.00, 20)
    s = np.concatenate([low, high])
    y = np.concatenate([np.tile([0, 1], 10), np.ones(20, dtype=int)])
    ref = netcal.BBQ().fit(s, y).transform(s)
    ours = BBQ(mix=0).fit(probs=s, labels=y).predict_proba(probs=s)[:, 1]
    assert np.ptp(ref) < 1e-12  # one bin for all
    assert ours[20:].mean() - ours[:20].mean() > 0.25


@pytest.mark.reference
def test_pinned_difference_single_bin_estimate():
    """With ``N <= 5`` both have a single one-bin model: netcal predicts the bin's label
    frequency ``m / N``, we the posterior mean ``(m + 2 p_b) / (N + 2)`` with ``p_b = 1/2``,
    i.e. ``(m + 1) / (N + 2)``."""
    netcal = pytest.importorskip("netcal.binning")
    s = np.array([0.1, 0.4, 0.6, 0.8, 0.9])
    y = np.array([0, 1, 1, 1, 1])
    ref = netcal.BBQ().fit(s, y).transform(np.array([0.5]))
    with pytest.warns(DegenerateCalibration, match="class 0 has a single validation row"):
        ours = BBQ(mix=0).fit(probs=s, labels=y).predict_proba(probs=np.array([0.5]))[0, 1]
    assert ref[0] == pytest.approx(4 / 5)
    assert ours == pytest.approx(5 / 7, abs=1e-15)


def test_torch_and_numpy_agree_on_large_input():
    z, y = make_logits(8, 3000, 10)
    a = BBQ().fit(logits=z, labels=y)
    b = BBQ().fit(logits=torch.from_numpy(z), labels=torch.from_numpy(y))
    np.testing.assert_array_equal(a.cut_points_, b.cut_points_)
    np.testing.assert_allclose(a.bin_values_, b.bin_values_, atol=1e-15)
