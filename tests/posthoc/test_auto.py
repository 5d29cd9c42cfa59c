"""AutoCalibration: stratified folds (random past 20,000 rows), out-of-fold scores recomputed
by hand, the choice, the paired intervals, failed candidates, the refit, and its
hyperparameter errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from selfcal import Predictions
from selfcal.exceptions import DegenerateCalibration
from selfcal.metrics import brier, nll
from selfcal.posthoc import AutoCalibration, build_calibrator
from selfcal.posthoc.auto import CANDIDATES
from selfcal.posthoc.crossfit import random_folds, stratified_folds


def biased_logits(seed: int, n: int, c: int) -> tuple[np.ndarray, np.ndarray]:
    """Over-confident logits with per-class biases: TS cannot fix the biases, SVS can."""
    rng = np.random.default_rng(seed)
    z = 3.0 * rng.normal(size=(n, c))
    bias = np.linspace(-1.5, 1.5, c)
    p = torch.softmax(torch.from_numpy(0.5 * z + bias), 1).numpy()
    y = (p.cumsum(1) > rng.random((n, 1))).argmax(1)
    return z, y


@pytest.mark.parametrize("criterion", ["nll", "brier"])
def test_scores_are_the_criterion_of_out_of_fold_predictions(criterion):
    z, y = biased_logits(0, 600, 4)
    auto = AutoCalibration(candidates=["ts", "svs", "platt"], criterion=criterion).fit(
        logits=z, labels=y
    )
    results = auto.cv_results_
    assert results["candidate"] == ["ts", "svs", "platt"]
    # by hand: the same folds, each fold's fit predicting its held-out rows
    folds = stratified_folds(torch.as_tensor(y), 5, 0)
    for i, name in enumerate(["ts", "svs"]):
        out = np.empty((len(y), 4))
        for rows in folds:
            train = np.setdiff1d(np.arange(len(y)), rows)
            cal = build_calibrator(name).fit(logits=z[train], labels=y[train])
            out[rows] = cal.predict_proba(logits=z[rows])
        metric = nll if criterion == "nll" else brier
        assert results["score"][i] == pytest.approx(float(metric(probs=out, labels=y)), rel=1e-12)
        assert results["error"][i] == ""
    # a binary calibrator on four classes fails on its first fold, and says why
    assert results["score"][2] == float("inf") and "binary problems" in results["error"][2]
    assert np.isnan(results["difference"][2])
    best = int(np.argmin(results["score"]))
    assert results["difference"][best] == 0.0
    assert results["low"][best] == results["high"][best] == 0.0
    # the first candidate whose paired interval against the lowest score reaches 0
    first = next(i for i, low in enumerate(results["low"]) if low <= 0)
    assert auto.chosen_ == results["candidate"][first]
    best_only = AutoCalibration(candidates=["ts", "svs"], criterion=criterion, selection="best")
    assert best_only.fit(logits=z, labels=y).chosen_ == results["candidate"][best]


def test_first_keeps_the_first_candidate_when_another_is_only_luckier():
    """On logits whose only miscalibration is a temperature, the richer candidates cannot be
    significantly better: ``first`` keeps ``ts`` (listed first) even where another scores
    lower."""
    rng = np.random.default_rng(4)
    z = 4.0 * rng.normal(size=(400, 4))
    p = torch.softmax(torch.from_numpy(z / 2.5), 1).numpy()
    y = (p.cumsum(1) > rng.random((400, 1))).argmax(1)
    auto = AutoCalibration(candidates=["ts", "svs", "sms", "isotonic"]).fit(logits=z, labels=y)
    assert auto.chosen_ == "ts"
    r = auto.cv_results_
    assert all(low <= 0 for low in r["low"][:3])  # svs and sms are tied with the lowest


def test_svs_is_chosen_where_class_biases_need_it_and_its_rival_is_significantly_worse():
    z, y = biased_logits(1, 3000, 5)
    auto = AutoCalibration(candidates=["none", "ts", "svs"]).fit(logits=z, labels=y)
    assert auto.chosen_ == "svs"
    r = auto.cv_results_
    ts = r["candidate"].index("ts")
    assert r["low"][ts] > 0  # temperature scaling: significantly worse, paired over rows
    refit = build_calibrator("svs").fit(logits=z, labels=y)
    np.testing.assert_array_equal(auto.predict_proba(logits=z), refit.predict_proba(logits=z))
    np.testing.assert_array_equal(auto.calibrator_.weight_, refit.weight_)


def test_the_default_candidates_add_the_binary_ones_for_two_classes():
    z, y = biased_logits(2, 300, 2)
    auto = AutoCalibration().fit(logits=z, labels=y)
    assert auto.cv_results_["candidate"] == [
        "sms", "svs", "vector", "ts-mix", "ts", "platt", "beta", "quadratic", "ets", "isotonic",
        "none",
    ]  # fmt: skip
    z, y = biased_logits(2, 300, 3)
    assert AutoCalibration(candidates=None).fit(logits=z, labels=y).cv_results_["candidate"] == [
        "sms", "svs", "vector", "ts-mix", "ts", "ets", "isotonic", "none",
    ]  # fmt: skip


def test_the_default_order_keeps_sms_unless_another_candidate_is_significantly_better():
    """The default order puts structured matrix scaling first: on logits whose only
    miscalibration is a temperature it is kept even where temperature scaling scores lower
    (tied), and where another candidate is significantly better the choice moves on. Each
    candidate's difference from TS is recorded beside (``ts_difference``, ``ts_low``,
    ``ts_high``)."""
    rng = np.random.default_rng(4)
    z = 4.0 * rng.normal(size=(400, 4))
    p = torch.softmax(torch.from_numpy(z / 2.5), 1).numpy()
    y = (p.cumsum(1) > rng.random((400, 1))).argmax(1)
    auto = AutoCalibration().fit(logits=z, labels=y)
    r = auto.cv_results_
    assert auto.chosen_ == "sms" and r["low"][0] <= 0.0
    assert r["score"][r["candidate"].index("ts")] < r["score"][0]  # ts scored lower, tied
    ts = r["candidate"].index("ts")
    assert r["ts_difference"][ts] == r["ts_low"][ts] == r["ts_high"][ts] == 0.0
    assert r["ts_difference"][0] == pytest.approx(r["score"][0] - r["score"][ts], abs=1e-15)
    worse_first = AutoCalibration(candidates=["none", "ts", "svs"]).fit(logits=z, labels=y)
    assert worse_first.cv_results_["low"][0] > 0 and worse_first.chosen_ == "ts"
    no_ts = AutoCalibration(candidates=["none", "svs"]).fit(logits=z, labels=y)
    assert "ts_high" not in no_ts.cv_results_


def test_folds_are_stratified_up_to_20000_rows_and_random_beyond():
    from selfcal.posthoc.auto import folds_for

    y = torch.arange(20_000) % 7
    for got, want in zip(folds_for(y, "auto", 3), stratified_folds(y, 5, 3), strict=True):
        np.testing.assert_array_equal(got, want)
    y = torch.arange(20_001) % 7
    for got, want in zip(folds_for(y, "auto", 3), random_folds(20_001, 4, 3), strict=True):
        np.testing.assert_array_equal(got, want)


def test_the_default_candidates_leave_out_only_what_cannot_be_afforded():
    """SMS and vector scaling are candidates at 1,000 classes whatever the rows; SMS is left
    out only past 4 * 10^6 parameters (memory), ETS past 10^5 scores; each stays in
    ``cv_results_`` with its reason. Below both, the default candidates are all there."""
    from selfcal.posthoc.auto import default_candidates

    many = Predictions.from_logits(torch.zeros(200, 1000), torch.arange(200))
    names, left_out = default_candidates(many)
    assert {"sms", "vector"} <= set(names) and set(left_out) == {"ets"}
    assert "scans" in left_out["ets"]
    huge = Predictions.from_logits(torch.zeros(2, 2000), torch.arange(2))
    assert "parameters exceed" in default_candidates(huge)[1]["sms"]
    big = Predictions.from_logits(torch.zeros(2001, 50), torch.arange(2001) % 50)
    assert default_candidates(big) == (list(CANDIDATES), {"ets": default_candidates(big)[1]["ets"]})
    small = Predictions.from_logits(torch.zeros(2000, 50), torch.arange(2000) % 50)
    assert default_candidates(small) == (list(CANDIDATES), {})


def class_wise(seed: int, n: int, c: int, scale_sd: float = 0.0, bias_sd: float = 0.0):
    """Logits ``N(0, 1)`` plus 12.3 on one class a row (``benchmarks/bench_auto_scale.py``),
    labels drawn from ``softmax(w * z + b)``: ``w = exp(scale_sd e) / 1.5``,
    ``b = bias_sd f`` per class (``e``, ``f`` standard normal, one map for every seed);
    ``scale_sd = bias_sd = 0`` is temperature scaling's own map."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, c, generator=g)
    z[torch.arange(n), torch.randint(0, c, (n,), generator=g)] += 12.3
    m = torch.Generator().manual_seed(12345)
    w = torch.exp(scale_sd * torch.randn(c, generator=m)) / 1.5
    b = bias_sd * torch.randn(c, generator=m)
    y = torch.multinomial(torch.softmax(z * w + b, 1), 1, generator=g).squeeze(1)
    return z.numpy(), y.numpy()


def test_many_classes_auto_takes_the_structured_map_the_old_size_rule_left_out():
    """150 classes, 2,000 rows: ``C (C - 1) / N = 11``, where SMS used to be left out by size.
    On class-wise maps it cross-validates significantly better than every other candidate and
    is chosen, 0.08 nats below SVS (the old choice) on as many test rows; on temperature
    scaling's own map ``auto`` stays within 0.005 of it."""
    z, y = class_wise(0, 2000, 150, 0.3, 1.0)
    zt, yt = class_wise(1, 4000, 150, 0.3, 1.0)
    auto = AutoCalibration().fit(logits=z, labels=y)
    r = auto.cv_results_
    assert auto.chosen_ == "sms" and all(low > 0 for low in r["low"][1:] if not np.isnan(low))

    def test_nll(cal):
        return float(nll(probs=cal.predict_proba(logits=zt), labels=yt))

    svs = build_calibrator("svs").fit(logits=z, labels=y)
    assert test_nll(auto) < test_nll(svs) - 0.05
    z, y = class_wise(0, 2000, 150)
    zt, yt = class_wise(1, 4000, 150)
    ts = build_calibrator("ts").fit(logits=z, labels=y)
    assert test_nll(AutoCalibration().fit(logits=z, labels=y)) < test_nll(ts) + 0.005


def test_past_40000_rows_auto_scores_one_held_out_split():
    """With 40,001 rows the automatic folds are one held-out half of two random folds: each
    candidate is fitted once, on the other half, and scored on the held-out rows only."""
    z, y = biased_logits(1, 40_001, 3)
    auto = AutoCalibration(candidates="ts,none").fit(logits=z, labels=y)
    held = random_folds(40_001, 2, 0)[0]
    train = np.setdiff1d(np.arange(40_001), held)
    ts = build_calibrator("ts").fit(logits=z[train], labels=y[train])
    want = float(nll(probs=ts.predict_proba(logits=z[held]), labels=y[held]))
    assert auto.cv_results_["score"][0] == pytest.approx(want, rel=1e-12)
    refit = build_calibrator("ts").fit(logits=z, labels=y)
    assert auto.chosen_ == "ts" and auto.calibrator_.temperature_ == refit.temperature_


@pytest.mark.parametrize(
    ("n", "held_out"),
    [(20_000, 5), (20_001, 4), (26_667, 3), (30_000, 2), (40_000, 2), (40_001, 1), (10**6, 1)],
)
def test_automatic_folds_hold_out_20000_rows_past_20000(n, held_out):
    """Past 20,000 rows only enough of the folds are held out to hold out 20,000 rows: one
    (a single held-out split) past 40,000. A stated number of folds holds out every fold."""
    from selfcal.posthoc.auto import fold_count, folds_for, scored_folds

    assert scored_folds(fold_count("auto", n), n) == held_out
    labels = torch.zeros(n, dtype=torch.long)
    folds = folds_for(labels, "auto", 0)
    assert len(folds) == held_out and sum(map(len, folds)) >= min(n, 20_000) - held_out
    assert len(folds_for(labels, 2, 0)) == 2


@pytest.mark.parametrize(
    ("n", "folds"),
    [(100, 5), (20_000, 5), (20_001, 4), (26_667, 3), (40_000, 3), (40_001, 2), (10**6, 2)],
)
def test_automatic_folds_are_five_up_to_20000_rows_and_fewer_beyond(n, folds):
    from selfcal.posthoc.auto import fold_count

    assert fold_count("auto", n) == folds
    assert fold_count(7, n) == 7


def test_simplest_is_the_old_name_of_first():
    z, y = biased_logits(5, 300, 3)
    first = AutoCalibration(candidates=["ts", "svs"]).fit(logits=z, labels=y)
    old = AutoCalibration(candidates=["ts", "svs"], selection="simplest").fit(logits=z, labels=y)
    assert old.chosen_ == first.chosen_


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"candidates": ["magic"]}, "unknown calibrator 'magic'"),
        ({"candidates": ["ts", "auto"]}, "cannot include 'auto'"),
        ({"candidates": []}, "candidates must be calibrator names"),
        ({"candidates": ", "}, "candidates must be calibrator names"),
        ({"criterion": "auc"}, "criterion"),
        ({"n_folds": 1}, "n_folds must be an integer >= 2"),
        ({"n_folds": "many"}, "n_folds must be an integer >= 2"),
        ({"selection": "luckiest"}, "selection"),
    ],
)
def test_bad_hyperparameters_are_one_line_errors(params, message):
    z, y = biased_logits(3, 100, 3)
    with pytest.raises(ValueError, match=message):
        AutoCalibration(**params).fit(logits=z, labels=y)


def test_a_class_with_a_single_row_makes_the_choice_unreliable_and_auto_says_so():
    """The fold holding out a class's only row fits every candidate without that class: the
    cross-validated choice rests on such fits, and ``auto`` warns, naming the class; with two
    rows of every class it does not."""
    rng = np.random.default_rng(0)
    y = np.array([0, 1] * 40 + [2])  # class 2: one row
    z = 2.0 * rng.normal(size=(len(y), 3)) + 3.0 * np.eye(3)[y]
    with pytest.warns(DegenerateCalibration, match=r"single validation row \(class 2\)"):
        AutoCalibration(candidates=["ts", "svs"]).fit(logits=z, labels=y)
    y[0], z[0] = 2, z[-1]  # two rows of class 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateCalibration)
        AutoCalibration(candidates=["ts", "svs"]).fit(logits=z, labels=y)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_candidates_of_a_fold_share_one_temperature_solve_bit_for_bit(monkeypatch, dtype):
    """Within a fit, TS, TS-mix (and SVS, SMS on float64 logits) of one fold solve the same
    temperature problem once (a shared ``TemperatureFits``): the scores, the choice and the
    refitted map are those of solving it for each, bit for bit, with fewer solves."""
    from selfcal.posthoc import _temperature_fits as temperature
    from selfcal.posthoc import auto as auto_module

    z, y = biased_logits(5, 400, 5)
    z = z.astype(dtype)
    solves = []
    real = temperature._solve_temperature
    monkeypatch.setattr(temperature, "_solve_temperature", lambda *a: solves.append(1) or real(*a))

    def fitted() -> tuple[AutoCalibration, int]:
        solves.clear()
        auto = AutoCalibration(candidates=["ts", "ts-mix", "svs", "sms"]).fit(logits=z, labels=y)
        return auto, len(solves)

    shared, n_shared = fitted()
    monkeypatch.setattr(auto_module, "TemperatureFits", lambda: None)
    alone, n_alone = fitted()
    assert shared.cv_results_["score"] == alone.cv_results_["score"]
    assert shared.cv_results_["low"] == alone.cv_results_["low"]
    assert shared.chosen_ == alone.chosen_
    assert np.array_equal(shared.predict_proba(logits=z), alone.predict_proba(logits=z))
    # 5 folds x 4 candidates + the refit; shared: TS with TS-mix, and on float64 logits SVS
    # and SMS too (float32 logits reach them as a new float64 copy per fit)
    assert n_alone == 21
    assert n_shared == (5 * 3 + 1 if dtype == np.float32 else 5 + 1)


FIT_IMPORTS_PROBE = """
import sys, warnings
import numpy as np
import selfcal.posthoc._structured_scaling as structured
from selfcal.posthoc import build_calibrator, calibrator_names
from selfcal.posthoc.auto import prepare_fits

structured.NEWTON_BUDGET = 0  # matrix-type fits take the L-BFGS path, whatever the size
warnings.simplefilter("ignore")
rng = np.random.default_rng(0)
names = [n for n in calibrator_names() if n != "auto"]
prepare_fits(names)
before = set(sys.modules)
for c in (2, 3):
    z, y = 2 * rng.normal(size=(60, c)), np.arange(60) % c
    for name in names:
        calibrator = build_calibrator(name, kind="logits")
        groups = {"groups": np.arange(60) % 2} if calibrator.uses_groups else {}
        try:
            calibrator.fit(z, y, **groups)
        except ValueError:  # e.g. a binary calibrator on three classes
            pass
print(sorted(m for m in set(sys.modules) - before if not m.startswith("selfcal")))
"""


def test_fit_seconds_time_the_fits_not_first_imports():
    """``fit_seconds`` in a fresh process: every third-party module a fit imports on first use
    (scikit-learn's isotonic regression, scipy's optimisers) is imported by the calibrator's
    ``prepare_fit``, before the clock starts."""
    import subprocess
    import sys

    run = [sys.executable, "-c", FIT_IMPORTS_PROBE]
    out = subprocess.run(run, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_without_scikit_learn_isotonic_is_skipped_with_its_reason(monkeypatch):
    """A base install (no ``selfcal[full]``) has no scikit-learn: ``auto`` still fits, and its
    table says why the isotonic candidate is missing instead of the whole fit failing."""
    import sys

    monkeypatch.setitem(sys.modules, "sklearn.isotonic", None)  # its import now fails
    z, y = biased_logits(0, 300, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto = AutoCalibration(kind="logits").fit(z, y)
    i = auto.cv_results_["candidate"].index("isotonic")
    assert "needs scikit-learn" in auto.cv_results_["error"][i]
    assert "selfcal[full]" in auto.cv_results_["error"][i]
    assert auto.cv_results_["score"][i] == float("inf")
    assert auto.chosen_ != "isotonic"
    assert all(e == "" for j, e in enumerate(auto.cv_results_["error"]) if j != i)


def test_held_out_rows_predicted_in_pieces_score_the_same(monkeypatch):
    """The cross-validation predicts each fold's held-out rows a piece at a time (its
    ``(n, C)`` probabilities are never formed whole at scale): the scores and intervals equal
    those of predicting every fold at once, bit for bit."""
    from selfcal.posthoc import crossfit

    z, y = biased_logits(7, 500, 6)
    whole = AutoCalibration(candidates=["ts", "svs", "isotonic"]).fit(logits=z, labels=y)
    monkeypatch.setattr(crossfit, "PREDICT_ELEMENTS", 7 * 6)  # 7 rows a piece
    pieces = AutoCalibration(candidates=["ts", "svs", "isotonic"]).fit(logits=z, labels=y)
    for key in ("score", "low", "high", "ts_low", "ts_high"):
        assert pieces.cv_results_[key] == whole.cv_results_[key]
