"""Refinement and calibration loss (Berta et al., 2025; :mod:`selfcal.recalibration`): against
probmetrics' ``refinement_*`` / ``calib-err_*`` metrics (same rows and its 5-fold cross-fit, on
its own folds), against their definitions, their bootstrap intervals, and one fit shared
explicitly (``terms=``), never kept between calls."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.posthoc import make_logits, softmax

import selfcal.recalibration as recalibration
from selfcal import Predictions
from selfcal.evaluation import evaluate, point_estimates
from selfcal.metrics import bootstrap_ci, brier, nll
from selfcal.metrics._api import Metric
from selfcal.posthoc import build_calibrator
from selfcal.recalibration import (
    LOSSES,
    TERMS,
    calibration_loss,
    recalibrated,
    recalibrated_terms,
    refinement_loss,
)


def sampled_labels(z: np.ndarray, seed: int) -> np.ndarray:
    """Labels drawn from ``softmax(z)``: the scores are calibrated by construction."""
    p = softmax(z)
    rng = np.random.default_rng(seed)
    return np.array([rng.choice(p.shape[1], p=row) for row in p])


@pytest.mark.parametrize("c", [2, 4])
@pytest.mark.parametrize("loss", ["nll", "brier"])
def test_probmetrics_agrees_on_the_same_rows_and_cross_fitted(c, loss):
    metrics = pytest.importorskip("probmetrics.metrics")
    from sklearn.model_selection import StratifiedKFold

    z, y = make_logits(3, 600, c)
    p = softmax(z).astype(np.float32)
    name = {"nll": "logloss", "brier": "brier"}[loss]
    names = [
        f"refinement_{name}_ts-mix_all",
        f"calib-err_{name}_ts-mix_all",
        f"refinement_{name}_ts-mix_cv-5",
        f"calib-err_{name}_ts-mix_cv-5",
    ]
    theirs = metrics.Metrics.from_names(names).compute_all_from_labels_probs(
        torch.as_tensor(y), torch.as_tensor(p)
    )
    folds = [
        rows
        for _, rows in StratifiedKFold(5, shuffle=True, random_state=0).split(np.zeros(len(y)), y)
    ]
    options = {"loss": loss, "recalibrator": "ts-mix"}
    ours = {
        names[0]: refinement_loss(probs=p, labels=y, **options),
        names[1]: calibration_loss(probs=p, labels=y, **options),
        names[2]: refinement_loss(probs=p, labels=y, folds=folds, **options),
        names[3]: calibration_loss(probs=p, labels=y, folds=folds, **options),
    }
    for key in names:  # probmetrics computes in float32
        assert ours[key] == pytest.approx(float(theirs[key]), abs=2e-6), key


def test_the_definitions():
    z, y = make_logits(4, 500, 5)
    pred = Predictions.from_logits(z, y)
    ts = build_calibrator("ts").fit(logits=z, labels=y)
    after = Predictions.from_probs(ts.predict_proba(logits=z), y)
    assert refinement_loss(pred) == pytest.approx(float(nll(after)), abs=1e-12)
    assert calibration_loss(pred) == pytest.approx(float(nll(pred) - nll(after)), abs=1e-12)
    assert refinement_loss(pred, loss="brier") == pytest.approx(float(brier(after)), abs=1e-12)
    sms = build_calibrator("sms").fit(logits=z, labels=y)
    after_sms = Predictions.from_probs(sms.predict_proba(logits=z), y)
    assert refinement_loss(pred, recalibrator="sms") == pytest.approx(
        float(nll(after_sms)), abs=1e-12
    )


def test_cross_fitting_uses_every_row_once_and_each_fold_s_own_fit():
    z, y = make_logits(5, 300, 3)
    pred = Predictions.from_logits(z, y)
    folds = [np.arange(0, 300, 3), np.arange(1, 300, 3), np.arange(2, 300, 3)]
    out = recalibrated(pred, "ts", folds).probs.numpy()
    for rows in folds:
        train = np.setdiff1d(np.arange(300), rows)
        fit = build_calibrator("ts").fit(logits=z[train], labels=y[train])
        np.testing.assert_allclose(out[rows], fit.predict_proba(logits=z[rows]), atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_temperature_scaling_never_has_a_negative_in_sample_calibration_loss(seed):
    """The NLL of TS at its optimum is at most the NLL at ``T = 1``: the same-rows calibration
    loss is >= 0; on calibrated scores it is near 0, and cross-fitted it is smaller still."""
    z, _ = make_logits(seed, 800, 4)
    y = sampled_labels(z, seed)
    pred = Predictions.from_logits(z, y)
    same_rows = float(calibration_loss(pred))
    assert 0.0 <= same_rows < 0.01
    assert float(calibration_loss(pred, folds=5)) < same_rows
    overconfident = Predictions.from_logits(3 * z, y)
    assert float(calibration_loss(overconfident)) > 0.1


def test_bootstrap_intervals_condition_on_the_fit_or_refit_it():
    z, y = make_logits(6, 400, 4)
    pred = Predictions.from_logits(z, y)
    w = torch.from_numpy(np.random.default_rng(0).multinomial(400, np.full(400, 1 / 400), 3))
    w = w.double()
    fixed = refinement_loss.core(pred, w)
    after = recalibrated(pred, "ts")
    torch.testing.assert_close(fixed, nll.core(after, w))
    refit = refinement_loss.core(pred, w, refit=True)
    for b in range(3):  # the resampled rows, built here, fitted from scratch
        rows = np.repeat(np.arange(400), w[b].long().numpy())
        again = refinement_loss(logits=z[rows], labels=y[rows])
        assert float(refit[b]) == pytest.approx(again, abs=1e-12)
    torch.testing.assert_close(
        calibration_loss.core(pred, w, refit=True), nll.core(pred, w) - refit
    )
    interval = bootstrap_ci(calibration_loss, pred, n_resamples=50)
    assert interval.low <= interval.value <= interval.high


def test_bad_options_are_one_line_errors():
    z, y = make_logits(7, 100, 3)
    pred = Predictions.from_logits(z, y)
    with pytest.raises(ValueError, match="loss"):
        refinement_loss(pred, loss="ece")
    with pytest.raises(ValueError, match="unknown|calibrator"):
        refinement_loss(pred, recalibrator="nope")
    with pytest.raises(ValueError, match="exactly once"):
        refinement_loss(pred, folds=[np.arange(50), np.arange(40, 100)])
    with pytest.raises(ValueError, match="folds"):
        refinement_loss(pred, folds=1)
    with pytest.raises(ValueError, match="refit"):
        refinement_loss.core(
            pred, torch.ones(2, 100, dtype=torch.float64), folds=[np.arange(100)], refit=True
        )


def counted_fits(monkeypatch) -> list[str]:
    """The recalibrators fitted on every row from now on, in order."""
    calls: list[str] = []
    original = recalibration._fitted

    def counted(pred, recalibrator):
        calls.append(recalibrator)
        return original(pred, recalibrator)

    monkeypatch.setattr(recalibration, "_fitted", counted)
    return calls


def test_one_fit_serves_the_point_the_bootstrap_and_the_calibration_loss(monkeypatch):
    """``selfcal evaluate`` asks for both parts and their intervals: one recalibration of
    ``pred``, handed to every call as ``terms=``, serves them all, bit for bit as each call's
    own fit; nothing is kept between calls, so calls without ``terms`` fit anew."""
    z, y = make_logits(8, 200, 3)
    pred = Predictions.from_logits(z, y)
    own = {f: bootstrap_ci(f, pred, n_resamples=20) for f in (refinement_loss, calibration_loss)}
    calls = counted_fits(monkeypatch)
    terms = recalibrated_terms(pred, "nll")
    for f in (refinement_loss, calibration_loss):
        assert bootstrap_ci(f, pred, n_resamples=20, terms=terms) == own[f]
    assert len(calls) == 1
    report = evaluate(pred, keys=["refinement_loss", "calibration_loss"], n_resamples=20)
    assert len(calls) == 2
    assert report["refinement_loss"] == own[refinement_loss]
    assert report["calibration_loss"] == own[calibration_loss]
    points = point_estimates(pred, ["nll_refinement", "calibration_loss"])
    assert len(calls) == 3
    assert points["nll_refinement"] == own[refinement_loss].value
    assert points["calibration_loss"] == own[calibration_loss].value
    refinement_loss(pred)
    refinement_loss(pred)
    assert len(calls) == 5


def test_nothing_outlives_a_call():
    """The module keeps no fit: no module-level tensor, and a repeated call returns a new
    result of the same bits."""
    z, y = make_logits(9, 200, 3)
    pred = Predictions.from_logits(z, y)
    first, second = recalibrated_terms(pred, "nll"), recalibrated_terms(pred, "nll")
    assert first.shape == (200,) and first is not second and torch.equal(first, second)
    kept = [
        name
        for name, value in vars(recalibration).items()
        if isinstance(value, (torch.Tensor, tuple, list)) and not name.startswith("__")
    ]
    assert kept == []


def test_terms_of_another_shape_are_refused():
    z, y = make_logits(9, 200, 3)
    pred = Predictions.from_logits(z, y)
    with pytest.raises(ValueError, match="terms must be the"):
        refinement_loss(pred, terms=torch.zeros(199, dtype=torch.float64))
    with pytest.raises(ValueError, match="terms must be the"):
        calibration_loss(pred, terms=np.zeros(200))


@pytest.mark.parametrize("f", [refinement_loss, calibration_loss], ids=lambda f: f.__name__)
def test_the_pair_are_metrics_of_this_module(f):
    assert isinstance(f, Metric)
    assert f.__module__ == "selfcal.recalibration"
    assert not (f.differentiable or f.takes_bins or f.higher_is_better)


@pytest.mark.parametrize("recalibrator", ["ts", "ts-mix", "sms"])
@pytest.mark.parametrize("loss", ["nll", "brier"])
def test_the_recalibrated_rows_are_scored_chunk_by_chunk(monkeypatch, recalibrator, loss):
    """Fitted on every row, the recalibrated probabilities are formed and scored one chunk of
    rows at a time (here 64 rows a chunk), never as one ``(N, C)`` array; for temperature
    scaling and TS-mix (row-wise maps) the terms equal the whole array's bit for bit, for SMS
    (a matrix product per chunk) to round-off."""
    from selfcal import predictions

    z, y = make_logits(10, 300, 7)
    pred = Predictions.from_logits(z, y)
    whole = LOSSES[loss].core(recalibrated(pred, recalibrator), None)
    terms = TERMS[loss](recalibrated(pred, recalibrator))
    monkeypatch.setattr(predictions, "DEVICE_CHUNK_ELEMENTS", 7 * 64)
    built = []
    original = Predictions.from_probs

    def recorded(probs, labels=None):
        built.append(len(probs))
        return original(probs, labels)

    monkeypatch.setattr(recalibration.Predictions, "from_probs", recorded)
    chunked = recalibrated_terms(Predictions.from_logits(z, y), loss, recalibrator)
    assert built == [64, 64, 64, 64, 44]
    value = refinement_loss(Predictions.from_logits(z, y), loss=loss, recalibrator=recalibrator)
    if recalibrator == "sms":
        torch.testing.assert_close(chunked, terms, rtol=0, atol=1e-12)
        assert value == pytest.approx(float(whole), abs=1e-12)
    else:
        assert torch.equal(chunked, terms)
        assert value == float(whole)
