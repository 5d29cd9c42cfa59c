"""The shared real prediction sets the abstention tests certify on: temperature scaling fitted
on a set's validation split, its test split's calibrated probabilities and labels. The sets lie
in ``../shared/prediction-sets`` beside the checkout or in ``$SELFCAL_PREDICTIONS``; a test on
an absent set is skipped."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
import pytest


def shared(name: str) -> Path:
    root = os.environ.get("SELFCAL_PREDICTIONS")
    base = Path(root) if root else Path(__file__).parents[3] / "shared" / "prediction-sets"
    return base / name


def calibrated_test_split(name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(probs, labels)`` of the set's test split after TS fitted on its validation split;
    ``pytest.skip`` where the set is absent."""
    path = shared(name)
    if not path.is_dir():
        pytest.skip(f"shared prediction set {name} not found at {path}")
    return _calibrated(str(path))


@functools.cache
def _calibrated(path: str) -> tuple[np.ndarray, np.ndarray]:
    from selfcal.io import load_prediction_set
    from selfcal.posthoc import TemperatureScaling

    data = load_prediction_set(path)
    ts = TemperatureScaling().fit(logits=data.val, labels=data.val_labels)
    return ts.predict_proba(logits=data.test), np.asarray(data.test_labels)
