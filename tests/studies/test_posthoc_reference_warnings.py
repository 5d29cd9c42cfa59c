"""The post-hoc study's reference fit (probmetrics' SMS) shows no third-party deprecation: every
``reproduce posthoc`` run printed ``DeprecationWarning: torch.jit.script is deprecated``, raised
when probmetrics imports torchmin (whose functions are scripted at import), which says nothing
about the user's data. Checked in a fresh interpreter: the warning is raised once per process,
at the first import."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("probmetrics.calibrators")

SCRIPT = """
import json, sys, warnings
import numpy as np
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    if sys.argv[1] == "torchmin":
        import torchmin  # noqa: F401  (the control: the warning exists in this torch)
    else:
        from selfcal.io import PredictionSet
        from selfcal.studies.posthoc.execute import probmetrics_fit_predict
        rng = np.random.default_rng(0)
        y = rng.integers(0, 3, 60)
        z = rng.normal(size=(60, 3)) + 2.0 * np.eye(3)[y]
        fitted = probmetrics_fit_predict(PredictionSet("logits", z, y, z, y))
        assert fitted is not None and fitted[0].shape == (60, 3)
print(json.dumps([str(w.message) for w in caught if "jit.script" in str(w.message)]))
"""


def jit_warnings(mode: str) -> list[str]:
    env = {**os.environ, "PYTHONWARNINGS": "always"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, env=env, check=True
    )
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_reference_fit_shows_no_torch_jit_deprecation():
    if not jit_warnings("torchmin"):
        pytest.skip("this torch does not deprecate torch.jit.script: nothing to suppress")
    assert jit_warnings("study") == []
