"""A calibrator that does not use groups refuses an explicit ``groups=`` rather than ignore it."""

import numpy as np
import pytest

from selfcal.posthoc import TemperatureScaling


def test_explicit_groups_are_refused_by_a_calibrator_that_ignores_them() -> None:
    rng = np.random.default_rng(0)
    z, y = rng.normal(size=(40, 3)), rng.integers(0, 3, 40)
    groups = np.array(["a", "b"] * 20)
    with pytest.raises(ValueError, match="TemperatureScaling does not use groups"):
        TemperatureScaling().fit(logits=z, labels=y, groups=groups)
    ts = TemperatureScaling().fit(logits=z, labels=y)
    with pytest.raises(ValueError, match="does not use groups; to calibrate per group"):
        ts.predict_proba(logits=z, groups=groups)
    with pytest.raises(ValueError, match="does not use groups"):
        ts.predict_confidence(logits=z, groups=groups)
