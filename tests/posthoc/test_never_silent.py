"""Never silently wrong (property tests, hypothesis): every calibrator, given scores of any
magnitude (1e-8 to 1e300), with ties and tiny differences, in float16 / float32 / float64,
either raises a one-line ``ValueError`` or returns probabilities -- finite, in ``[0, 1]``, rows
summing to 1 -- from ``fit`` and ``predict_proba``, whether the new scores are like the fitted
ones or far beyond them. Every metric likewise returns a finite value within its bounds, or
raises."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from helpers.calibrators import groupless_names
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import selfcal.metrics as M
from selfcal.exceptions import LikelyProbabilities
from selfcal.posthoc import build_calibrator

BINARY_ONLY = {"platt", "quadratic"}
DTYPES = {"float16": np.float16, "float32": np.float32, "float64": np.float64}
SCALES = (1e-8, 1.0, 30.0, 1e4, 1e100, 1e300)


@st.composite
def scores(draw, binary: bool = False):
    """``(z, y, dtype)``: logits of one magnitude, with ties (few distinct values) or tiny
    differences (a common value plus 1e-9 noise), in a float dtype that holds them."""
    n = draw(st.integers(6, 40))
    c = 2 if binary else draw(st.integers(2, 5))
    dtype = draw(st.sampled_from(list(DTYPES)))
    top = {"float16": 1e4, "float32": 1e30, "float64": 1e300}[dtype]
    scale = draw(st.sampled_from([s for s in SCALES if s <= top]))
    shape = draw(st.sampled_from(["normal", "ties", "tiny"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    if shape == "ties":
        z = rng.integers(-2, 3, size=(n, c)).astype(np.float64)
    elif shape == "tiny":
        z = 1.0 + 1e-9 * rng.standard_normal((n, c))
    else:
        z = rng.standard_normal((n, c))
    y = rng.integers(0, c, size=n)
    y[:c] = np.arange(c)  # every class present: single-class labels are an error by design
    return (z * scale).astype(DTYPES[dtype]), y


def check_probabilities(p, what: str) -> None:
    p = np.asarray(p, dtype=np.float64)
    assert np.isfinite(p).all(), f"{what}: non-finite probabilities"
    assert (p >= 0).all() and (p <= 1 + 1e-9).all(), f"{what}: probabilities outside [0, 1]"
    np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-6, err_msg=f"{what}: rows do not sum to 1")


def one_line_error(fn, *args, **kwargs):
    """``fn(...)``, or ``None`` when it raises a one-line ``ValueError``."""
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:
        assert "\n" not in str(exc).strip(), str(exc)
        return None


NAMES = [n for n in groupless_names() if n != "auto"]


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_calibrator_raises_or_returns_probabilities(name, data):
    z, y = data.draw(scores(binary=name in BINARY_ONLY))
    with np.errstate(over="ignore"):  # beyond the dtype: infinity, which must be refused
        far = z * np.asarray(1e6 if z.dtype != np.float16 else 10.0, dtype=z.dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = one_line_error(build_calibrator(name).fit, logits=z, labels=y)
        if cal is None:
            return
        for what, x in (("the fitted scores", z), ("scores far beyond them", far)):
            p = one_line_error(cal.predict_proba, logits=x)
            if p is not None:
                check_probabilities(p, f"{name} on {what}")


@settings(max_examples=10, deadline=None)
@given(scores())
def test_auto_raises_or_returns_probabilities(problem):
    z, y = problem
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = one_line_error(build_calibrator("auto", n_folds=2).fit, logits=z, labels=y)
        if cal is not None:
            p = one_line_error(cal.predict_proba, logits=z)
            if p is not None:
                check_probabilities(p, "auto")


PROBABILITIES = [M.ece, M.mce, M.adaece, M.classwise_ece, M.sece, M.smooth_ece, M.kde_ece]
BOUNDED = {  # metric: its upper bound (all are >= 0)
    **dict.fromkeys([*PROBABILITIES, M.accuracy, M.aurc], 1),
    M.brier: 2,
    M.nll: np.inf,
}


@settings(max_examples=60, deadline=None)
@given(scores())
def test_a_metric_raises_or_returns_a_value_in_its_bounds(problem):
    z, y = problem
    for metric, bound in BOUNDED.items():
        value = one_line_error(metric, logits=z, labels=y)
        if value is not None:
            v = float(value)
            assert np.isfinite(v) and -1e-9 <= v <= bound + 1e-9, f"{metric.__name__} = {v}"


def test_logits_that_are_probabilities_warn():
    rng = np.random.default_rng(0)
    z = 2 * rng.standard_normal((200, 3))
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    y = rng.integers(0, 3, 200)
    with pytest.warns(LikelyProbabilities, match="pass probs="):
        M.ece(logits=p, labels=y)
    with pytest.warns(LikelyProbabilities) as record:
        build_calibrator("ts").fit(logits=p, labels=y)
    assert record[0].filename == __file__  # attributed to the caller's line, not selfcal's
    with warnings.catch_warnings():
        warnings.simplefilter("error", LikelyProbabilities)
        M.ece(logits=z, labels=y)  # logits: no warning
        M.ece(probs=p, labels=y)
        M.ece(logits=torch.tensor(p[:, :1]), labels=(y > 0).astype(int))  # one column: ambiguous


def test_predicting_beyond_the_float64_range_is_an_error_not_nan():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, 100)
    z = rng.standard_normal((100, 3)) + 2 * np.eye(3)[y]
    cal = build_calibrator("ts").fit(logits=z, labels=y)
    with pytest.raises(ValueError, match="row 0 has a logit of magnitude 1.7e\\+308"):
        cal.predict_proba(logits=np.array([[1.7e308, -1.7e308, 0.0]]))


def test_top_label_isotonic_rows_sum_to_one_when_the_runner_ups_underflow():
    """Logit gaps of 720-740: the runner-up probabilities are subnormal or 0, and their shares
    come from their logits (the module too); before, such rows summed to 0.333."""
    rng = np.random.default_rng(2)
    z_val, y = 300 * rng.standard_normal((300, 3)), rng.integers(0, 3, 300)
    cal = build_calibrator("isotonic").fit(logits=z_val, labels=y)  # f(1) well below 1
    assert cal.predict_confidence(logits=np.array([[800.0, 0.0, 0.0]]))[0] < 0.9
    z = np.array([[730.0, 0.0, 5.0], [740.0, 0.0, 0.0], [800.0, 1.0, 0.0]])
    p = cal.predict_proba(logits=z)
    check_probabilities(p, "isotonic")
    assert p[0, 2] > p[0, 1] and p[1, 1] == p[1, 2]  # in the order of the logits
    module = cal.to_module()
    np.testing.assert_allclose(torch.softmax(module(torch.tensor(z)), 1).numpy(), p, atol=1e-12)
