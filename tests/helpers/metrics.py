"""What several metric tests share: the hypothesis strategy of small random problems."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

# Coarse logits such as [[1, 0]] can look like probabilities, and a metric given them as
# logits= says so (LikelyProbabilities) while reading them as logits, as the tests mean them.
LOGITS_LIKE_PROBABILITIES = "ignore::selfcal.exceptions.LikelyProbabilities"
"""The ``filterwarnings`` of a test that passes :func:`problems`' logits by name."""


@st.composite
def problems(draw, max_n=60):
    n = draw(st.integers(1, max_n))
    c = draw(st.integers(2, 6))
    coarse = draw(st.booleans())  # coarse logits make ties
    elems = st.integers(-3, 3).map(float) if coarse else st.floats(-20, 20)
    z = draw(arrays(np.float64, (n, c), elements=elems))
    y = draw(arrays(np.int64, n, elements=st.integers(0, c - 1)))
    return z, y


REPORT_KEYS = [
    "accuracy",
    "nll",
    "brier",
    "refinement_loss",
    "calibration_loss",
    "ece",
    "mce",
    "adaece",
    "classwise_ece",
    "sece",
    "kde_ece",
    "smooth_ece",
    "debiased_ece",
    "aurc",
]
"""What ``selfcal evaluate`` reports, in its order (written out here, independently of
``selfcal.evaluation.METRICS``, which the tests check against it)."""
