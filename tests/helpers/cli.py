"""Shared helpers for the command-line tests (importable thanks to conftest.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from selfcal.cli import main
from selfcal.data import load_dataset
from selfcal.io import write_table

NAMES = np.array(["ant", "bee", "cow", "dog", "elk"])
"""String labels of the Blobs classes in :func:`blobs_csvs`."""
TINY = ["--hidden", "16", "--epochs", "20", "--resamples", "20"]
"""``selfcal train`` options that keep a test's training run small."""


def run(capsys, *args):
    """``(exit code, stdout, stderr)`` of ``selfcal ARGS``."""
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def blobs_csvs(folder: Path) -> dict[str, Path]:
    """Blobs 1.7 (seed 0) as ``train`` / ``val`` / ``test`` CSVs in ``folder``: raw features
    ``f0``, ``f1`` and a string ``label`` column (:data:`NAMES`)."""
    data = load_dataset("blobs-1.7", 0)
    paths = {}
    for split in ("train", "val", "test"):
        x, y = data.raw(split).numpy(), data.split(split).y.numpy()
        columns = {"f0": x[:, 0], "f1": x[:, 1], "label": NAMES[y]}
        paths[split] = write_table(folder / f"{split}.csv", columns)
    return paths
