"""Every registered calibrator on every degenerate validation set of ``helpers.degenerate``:
the one rule of ``Calibrator.fit`` (issue 22), cell by cell.

* nothing sensible exists (labels of one class; logits too large for a likelihood fit):
  ``ValueError`` with one line;
* the data do not identify the fit: a bounded result and exactly the
  ``DegenerateCalibration`` warnings listed in :data:`WARNS` (no other calibrator warns);
* the held-out NLL is finite; a calibrator mixed with the uniform distribution never gives a
  row an NLL above ``log(C / eps)``, and a temperature-scaling fit the data do not identify is
  the identity (the held-out NLL of the scores as given).

``python scripts/degenerate_cases.py`` prints the same matrix with the numbers.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from helpers.calibrators import groupless_names
from helpers.degenerate import Case, cases
from helpers.posthoc import BINARY_ONLY

from selfcal.exceptions import DegenerateCalibration
from selfcal.metrics import nll
from selfcal.posthoc import build_calibrator
from selfcal.predictions import Predictions

PER_CLASS = {
    "vector",
    "matrix",
    "svs",
    "sms",
    "dirichlet",
    "beta",
    "isotonic-ovr",
    "histogram",
    "bbq",
    "venn-abers",
}
"""Calibrators with per-class parameters: a class missing from the labels is warned."""
LIKELIHOOD = {
    "ts",
    "ts-grid",
    "ts-mix",
    "ets",
    "vector",
    "matrix",
    "svs",
    "sms",
    "dirichlet",
    "platt",
    "quadratic",
    "beta",
}
"""Calibrators fitted by a likelihood in the logits (a 1e308 logit is a ValueError)."""
MIXED = {"isotonic", "isotonic-ovr", "histogram", "bbq", "ts-mix", "venn-abers-top"}
"""Calibrators mixed with the uniform distribution by default."""
TS_FAMILY = {"ts", "ts-mix", "vector", "matrix", "svs", "sms", "dirichlet"}
"""Calibrators whose first step is temperature scaling by NLL."""

WARNS: dict[str, set[str]] = {
    "all-correct": set(groupless_names()),
    "binary-separable": set(groupless_names()),
    "tied-errors": set(groupless_names()),
    "missing-class": PER_CLASS,
    "huge-logit": set(),
    "outlier-logit": TS_FAMILY,
    "tiny": PER_CLASS,
    "constant": set(),
    # log(0) = log(tiny) = -708 features: the ETS interval and the reference grid are too
    # narrow for these scores' temperature (their ends are warned, not returned silently)
    "zero-probs": {"ets", "ts-grid"},
    "ordinary": set(),
}
"""Who warns ``DegenerateCalibration`` on each case (everyone else must not)."""

IDENTITY = {
    "all-correct": {"ets", *TS_FAMILY},
    "binary-separable": {"ets", *TS_FAMILY},
    "tied-errors": {"ets", *TS_FAMILY},
    "outlier-logit": TS_FAMILY,
}
"""Where the rule returns the identity map (the scores unchanged; mixed with the uniform
distribution by TS-mix, SVS and SMS). ``ts-grid`` reproduces the reference code's choice
instead, and warns."""

CASES = cases()


def _raises(name: str, case: Case) -> str | None:
    """The start of the error ``name`` must raise on ``case``, or ``None``."""
    if case.expect == "error":
        return "the validation labels hold only class 0 of 3"
    if case.name == "huge-logit" and name in LIKELIHOOD:
        return r"row 7 has a logit of magnitude 1e\+308"
    return None


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("name", groupless_names())
def test_every_calibrator_follows_the_rule_on_every_case(name, case):
    (sv, yv), (st, yt) = case.val, case.test
    n_classes = sv.shape[1]
    if name in BINARY_ONLY and n_classes != 2:
        pytest.skip("binary calibrator")
    message = _raises(name, case)
    if message is not None:
        with pytest.raises(ValueError, match=message) as error:
            build_calibrator(name).fit(**{case.kind: sv}, labels=yv)
        assert "\n" not in str(error.value)
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cal = build_calibrator(name).fit(**{case.kind: sv}, labels=yv)
    degenerate = [w for w in caught if issubclass(w.category, DegenerateCalibration)]
    chosen = cal.chosen_ if name == "auto" else name  # auto warns what its choice warns
    assert bool(degenerate) == (chosen in WARNS[case.name]), [str(w.message) for w in degenerate]
    assert len(degenerate) <= 1  # one warning names every cause
    for w in degenerate:
        text = str(w.message)
        assert text.startswith(type(cal).__name__ + ": ") and "\n" not in text
        assert "returned" in text or "rest on" in text or "fitted to" in text
    p = np.asarray(cal.predict_proba(**{case.kind: st}))
    assert np.isfinite(p).all() and np.allclose(p.sum(1), 1.0, atol=1e-12)
    if name == "none":  # the baseline: the scores unchanged, exact zeros included
        q = getattr(Predictions, f"from_{case.kind}")(st).probs
        np.testing.assert_array_equal(p, np.asarray(q, dtype=np.float64))
        return
    row_nll = -np.log(p[np.arange(len(yt)), yt])
    assert np.isfinite(row_nll).all()
    raw = float(nll(**{case.kind: st}, labels=yt))
    if name in MIXED:
        eps = 1.0 / (len(yv) + 1)
        assert cal.mix_ == eps
        assert row_nll.max() <= math.log(n_classes / eps) + 1e-9
    if name in IDENTITY.get(case.name, ()):
        eps = getattr(cal, "mix_", 0.0) or getattr(cal, "ts_mix_", 0.0)
        q = np.asarray(getattr(Predictions, f"from_{case.kind}")(st).probs)
        mixed = (1 - eps) * q + eps / n_classes
        assert row_nll.mean() == pytest.approx(
            -np.log(mixed[np.arange(len(yt)), yt]).mean(), rel=1e-12
        )
        if not eps:
            assert row_nll.mean() == pytest.approx(raw, rel=1e-12)


def test_the_temperature_warning_names_the_row_that_outweighs_the_rest():
    case = next(c for c in CASES if c.name == "outlier-logit")
    with pytest.warns(DegenerateCalibration) as record:
        cal = build_calibrator("ts").fit(logits=case.val[0], labels=case.val[1])
    assert cal.temperature_ == 1.0
    text = str(record[0].message)
    assert "keeps falling as T grows to its bound e^10" in text
    assert "row 7 alone outweighs all others (a logit of magnitude 1e+06" in text
    assert text.endswith(
        "returned T = 1 (the scores unchanged). Fit on more validation rows: "
        "stratified, so that every class and some of the model's errors appear."
    )


def test_a_missing_class_is_named():
    case = next(c for c in CASES if c.name == "missing-class")
    with pytest.warns(DegenerateCalibration, match=r"hold 3 of the 4 classes \(none of class 3\)"):
        build_calibrator("isotonic-ovr").fit(logits=case.val[0], labels=case.val[1])


# ----------------------------------------------------------------------------- audit cases
def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_ets_warns_and_keeps_the_scores_when_every_error_is_an_exact_tie():
    """The reliability audit: 10 confident correct rows and two exact ties, one counted
    wrong. No row is confidently wrong, so nothing says how sharp to be; ETS returned
    T = 0.054 silently and took a test NLL from 0.378 to 2.946 (and ``auto`` chose it)."""
    z = np.array([[2.0, 0.0]] * 5 + [[0.0, 2.0]] * 5 + [[0.0, 0.0]] * 2)
    y = np.array([0] * 5 + [1] * 5 + [0, 1])
    with pytest.warns(DegenerateCalibration, match="every validation error is an exact tie"):
        ets = build_calibrator("ets").fit(logits=z, labels=y)
    assert ets.temperature_ == 1.0 and list(ets.weights_) == [0.0, 1.0, 0.0]
    zt = np.random.default_rng(0).normal(size=(50, 2))
    np.testing.assert_allclose(ets.predict_proba(logits=zt), softmax(zt), atol=1e-12)
    with pytest.warns(DegenerateCalibration):
        auto = build_calibrator("auto").fit(logits=z, labels=y)
    assert auto.chosen_ != "ets" or auto.calibrator_.temperature_ == 1.0


def test_auto_on_too_few_rows_to_cross_validate_keeps_the_scores_and_speaks_of_them():
    """13 binary rows with one row of the minority class: no candidate can be fitted on the
    folds. ``auto`` refused with a message about a fold's "10 rows"; it now returns the
    scores unchanged ('none') and says why in terms of the user's 13 rows."""
    rng = np.random.default_rng(0)
    z = rng.normal(size=(13, 2))
    y = np.array([0] * 12 + [1])
    with pytest.warns(DegenerateCalibration) as record:
        auto = build_calibrator("auto").fit(logits=z, labels=y)
    text = " ".join(str(w.message) for w in record)
    assert "these 13 validation rows" in text and "the smallest class has 1 of them" in text
    assert auto.chosen_ == "none"
    np.testing.assert_allclose(auto.predict_proba(logits=z), softmax(z), atol=1e-12)


@pytest.mark.parametrize("name", ["platt", "quadratic", "beta", "isotonic-ovr", "histogram", "bbq"])
def test_a_class_with_a_single_row_warns_where_it_alone_shapes_the_map(name):
    """The audit's 13 binary rows with one of the minority class: Platt, quadratic and beta
    scaling took a test NLL from 0.46 to 1.2-1.65, silently. A map that a class's rows
    alone shape now warns when a class has a single row; temperature scaling (one shared
    parameter) does not."""
    y = np.array([0] * 12 + [1])
    z = np.random.default_rng(0).normal(size=(13, 2)) + 1.5 * np.eye(2)[y]
    with pytest.warns(DegenerateCalibration, match="class 1 has a single validation row"):
        build_calibrator(name).fit(logits=z, labels=y)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_calibrator("ts").fit(logits=z, labels=y)
    assert not any("single validation row" in str(w.message) for w in caught)


@pytest.mark.parametrize("name", ["beta", "isotonic-ovr", "platt", "histogram"])
def test_errors_that_are_all_exact_ties_warn_where_the_map_follows_the_rows(name):
    """The audit's float32 case: labels from float64 argmaxes, so the only errors are rows
    whose logits tie in float32. No row is confidently wrong; beta calibration and
    one-vs-rest isotonic regression fitted silently (test NLL 2.62 -> 9.80 and 8.30)."""
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 60)
    z = 3.0 * np.eye(2)[y] + 0.1 * rng.normal(size=(60, 2))
    z[:4] = 1.0  # exact ties, labelled 1: wrong by the first-index rule
    y[:4] = 1
    with pytest.warns(
        DegenerateCalibration, match=r"every validation error \(4 of 60\) is an exact tie"
    ):
        build_calibrator(name).fit(logits=z, labels=y)


TINY_TIES = {
    # the audit's repro_auto_ties_4rows.py: 4 rows of integer logits, labels of 2 of the 4
    # classes, every row wrong only by a tie (auto: test NLL 0.81 -> 2.46, silently)
    "4 rows, all wrong by a tie": (
        np.array([[1, 1, 0, 0], [3, 3, 0, 2], [0, 1, 1, 0], [2, 0, 2, 1]], dtype=float),
        np.array([1, 1, 2, 2]),
    ),
    "3 rows, one wrong by a tie": (
        np.array([[2, 0, 0], [0, 3, 0], [1, 1, 0]], dtype=float),
        np.array([0, 1, 1]),
    ),
    "2 binary rows, one wrong by a tie": (
        np.array([[1, 1], [2, 0]], dtype=float),
        np.array([1, 0]),
    ),
}


@pytest.mark.parametrize("rows", TINY_TIES)
@pytest.mark.parametrize("name", groupless_names())
def test_errors_that_are_all_exact_ties_warn_for_every_calibrator(name, rows):
    """The audit's tiny sets whose only errors are exact ties: ``auto``, top-label isotonic
    and ``none`` (and ``ts-grid``) fitted without the warning the all-correct set gives
    (``auto`` and isotonic: test NLL 0.56 -> 1.47, 0.81 -> 2.46). Every calibrator now warns;
    where :meth:`fit` warns (not the temperature fits, which find the NLL's minimiser at
    their bound, and say so), the warning says what the data cannot identify."""
    z, y = TINY_TIES[rows]
    if name in BINARY_ONLY and z.shape[1] != 2:
        pytest.skip("binary calibrator")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_calibrator(name).fit(logits=z, labels=y)
    text = " ".join(str(w.message) for w in caught if w.category is DegenerateCalibration)
    assert text, f"{name} fitted silently"
    if name not in {"auto", "ets", *TS_FAMILY}:
        wrong = int((z.argmax(1) != y).sum())
        assert f"every validation error ({wrong} of {len(y)}) is an exact tie" in text
        assert "cannot say how confident to be" in text
