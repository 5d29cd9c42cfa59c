"""One value whatever the container (property tests, hypothesis): every metric and every
calibrator gives bit-identical results for the same scores passed as a numpy array (C or
Fortran order), a contiguous torch tensor, or a non-contiguous torch view -- ties included,
where a last-bit difference once moved AdaECE's equal-mass edges."""

from __future__ import annotations

import warnings

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import selfcal.metrics as M
import selfcal.recalibration as R
from selfcal.evaluation import METRICS
from selfcal.posthoc import build_calibrator


@st.composite
def logits_and_labels(draw):
    """``(z, y)``: float32 logits with ties (integers) or continuous values, some classes
    missing from the labels."""
    n = draw(st.integers(30, 300))
    c = draw(st.integers(2, 12))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    if draw(st.booleans()):
        z = rng.integers(-2, 3, size=(n, c)).astype(np.float32)
    else:
        z = (3 * rng.normal(size=(n, c))).astype(np.float32)
    y = rng.integers(0, max(2, c // 2), n)
    return z, y


def layouts(z: np.ndarray) -> dict[str, object]:
    """The same values in four containers."""
    return {
        "numpy": z,
        "numpy, Fortran order": np.asfortranarray(z),
        "torch": torch.from_numpy(z.copy()),
        "torch, transposed view": torch.from_numpy(np.ascontiguousarray(z.T)).T,
    }


def as_float(value: object) -> float:
    return float(value.item() if isinstance(value, torch.Tensor) else value)  # type: ignore[union-attr, arg-type]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logits_and_labels())
def test_every_metric_gives_the_same_bits_in_every_layout(case) -> None:
    z, y = case
    for key, metric in METRICS.items():
        if key in ("refinement_loss", "calibration_loss", "kde_ece"):
            continue  # a fit inside (the same code path) or a grid: checked below on two
        values = {
            name: as_float(metric(logits=scores, labels=y)) for name, scores in layouts(z).items()
        }
        assert len(set(map(repr, values.values()))) == 1, (key, values)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logits_and_labels())
def test_fitted_metrics_and_calibrators_give_the_same_bits_in_every_layout(case) -> None:
    z, y = case
    for metric in (R.refinement_loss, M.kde_ece):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the recalibrator's degenerate fits, alike
            values = {repr(as_float(metric(logits=s, labels=y))) for s in layouts(z).values()}
        assert len(values) == 1, (metric, values)
    for name in ("ts", "sms", "isotonic"):
        outputs = []
        for scores in layouts(z).values():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cal = build_calibrator(name).fit(logits=scores, labels=y)
                p = cal.predict_proba(logits=scores)
            outputs.append(np.asarray(p))
        for other in outputs[1:]:
            assert np.array_equal(outputs[0], other), name
