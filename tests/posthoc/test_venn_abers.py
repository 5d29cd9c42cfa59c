"""Venn-Abers predictors on their own terms: a hand-computed example, ``p0 <= p1``, the merged
probability inside the interval and its bounds, each end equal to scikit-learn's isotonic
regression refitted with the test row added, the numba and torch paths equal bit for bit,
cross Venn-Abers, the interval in the caller's form, files and bad input. (The peers:
``test_venn_abers_reference.py``.)"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from selfcal.posthoc import Calibrator, TopLabelVennAbers, VennAbers

S = np.array([0.2, 0.4, 0.6, 0.8])
Y = np.array([0, 1, 0, 1])


def as_binary(s: np.ndarray) -> np.ndarray:
    return np.stack([1 - s, s], 1)


def test_a_hand_computed_example():
    """Calibration scores 0.2, 0.4, 0.6, 0.8 with labels 0, 1, 0, 1, by pool-adjacent-
    violators by hand. At 0.5 with label 0 the run 1, 0, 0 pools to 1/3; with label 1 the run
    1, 1, 0 pools to 2/3; merged (2/3) / (1 - 1/3 + 2/3) = 1/2. At 0.6 (tied with a 0) the
    same. Above every score, label 0 pools with the last 1 (1/2) and label 1 stays alone
    (1); below every score label 0 stays 0 and label 1 pools with the first 0 (1/2)."""
    cal = VennAbers().fit(probs=as_binary(S), labels=Y)
    test = as_binary(np.array([0.5, 0.6, 0.9, 0.1]))
    low, high = cal.predict_interval(probs=test)
    np.testing.assert_allclose(low[:, 1], [1 / 3, 1 / 3, 1 / 2, 0], rtol=0, atol=1e-15)
    np.testing.assert_allclose(high[:, 1], [2 / 3, 2 / 3, 1, 1 / 2], rtol=0, atol=1e-15)
    merged = cal.predict_proba(probs=test)[:, 1]
    np.testing.assert_allclose(merged, [1 / 2, 1 / 2, 2 / 3, 1 / 3], rtol=0, atol=1e-15)
    brier = VennAbers(merge="brier").fit(probs=as_binary(S), labels=Y)
    expected = high[:, 1] + low[:, 1] ** 2 / 2 - high[:, 1] ** 2 / 2
    np.testing.assert_allclose(brier.predict_proba(probs=test)[:, 1], expected, atol=1e-15)


def random_case(rng: np.random.Generator, c: int) -> tuple[np.ndarray, ...]:
    """Probabilities on a dyadic grid (``k / 2^m``, exact in float64: heavy ties, and no two
    scores closer than a grid step), labels, and test rows fresh and tied. Near-ties would not
    do: scikit-learn pools scores closer than ``finfo.resolution`` (1e-15, its
    ``_make_unique``), where Venn-Abers -- ours and the peers' -- tells them apart."""
    n = int(rng.integers(2, 25))
    grid = 2 ** int(rng.integers(1, 4))
    p = rng.multinomial(grid, np.ones(c) / c, size=n + 6) / grid
    y = rng.integers(0, c, n)
    y[:2] = [0, 1]  # two classes at least (one is a ValueError)
    test = np.concatenate([p[n:], p[: min(n, 3)]])
    return p[:n], y, test


def refit(scores: np.ndarray, targets: np.ndarray, s: float, b: int) -> float:
    """scikit-learn's isotonic regression of the calibration rows plus ``(s, b)``, at ``s``."""
    from sklearn.isotonic import IsotonicRegression

    iso = IsotonicRegression(out_of_bounds="clip")
    return float(iso.fit(np.r_[scores, s], np.r_[targets, b]).predict([s])[0])


@pytest.mark.filterwarnings("ignore::selfcal.exceptions.DegenerateCalibration")  # tiny cases
@pytest.mark.parametrize("seed", range(40))
def test_each_end_is_the_isotonic_fit_with_the_test_row_added(seed):
    pytest.importorskip("sklearn")
    rng = np.random.default_rng(seed)
    c = 2 if seed % 2 else 3
    p, y, test = random_case(rng, c)
    cal = VennAbers().fit(probs=p, labels=y)
    low, high = cal.predict_interval(probs=test)
    for j in range(c):
        targets = (y == j).astype(float)
        for i, s in enumerate(test[:, j]):
            assert low[i, j] == pytest.approx(refit(p[:, j], targets, s, 0), abs=1e-12)
            assert high[i, j] == pytest.approx(refit(p[:, j], targets, s, 1), abs=1e-12)
    top = TopLabelVennAbers(mix=0).fit(probs=p, labels=y)
    low, high = top.predict_interval(probs=test)
    conf, correct = p.max(1), (p.argmax(1) == y).astype(float)
    for i, s in enumerate(test.max(1)):
        assert low[i] == pytest.approx(refit(conf, correct, s, 0), abs=1e-12)
        assert high[i] == pytest.approx(refit(conf, correct, s, 1), abs=1e-12)


@pytest.mark.parametrize("folds", [1, 3])
def test_the_interval_is_ordered_and_holds_the_merged_probability(folds):
    rng = np.random.default_rng(folds)
    z = rng.normal(size=(600, 5)) * 3
    y = rng.integers(0, 5, 600)
    z[np.arange(600), y] += 3
    zt = rng.normal(size=(300, 5)) * 4
    for merge in ("log", "brier"):
        cal = VennAbers(folds=folds, merge=merge).fit(logits=z, labels=y)
        low, high = cal.predict_interval(logits=zt)
        assert (low <= high).all() and (low >= 0).all() and (high <= 1).all()
        q = cal._merged(cal._prepare(None, zt, None)).numpy()
        assert (low - 1e-15 <= q).all() and (q <= high + 1e-15).all()
        if folds == 1 and merge == "log":  # p lies in [1 / (n + 2), (n + 1) / (n + 2)]
            assert q.min() >= 1 / 602 - 1e-15 and q.max() <= 601 / 602 + 1e-15
        top = TopLabelVennAbers(folds=folds, merge=merge).fit(logits=z, labels=y)
        conf = top.predict_confidence(logits=zt)
        low, high = top.predict_interval(logits=zt)
        assert (low <= conf).all() and (conf <= high).all()


def test_the_numba_and_torch_paths_are_equal(monkeypatch):
    """The lockstep torch walks give the numba kernel's tables bit for bit, on maps with very
    different numbers of distinct scores (some columns heavily tied, some not at all)."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(6), size=500)
    p[:, :3] = np.round(p[:, :3] * 7) / 7  # only a few distinct values in these columns
    p /= p.sum(1, keepdims=True)
    y = rng.integers(0, 6, 500)
    test = np.concatenate([rng.dirichlet(np.ones(6), size=200), p[:100]])
    kernel = VennAbers(folds=2).fit(probs=p, labels=y)
    monkeypatch.setenv("SELFCAL_KERNELS", "0")
    lockstep = VennAbers(folds=2).fit(probs=p, labels=y)
    for name in ("thresholds_", "lower_", "upper_", "table_sizes_"):
        np.testing.assert_array_equal(getattr(kernel, name), getattr(lockstep, name))
    expected = kernel.predict_proba(probs=test)
    np.testing.assert_array_equal(lockstep.predict_proba(probs=test), expected)


def test_cross_venn_abers_merges_the_folds_by_geometric_means():
    rng = np.random.default_rng(3)
    s = rng.random(300)
    y = (rng.random(300) < s).astype(int)
    test = as_binary(rng.random(50))
    cal = VennAbers(folds=4, seed=5).fit(probs=as_binary(s), labels=y)
    assert len(cal.table_sizes_) == 4
    p0, p1 = (x[:, :, 0].numpy() for x in cal._pairs(cal._prepare(None, None, test)))
    gm = lambda x: np.exp(np.log(x).mean(0))  # noqa: E731
    expected = gm(p1) / (gm(1 - p0) + gm(p1))
    np.testing.assert_allclose(cal.predict_proba(probs=test)[:, 1], expected, rtol=1e-13)
    again = VennAbers(folds=4, seed=5).fit(probs=as_binary(s), labels=y)
    np.testing.assert_array_equal(again.predict_proba(probs=test), cal.predict_proba(probs=test))
    other = VennAbers(folds=4, seed=6).fit(probs=as_binary(s), labels=y)
    assert not np.array_equal(other.predict_proba(probs=test), cal.predict_proba(probs=test))


def test_the_interval_in_the_callers_form():
    rng = np.random.default_rng(1)
    z, y = rng.normal(size=(100, 3)), rng.integers(0, 3, 100)
    cal = VennAbers().fit(logits=z, labels=y)
    low, high = cal.predict_interval(logits=torch.as_tensor(z))
    assert isinstance(low, torch.Tensor) and low.shape == (100, 3) and low.dtype == torch.float64
    low_np, high_np = cal.predict_interval(logits=z)
    np.testing.assert_array_equal(low.numpy(), low_np)
    np.testing.assert_array_equal(high.numpy(), high_np)
    two = VennAbers().fit(probs=as_binary(S), labels=Y)
    low, high = two.predict_interval(probs=as_binary(np.array([0.5])))
    np.testing.assert_allclose(low, [[1 / 3, 1 / 3]])  # class 0: [1 - p1, 1 - p0]
    np.testing.assert_allclose(high, [[2 / 3, 2 / 3]])
    top_low, _ = TopLabelVennAbers().fit(logits=z, labels=y).predict_interval(logits=z)
    assert top_low.shape == (100,)


def test_saved_and_loaded_with_its_intervals(tmp_path):
    rng = np.random.default_rng(2)
    z, y = rng.normal(size=(200, 4)) * 2, rng.integers(0, 4, 200)
    zt = rng.normal(size=(50, 4)) * 2
    for cal in (VennAbers(folds=3), TopLabelVennAbers()):
        cal.fit(logits=z, labels=y)
        path = tmp_path / "va.json"
        cal.save(path)
        loaded = Calibrator.load(path)
        for a, b in zip(loaded.predict_interval(logits=zt), cal.predict_interval(logits=zt)):
            np.testing.assert_array_equal(a, b)


def test_a_file_whose_tables_are_out_of_order_is_refused(tmp_path):
    from selfcal.estimator.persistence import checksum

    path = tmp_path / "va.json"
    VennAbers().fit(probs=as_binary(S), labels=Y).save(path)
    doc = json.loads(path.read_text())
    fitted = doc["fitted"]["thresholds_"]
    values = fitted["data"] if isinstance(fitted, dict) else fitted
    values[0], values[1] = values[1], values[0]
    doc["checksum"] = checksum(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="thresholds_ must increase strictly within a table"):
        Calibrator.load(path)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"folds": 0}, "folds must be an integer >= 1, got 0"),
        ({"folds": 2.5}, "folds must be an integer >= 1"),
        ({"merge": "mean"}, "merge must be one of log, brier; got 'mean'"),
        ({"seed": -1}, "seed must be an integer >= 0, got -1"),
    ],
)
def test_bad_hyperparameters_are_one_line_errors(params, message):
    for cls in (VennAbers, TopLabelVennAbers):
        with pytest.raises(ValueError, match=message) as error:
            cls(**params).fit(probs=as_binary(S), labels=Y)
        assert "\n" not in str(error.value)


def test_the_interval_needs_a_fit():
    from selfcal.exceptions import NotFittedError

    with pytest.raises(NotFittedError, match="not fitted yet"):
        VennAbers().predict_interval(probs=as_binary(S))


def test_more_folds_than_rows_allow_is_a_one_line_error_and_tables_hold_no_negative_zero():
    rng = np.random.default_rng(0)
    z, y = rng.normal(size=(400, 4)), rng.integers(0, 4, 400)
    with pytest.raises(ValueError, match="folds=500 needs at least 1000 calibration rows"):
        VennAbers(folds=500).fit(logits=z, labels=y)
    fitted = VennAbers().fit(logits=z, labels=y)
    assert not np.signbit(fitted.lower_).any() and not np.signbit(fitted.upper_).any()
