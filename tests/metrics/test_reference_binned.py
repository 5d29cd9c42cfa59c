"""ECE / MCE / AdaECE / classwise ECE against independent implementations.

Peers: torchmetrics (top-label and binary), netcal (top-label; positive-class for binary), and
a literal float64 transcription of the reference code of Mukhoti et al. (``ECELoss``,
``AdaptiveECELoss``, ``ClasswiseECELoss``) written here. Where conventions differ, a test below
pins the difference.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from helpers.cases import case_kwargs, case_probs, make_case

from selfcal import Predictions
from selfcal.metrics import adaece, classwise_ece, ece, mce

pytestmark = pytest.mark.reference
M = 15


# ----------------------------------------------------------------- literal reference code
def flc_ece(conf, correct, n_bins=M, lowers=None, uppers=None, norm="l1", closed="right"):
    """Loop over bins with ``lower < conf <= upper``, as the reference ECELoss does
    (``closed="left"``: ``lower <= conf < upper``)."""
    if lowers is None:
        edges = np.array([k / n_bins for k in range(n_bins + 1)])
        lowers, uppers = edges[:-1], edges[1:]
    n = len(conf)
    total, worst = 0.0, 0.0
    for lo, hi in zip(lowers, uppers):
        if closed == "right":
            inside = (conf > lo) & (conf <= hi)
        else:
            inside = (conf >= lo) & (conf < hi)
        if inside.sum() == 0:
            continue
        size = inside.sum()
        gap = abs(math.fsum(correct[inside]) / size - math.fsum(conf[inside]) / size)
        total += inside.sum() / n * (gap if norm == "l1" else gap**2)
        worst = max(worst, gap)
    return {"l1": total, "l2": math.sqrt(total), "max": worst}[norm]


def flc_adaptive_edges(conf, n_bins=M):
    return np.interp(np.linspace(0, len(conf), n_bins + 1), np.arange(len(conf)), np.sort(conf))


def flc_classwise(probs, labels, n_bins=M):
    c = probs.shape[1]
    return np.mean([flc_ece(probs[:, j], (labels == j).astype(float), n_bins) for j in range(c)])


def top_label(case):
    p = case_probs(case)
    conf = p.max(1)
    correct = (p.argmax(1) == case["labels"]).astype(float)
    return p, conf, correct


def on_edge(values, n_bins=M, tol=1e-6):
    """Values within float32 rounding of an equal-width edge (definitions may differ there)."""
    k = np.round(values * n_bins)
    return np.abs(values - k / n_bins) <= tol


# ----------------------------------------------------------------- transcription: all cases
def test_ece_mce_match_reference_code(case):
    p, conf, correct = top_label(case)
    for norm in ("l1", "l2"):
        assert ece(**case_kwargs(case), norm=norm) == pytest.approx(
            flc_ece(conf, correct, norm=norm), abs=1e-12
        )
    assert mce(**case_kwargs(case)) == pytest.approx(flc_ece(conf, correct, norm="max"), abs=1e-12)


def test_adaece_matches_reference_code_when_minimum_is_kept(case):
    """Reference AdaECE drops samples equal to the minimum confidence (its first bin is open on
    the left); ours keeps them. Opening bin 0 at ``-inf`` in the transcription makes them equal.
    The confidences are taken from selfcal so that only the binning is compared: with tied
    confidences an edge equals a data value, and a 1-ulp softmax difference flips membership."""
    pred = (
        Predictions.from_logits(case["logits"], case["labels"])
        if "logits" in case
        else Predictions.from_probs(case["probs"], case["labels"])
    )
    conf, correct = pred.confidence.numpy(), pred.correct.numpy()
    edges = flc_adaptive_edges(conf)
    lowers = edges[:-1].copy()
    lowers[0] = -np.inf
    uppers = edges[1:].copy()
    uppers[-1] = np.inf
    expected = flc_ece(conf, correct, lowers=lowers, uppers=uppers)
    assert adaece(**case_kwargs(case)) == pytest.approx(expected, abs=1e-12)


def test_classwise_matches_reference_code_away_from_zero(case):
    p = case_probs(case)
    if (p == 0).any():
        pytest.skip("exact zeros: pinned in test_classwise_counts_exact_zero_probabilities")
    assert classwise_ece(**case_kwargs(case)) == pytest.approx(
        flc_classwise(p, case["labels"]), abs=1e-12
    )


# ----------------------------------------------------------------- torchmetrics
def tm_ce(p, y, norm="l1", task="multiclass"):
    import torchmetrics.functional as tmf

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if task == "binary":
            return tmf.calibration_error(
                torch.tensor(p), torch.tensor(y), task="binary", n_bins=M, norm=norm
            ).item()
        return tmf.calibration_error(
            torch.tensor(p),
            torch.tensor(y),
            task="multiclass",
            num_classes=p.shape[1],
            n_bins=M,
            norm=norm,
        ).item()


def test_torchmetrics_where_definitions_coincide(case):
    """Same number to 1e-6 when no confidence sits on a bin edge or at 1.0 (torchmetrics bins
    ``[lower, upper)`` with an extra bin for exactly 1.0) and inputs are float32-exact
    (torchmetrics casts confidences to float32). Its float32 sums are within 1e-6 up to a few
    hundred samples; beyond, 1e-5 (the drift is pinned in the next-but-one test)."""
    p, conf, _ = top_label(case)
    p32 = p.astype(np.float32).astype(np.float64)
    p32 /= p32.sum(1, keepdims=True)
    p32 = p32.astype(np.float32)
    conf32 = p32.max(1).astype(np.float64)
    if on_edge(conf32).any() or (conf32 >= 1 - 1e-6).any():
        pytest.skip("definitions differ (edge / 1.0); pinned separately")
    y = case["labels"]
    tol = 1e-6 if len(y) <= 300 else 1e-5
    for norm in ("l1", "l2", "max"):
        ours = ece(probs=p32, labels=y, norm=norm)
        assert ours == pytest.approx(tm_ce(p32, y, norm), abs=tol)


def test_torchmetrics_differs_on_edges_and_at_one():
    """Pinned: a confidence of exactly 0.6 (an edge for M=5... here 9/15) lands in bin
    ``(8/15, 9/15]`` for us and the reference code, in ``[9/15, 10/15)`` for torchmetrics;
    confidence 1.0 gets torchmetrics' extra bin."""
    conf = np.array([9 / 15, 9 / 15, 0.62, 1.0, 0.99])
    correct = np.array([1, 1, 0, 0, 1])
    probs = np.stack([conf, 1 - conf], 1)
    labels = np.where(correct == 1, 0, 1)
    ours = ece(probs=probs, labels=labels)
    assert ours == pytest.approx(flc_ece(conf, correct.astype(float)), abs=1e-12)
    # torchmetrics' own convention, written out: [lower, upper) with a bin at 1.0
    tm_lowers = np.array([k / 15 for k in range(16)])
    tm_uppers = np.append(tm_lowers[1:], np.inf)
    tm_expected = flc_ece(
        conf, correct.astype(float), lowers=tm_lowers, uppers=tm_uppers, closed="left"
    )
    theirs = tm_ce(probs.astype(np.float32), labels)
    assert theirs == pytest.approx(tm_expected, abs=1e-6)
    assert abs(theirs - ours) > 1e-3


def test_torchmetrics_float32_accumulation_drifts():
    """Pinned: torchmetrics sums in float32; on 2·10⁶ samples it drifts from the exact value by
    more than 1e-6 while ours (float64) matches a math.fsum transcription to 1e-12."""
    rng = np.random.default_rng(7)
    n = 2_000_000
    conf = rng.uniform(0.5, 1.0, n).astype(np.float32).astype(np.float64)
    correct = (rng.uniform(size=n) < conf**2).astype(float)
    probs = np.stack([conf, 1 - conf], 1)
    labels = np.where(correct == 1, 0, 1)
    exact = flc_ece(conf, correct)
    ours = ece(probs=probs, labels=labels)
    assert ours == pytest.approx(exact, abs=1e-12)
    assert abs(tm_ce(probs.astype(np.float32), labels) - exact) > 1e-6


def test_torchmetrics_binary_is_positive_class_which_is_our_classwise(case):
    """torchmetrics' binary task scores the positive class, not the top label: it equals our
    classwise ECE on two classes (away from edges), not our top-label ECE."""
    if "probs" in case or case_probs(case).shape[1] != 2:
        pytest.skip("binary logits cases only")
    p = case_probs(case)
    if on_edge(p[:, 1]).any() or (p[:, 1] >= 1 - 1e-6).any() or (p[:, 1] <= 1e-6).any():
        pytest.skip("edges")
    y = case["labels"]
    assert classwise_ece(probs=p, labels=y) == pytest.approx(
        tm_ce(p[:, 1].astype(np.float32), y, task="binary"), abs=1e-6
    )


# ----------------------------------------------------------------- netcal
def netcal_measure(cls, p, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(cls(bins=M).measure(p, y))


def test_netcal_top_label_where_definitions_coincide(case):
    """netcal bins with numpy's ``[lower, upper)`` (last bin closed) after clipping to
    ``[eps, 1 - eps]``; with more than two distinct labels it scores the top label."""
    from netcal.metrics import ECE, MCE

    p, conf, _ = top_label(case)
    y = case["labels"]
    if len(np.unique(y)) <= 2 or on_edge(conf).any():
        pytest.skip("netcal switches to positive-class mode / edge convention")
    assert ece(probs=p, labels=y) == pytest.approx(netcal_measure(ECE, p, y), abs=1e-9)
    assert mce(probs=p, labels=y) == pytest.approx(netcal_measure(MCE, p, y), abs=1e-9)


def test_netcal_binary_mode_is_positive_class():
    """Pinned: netcal treats any problem with at most two distinct labels as positive-class
    calibration (even with two probability columns): equal to our classwise ECE, not our
    top-label ECE."""
    from netcal.metrics import ECE

    rng = np.random.default_rng(3)
    p1 = rng.uniform(0.01, 0.99, 3000)
    y = (rng.uniform(size=3000) < p1**1.5).astype(int)
    p = np.stack([1 - p1, p1], 1)
    theirs = netcal_measure(ECE, p, y)
    assert classwise_ece(probs=p, labels=y) == pytest.approx(theirs, abs=1e-9)
    assert abs(ece(probs=p, labels=y) - theirs) > 1e-3


# ----------------------------------------------------------------- pinned conventions
def test_classwise_counts_exact_zero_probabilities():
    """Pinned: the reference ClasswiseECELoss drops class probabilities of exactly 0 from every
    bin (its first bin is open at 0) while still dividing by N; we count them in bin 0."""
    probs = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    labels = np.array([0, 1, 2, 2])
    ours = classwise_ece(probs=probs, labels=labels)
    edges = np.array([k / M for k in range(M + 1)])
    lowers = edges[:-1].copy()
    lowers[0] = -np.inf
    expected = np.mean(
        [
            flc_ece(probs[:, j], (labels == j).astype(float), lowers=lowers, uppers=edges[1:])
            for j in range(3)
        ]
    )
    assert ours == pytest.approx(expected, abs=1e-12)
    assert abs(ours - flc_classwise(probs, labels)) > 1e-3


def test_many_cases_are_really_compared():
    """Guard against the skips above silently hollowing out the comparisons."""
    compared_tm = compared_nc = 0
    for seed in range(200):
        case = make_case(seed)
        p, conf, _ = top_label(case)
        p32 = p.astype(np.float32).astype(np.float64)
        if not (on_edge(p32.max(1)).any() or (p32.max(1) >= 1 - 1e-6).any()):
            compared_tm += 1
        if len(np.unique(case["labels"])) > 2 and not on_edge(conf).any():
            compared_nc += 1
    assert compared_tm >= 80 and compared_nc >= 60
