"""No fit hangs: the structured fits choose Newton's method only while one Hessian fits the
budget (its ``N P^2`` to form and ``P^3`` to factor, so a few rows of many classes are not
exempt), and each solver stops at its iteration cap. The reliability audit's case -- matrix
scaling on 3 rows x 138 classes took the Newton path and was still in its third iteration
after 20 minutes at 9.1 GB -- now takes L-BFGS and returns valid probabilities."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from selfcal.posthoc import build_calibrator
from selfcal.posthoc._structured_scaling import NEWTON_BUDGET, VECTOR_NEWTON_BUDGET, use_newton


@given(n=st.integers(1, 10**7), c=st.integers(2, 2000), vector=st.booleans())
def test_newton_only_while_one_hessian_fits_the_budget(n, c, vector):
    p = 2 * c if vector else c * (c + 1)
    budget = VECTOR_NEWTON_BUDGET if vector else NEWTON_BUDGET
    assert use_newton(n, c, vector) == (n * p**2 + p**3 <= budget)
    if use_newton(n, c, vector):
        assert p**3 <= budget  # however few the rows


@pytest.mark.parametrize("name", ["matrix", "sms", "dirichlet", "vector", "svs"])
def test_few_rows_of_many_classes_fit_and_predict(name):
    rng = np.random.default_rng(0)
    z = (1e4 + rng.standard_normal((3, 138))).astype(np.float32)  # the audit's fuzzed case
    y = rng.integers(0, 138, 3)
    assert not use_newton(3, 138, vector=name in ("vector", "svs"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # three rows: the degenerate-fit warnings are expected
        probs = build_calibrator(name).fit(logits=z, labels=y).predict_proba(logits=z)
    assert probs.shape == (3, 138)
    assert np.isfinite(probs).all() and np.allclose(probs.sum(1), 1.0)
