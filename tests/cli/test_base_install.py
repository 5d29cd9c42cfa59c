"""``pip install selfcal`` without the ``full`` extra: the commands a user's own data go
through (train, predict, calibrate with ``auto``, evaluate) work, and what needs an extra says
so. Emulated in a fresh process where every package of the extra fails to import."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers.cli import TINY, blobs_csvs

FULL_EXTRA = ("sklearn", "matplotlib", "pyarrow", "mnist1d", "PIL", "numba")
"""The import names of ``pyproject.toml``'s ``full`` extra."""

WITHOUT_EXTRA = """
import sys
for name in {modules!r}:
    sys.modules[name] = None  # its import (and its submodules') now fails
from selfcal.cli import main
sys.exit(main(sys.argv[1:]))
"""


def selfcal_without_extra(*args) -> subprocess.CompletedProcess:
    code = WITHOUT_EXTRA.format(modules=FULL_EXTRA)
    command = [sys.executable, "-c", code, *map(str, args)]
    env = {**os.environ, "COLUMNS": "200"}  # table cells unwrapped
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)


def test_the_pyproject_extra_is_the_one_emulated():
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    full = pyproject["project"]["optional-dependencies"]["full"]
    distributions = {"sklearn": "scikit-learn", "PIL": "pillow"}
    assert sorted(s.split(">")[0] for s in full) == sorted(
        distributions.get(m, m) for m in FULL_EXTRA
    )


def test_own_data_commands_work_without_the_full_extra(tmp_path):
    csvs = blobs_csvs(tmp_path)
    model = tmp_path / "model"
    trained = selfcal_without_extra(
        "train", csvs["train"], "--val", csvs["val"], "--out", model, "--calibrate", "auto", *TINY
    )
    assert trained.returncode == 0, trained.stderr
    predicted = selfcal_without_extra("predict", model, csvs["test"], "--out", tmp_path / "p.csv")
    assert predicted.returncode == 0, predicted.stderr
    assert "wrote" in predicted.stdout


def test_calibrate_auto_and_evaluate_work_without_the_full_extra(tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)
    for split, n in (("val", 600), ("test", 600)):
        y = rng.integers(0, 3, n)
        z = 2 * rng.normal(size=(n, 3)) + 2 * np.eye(3)[y]
        np.savez(tmp_path / f"{split}.npz", logits=z, labels=y)
    fit, apply = tmp_path / "val.npz", tmp_path / "test.npz"
    out = tmp_path / "calibrated.npz"
    auto = selfcal_without_extra(
        "calibrate", "--method", "auto", "--fit", fit, "--apply", apply, "--out", out
    )
    assert auto.returncode == 0, auto.stderr
    assert "needs scikit-learn" in auto.stdout  # the isotonic candidate's reason, in the table
    evaluated = selfcal_without_extra("evaluate", apply)
    assert evaluated.returncode == 0, evaluated.stderr
    plotted = selfcal_without_extra("evaluate", apply, "--plot", tmp_path / "figures")
    assert plotted.returncode != 0
    assert "needs matplotlib: pip install 'selfcal[full]'" in plotted.stderr
    isotonic = selfcal_without_extra(
        "calibrate", "--method", "isotonic", "--fit", fit, "--apply", apply, "--out", out
    )
    assert isotonic.returncode != 0
    assert "isotonic calibration needs scikit-learn: pip install 'selfcal[full]'" in isotonic.stderr
