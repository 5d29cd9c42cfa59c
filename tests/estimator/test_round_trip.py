"""The calibrator-file schema is what the fits write: every registered calibrator, fitted on the
reliability audit's fuzz shapes, saves a file its own loader reads back into a calibrator
that predicts bit for bit what the fitted one does (and saves the same bytes again).

A fitted BBQ used to write a file its loader refused (``table_sizes_ = [0]`` from
``logits [[0, 0], [0, 0]]``, labels ``[0, 1]``; also 842 x 4 and 680 x 16 float16
probabilities): the schema declared a range the fit does not keep. Hypothesis draws the
audit's scenarios -- 2-row sets, integer (tied) logits, float16 probabilities, huge logits, a
class missing, every prediction correct -- bounded in rows and classes; the audit's own cases
are explicit examples.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from helpers.posthoc import BINARY_ONLY, group_kwargs, groupless_names
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from selfcal.conformal import SplitConformal
from selfcal.posthoc import CALIBRATORS, Calibrator

SCENARIOS = ("normal", "ties", "huge", "float16-probs", "float16-huge-probs")
LABELS = ("uniform", "argmax", "missing")


def scores_and_labels(
    n: int, c: int, scenario: str, labels: str, seed: int
) -> tuple[str, np.ndarray, np.ndarray]:
    """``(kind, scores, labels)`` of one fuzz case: logits ``normal`` (3 N(0, 1)), ``ties``
    (integers in [-2, 2]) or ``huge`` (1e4 N(0, 1)); ``float16-probs``: a softmax of 4 N(0, 1)
    cast to float16 (rows summing to 1 within float16's rounding, exact zeros and ones);
    ``float16-huge-probs``: of 1e4 N(0, 1) (every row one-hot: a class's column of
    zeros and ones, which BBQ maps by a constant).
    Labels ``uniform``, ``argmax`` (every prediction correct) or ``missing`` (from the first
    half of the classes only)."""
    rng = np.random.default_rng(seed)
    if scenario == "ties":
        z = rng.integers(-2, 3, (n, c)).astype(np.float64)
    else:
        scale = {"normal": 3.0, "huge": 1e4, "float16-probs": 4.0, "float16-huge-probs": 1e4}
        z = rng.normal(size=(n, c)) * scale[scenario]
    if labels == "argmax":
        y = z.argmax(1)
    else:
        y = rng.integers(0, max(2, c // 2) if labels == "missing" else c, n)
    y[:2] = [0, 1]  # two classes at least (one is a ValueError by design)
    if not scenario.endswith("probs"):
        return "logits", z, y
    e = np.exp(z - z.max(1, keepdims=True))
    return "probs", (e / e.sum(1, keepdims=True)).astype(np.float16), y


def round_trip(name: str, kind: str, s: np.ndarray, y: np.ndarray, folder: Path) -> None:
    """Fit ``name``, save, load: the loaded calibrator predicts bit for bit as the fitted
    one and saves the same bytes. A fit the data make impossible (a ``ValueError``, e.g. a
    likelihood fit on 1e4-sized logits) has nothing to save."""
    if name in BINARY_ONLY and s.shape[1] != 2:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the degenerate cases warn by design
        groups = group_kwargs(CALIBRATORS[name](), len(y))  # for a calibrator using groups
        try:
            fitted = CALIBRATORS[name]().fit(labels=y, **{kind: s}, **groups)
        except ValueError:
            return
        path = folder / f"{name}.json"
        fitted.save(path)
        loaded = Calibrator.load(path)
        for method in ("predict_proba", "predict_confidence"):
            expected = getattr(fitted, method)(**{kind: s}, **groups)
            np.testing.assert_array_equal(getattr(loaded, method)(**{kind: s}, **groups), expected)
    again = folder / f"{name}-again.json"
    loaded.save(again)
    assert again.read_bytes() == path.read_bytes()


@pytest.mark.parametrize("name", groupless_names())
@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    n=st.integers(2, 40),
    c=st.integers(2, 6),
    scenario=st.sampled_from(SCENARIOS),
    labels=st.sampled_from(LABELS),
    seed=st.integers(0, 2**16),
)
@example(n=2, c=2, scenario="ties", labels="argmax", seed=2)
@example(n=842, c=4, scenario="float16-huge-probs", labels="uniform", seed=4127)
@example(n=680, c=16, scenario="float16-probs", labels="uniform", seed=49909)
@example(n=680, c=16, scenario="float16-huge-probs", labels="missing", seed=49909)
def test_every_fitted_calibrator_loads_back_and_predicts_the_same(
    name, n, c, scenario, labels, seed, tmp_path
):
    kind, s, y = scores_and_labels(n, c, scenario, labels, seed)
    round_trip(name, kind, s, y, tmp_path)


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    n=st.integers(2, 40),
    c=st.integers(2, 6),
    scenario=st.sampled_from(SCENARIOS),
    labels=st.sampled_from(LABELS),
    seed=st.integers(0, 2**16),
    nonconformity=st.sampled_from(["lac", "aps", "raps", "saps"]),
    mondrian=st.booleans(),
)
def test_a_fitted_conformal_predictor_loads_back_and_predicts_the_same(
    n, c, scenario, labels, seed, nonconformity, mondrian, tmp_path
):
    """The same for the split-conformal predictor (its threshold can be ``+inf``: too few
    rows for ``alpha``)."""
    kind, s, y = scores_and_labels(n, c, scenario, labels, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted = SplitConformal(alpha=0.1, nonconformity=nonconformity, mondrian=mondrian)
        fitted.fit(labels=y, **{kind: s})
        fitted.save(tmp_path / "cp.json")
        loaded = SplitConformal.load(tmp_path / "cp.json")
        expected = fitted.predict_set(**{kind: s})
        np.testing.assert_array_equal(loaded.predict_set(**{kind: s}), expected)


def test_the_audit_s_bbq_of_two_rows_loads_back(tmp_path):
    """The audit's minimal case: a constant map (``table_sizes_ = [0]``: one bin, no cut
    point) was written, then refused on loading (``must be in [1, inf]``)."""
    z, y = np.zeros((2, 2)), np.array([0, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted = CALIBRATORS["bbq"]().fit(logits=z, labels=y)
    assert fitted.table_sizes_.tolist() == [0]
    fitted.save(tmp_path / "bbq.json")
    loaded = Calibrator.load(tmp_path / "bbq.json")
    zt = np.random.default_rng(0).normal(size=(20, 2))
    np.testing.assert_array_equal(loaded.predict_proba(logits=zt), fitted.predict_proba(logits=zt))
