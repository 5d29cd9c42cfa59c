"""``scripts/venn_abers_evidence.py`` (issue 51's Venn-Abers evidence) on small synthetic
prediction sets: its widths equal the ``venn-abers`` package's binary predictor of correctness,
its AUROC and paired differences equal independent computations, its committed report is the
report of its committed numbers, and ``--show`` prints what it says."""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import log_loss

from selfcal.io import load_prediction_set

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "venn_abers_evidence.py"
COMMITTED = ROOT / "results" / "venn-abers-real"


@pytest.fixture(scope="module")
def evidence():
    spec = importlib.util.spec_from_file_location("venn_abers_evidence", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_set(folder: Path, n_val: int, n_test: int, classes: int, seed: int) -> Path:
    """An over-confident model's logits (labels drawn from a softer softmax)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    for split, n in (("val", n_val), ("test", n_test)):
        z = rng.normal(size=(n, classes))
        z[np.arange(n), rng.integers(0, classes, n)] += 2.5
        soft = np.exp(z / 2.0)
        soft /= soft.sum(1, keepdims=True)
        y = np.array([rng.choice(classes, p=row) for row in soft])
        np.savez(folder / f"{split}.npz", logits=z, labels=y)
    return folder


@pytest.fixture(scope="module")
def one(tmp_path_factory):
    folder = write_set(tmp_path_factory.mktemp("sets") / "synthetic_c5", 2400, 600, 5, 0)
    data = load_prediction_set(folder)
    return folder, data.predictions("val"), data.predictions("test")


def test_widths_are_the_venn_abers_packages_binary_predictor_of_correctness(evidence, one):
    va = pytest.importorskip("venn_abers.venn_abers")
    _, val, test = one
    conf = val.probs.max(1).values.numpy()
    right = val.correct.numpy().astype(np.int64)
    t = test.probs.max(1).values.numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the peer's all-NaN slices of empty diagram steps
        peer = va.VennAbers().fit(np.stack([1 - conf, conf], 1), right)
        _, pairs = peer.predict_proba(np.stack([1 - t, t], 1))
    eps = 1 / (val.n_samples + 1)  # the default mixing with the uniform distribution
    theirs = (1 - eps) * (pairs[:, 1] - pairs[:, 0])
    np.testing.assert_allclose(evidence._width(val, test), theirs, rtol=0, atol=1e-10)

    got = evidence.width_and_errors(val, test)
    wrong = test.correct.numpy() < 0.5
    assert got["wrong"] == pytest.approx(theirs[wrong].mean(), abs=1e-10)
    assert got["right"] == pytest.approx(theirs[~wrong].mean(), abs=1e-10)
    # the AUROC as the Mann-Whitney probability that a wrong row is wider (ties count half)
    diff = theirs[wrong][:, None] - theirs[~wrong][None, :]
    mann_whitney = (diff > 1e-12).mean() + 0.5 * (np.abs(diff) <= 1e-12).mean()
    assert got["auroc"] == pytest.approx(mann_whitney, abs=1e-9)


def test_widths_shrink_with_the_calibration_rows(evidence, one):
    _, val, test = one
    by_size = evidence.widths_by_size(val, test)
    assert list(by_size) == ["250", "500", "1000", "2000", "all"]  # sizes below 2,400 rows
    widths = list(by_size.values())
    assert widths[0] > 2 * widths[-1] > 0  # about 1 / n: 250 rows against 2,400


def test_paired_differences_are_the_metrics_differences(evidence, one):
    _, val, test = one
    probs = {
        n: torch.as_tensor(evidence._fit(n, val).predict_proba(test))
        for n in evidence.MERGED + evidence.REFERENCES
    }
    got = evidence.paired(test, probs)
    y = test.labels.numpy()
    for name in evidence.MERGED:
        for ref in evidence.REFERENCES:
            d, lo, hi = got[f"{name} - {ref} nll"]
            expected = log_loss(y, probs[name].numpy(), labels=range(5)) - log_loss(
                y, probs[ref].numpy(), labels=range(5)
            )
            assert d == pytest.approx(expected, abs=1e-9)
            assert lo < hi
            assert f"{name} - {ref} ece" in got
    assert len(got) == len(evidence.MERGED) * len(evidence.REFERENCES) * 2


def test_the_report_counts_every_set_once_per_family(evidence, tmp_path):
    sets = []
    for seed, classes in ((1, 3), (2, 3), (3, 4)):
        folder = write_set(tmp_path / f"s{seed}", 600, 400, classes, seed)
        sets.append(evidence.one_set(folder))
    text = evidence.report(sets, "sets")
    assert "## 4 classes: 1 set(s)" in text and "## 3 classes: 2 set(s)" in text
    assert "| 2000 |" not in text  # no subset as large as the 600 validation rows
    rows = [line for line in text.splitlines() if line.startswith("| venn-abers")]
    assert len(rows) == 2 * 8
    for line in rows:
        counts = [int(c) for c in line.split("|")[2].split("/")]
        assert sum(counts) in (1, 2)
    assert "(sets: " in text.split("## 3 classes")[1]  # two sets: their values, no interval
    again = evidence.report([evidence.one_set(tmp_path / "s1"), sets[1], sets[2]], "sets")
    assert again == text  # seeded: a rerun writes the same bytes


def test_the_committed_report_is_the_report_of_its_numbers(evidence):
    sets = json.loads((COMMITTED / "venn-abers.json").read_text())
    assert len(sets) == 42
    expected = evidence.report(sets, "../shared/prediction-sets") + "\n"
    assert (COMMITTED / "README.md").read_text() == expected


def test_show_prints_right_and_wrong_rows_and_the_mean_widths(evidence, one):
    folder, val, test = one
    text = evidence.show(folder, rows=2)
    lines = text.splitlines()
    assert lines[0].startswith("synthetic_c5: venn-abers-top fitted on 2400 validation rows")
    assert [line.split()[1] for line in lines[2:6]] == ["yes", "yes", "no", "no"]
    for line in lines[2:6]:
        low, high = (float(v) for v in line.split("[")[1].split("]")[0].split(", "))
        width, merged = float(line.split()[-2]), float(line.split()[-1])
        assert low <= merged <= high and width == pytest.approx(high - low, abs=2e-4)
    got = evidence.width_and_errors(val, test)
    assert f"wrong rows {got['wrong']:.4f}" in lines[-2]
    assert f"right rows {got['right']:.4f}" in lines[-2]
    by_size = evidence.widths_by_size(val, test)
    assert f"all rows {by_size['all']:.4f}" in lines[-2]
    assert lines[-1].endswith(f"2000 {by_size['2000']:.4f}, all {by_size['all']:.4f}")
