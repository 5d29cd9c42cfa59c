"""``selfcal calibrate`` with groups: the calibrators that use groups read each file's groups
(a .npz's ``groups``, a table's ``--groups`` column) and predict what the library predicts; a
file without the groups they need is one line; the others say they do not use them."""

from __future__ import annotations

import warnings

import numpy as np
from helpers.cli import run

from selfcal.io import write_table
from selfcal.posthoc import AutoCalibration, Calibrator, GroupwiseCalibration

RNG = np.random.default_rng(3)
N, C = 1200, 3
TEMPERATURES = np.array([0.5, 1.0, 3.0])


def grouped(n: int):
    codes = RNG.integers(0, 3, n)
    z = 3.0 * RNG.normal(size=(n, C))
    zt = z / TEMPERATURES[codes][:, None]
    p = np.exp(zt - zt.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = (p.cumsum(1) < RNG.random((n, 1))).sum(1).clip(max=C - 1)
    return z, y, np.array(["clinic", "hospital", "lab"])[codes]


Z, Y, G = grouped(N)
ZA, YA, GA = grouped(N)


def files(tmp_path):
    np.savez(tmp_path / "fit.npz", logits=Z, labels=Y, groups=G)
    np.savez(tmp_path / "apply.npz", logits=ZA, labels=YA, groups=GA)
    np.savez(tmp_path / "plain.npz", logits=ZA, labels=YA)
    return tmp_path / "fit.npz", tmp_path / "apply.npz", tmp_path / "plain.npz"


def test_groupwise_reads_both_files_groups_and_predicts_as_the_library(tmp_path, capsys):
    fit, apply, _ = files(tmp_path)
    out, saved = tmp_path / "p.npz", tmp_path / "gw.json"
    args = ["--fit", fit, "--apply", apply, "--out", out, "--save-calibrator", saved]
    code, stdout, err = run(capsys, "calibrate", *args, "--calibrator", "groupwise")
    assert code == 0, err
    assert "note:" not in err
    assert "fitted groupwise on 1200 rows: 3 groups, 3 with their own map" in stdout
    expected = GroupwiseCalibration().fit(logits=Z, labels=Y, groups=G)
    with np.load(out) as written:
        got = written["probs"]
    np.testing.assert_array_equal(got, expected.predict_proba(logits=ZA, groups=GA))
    loaded = Calibrator.load(saved)
    np.testing.assert_array_equal(loaded.predict_proba(logits=ZA, groups=GA), got)


def test_a_table_gives_its_groups_by_column(tmp_path, capsys):
    for name, (z, y, g) in {"fit": (Z, Y, G), "apply": (ZA, YA, GA)}.items():
        columns = {f"logit_{j}": z[:, j] for j in range(C)} | {"label": y, "site": g}
        write_table(tmp_path / f"{name}.csv", columns)
    args = ["--fit", tmp_path / "fit.csv", "--apply", tmp_path / "apply.csv"]
    args += ["--out", tmp_path / "p.npz", "--calibrator", "groupwise"]
    code, _, err = run(capsys, "calibrate", *args, "--groups", "site")
    assert code == 0, err
    code, _, err = run(capsys, "calibrate", *args)  # the column not named: no groups
    assert code == 2 and err.count("\n") == 1
    assert "fit.csv: has no groups; groupwise needs each row's group" in err


def test_a_file_without_the_groups_a_calibrator_needs_is_one_line(tmp_path, capsys):
    fit, apply, plain = files(tmp_path)
    out = tmp_path / "p.npz"
    code, _, err = run(
        capsys, "calibrate", "--fit", fit, "--apply", plain, "--out", out, "--calibrator",
        "groupwise",
    )  # fmt: skip
    assert code == 2 and err.count("\n") == 1
    assert f"{plain}: has no groups; groupwise needs each row's group" in err
    assert not out.exists()
    code, _, err = run(
        capsys, "calibrate", "--fit", plain, "--apply", apply, "--out", out, "--calibrator",
        "groupwise",
    )  # fmt: skip
    assert code == 2 and f"{plain}: has no groups" in err


def test_a_calibrator_without_groups_says_so_once_per_file(tmp_path, capsys):
    fit, apply, _ = files(tmp_path)
    args = ["--fit", fit, "--apply", apply, "--out", tmp_path / "p.npz", "--calibrator", "ts"]
    code, _, err = run(capsys, "calibrate", *args)
    assert code == 0, err
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert notes == [
        f"note: {file} holds groups; ts does not use them (these calibrate with groups: "
        "auto, groupwise" + (", multicalibration" if "multicalibration" in line else "") + ")"
        for file, line in zip((fit, apply), notes, strict=True)
    ]


def test_auto_chooses_with_groups_and_shows_the_worst_group(tmp_path, capsys):
    fit, apply, plain = files(tmp_path)
    out = tmp_path / "p.npz"
    args = ["calibrate", "--fit", fit, "--out", out, "--calibrator", "auto"]
    args += ["--param", "candidates=ts,svs"]
    code, stdout, err = run(capsys, *args, "--apply", apply)
    assert code == 0, err
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = AutoCalibration(candidates="ts,svs").fit(logits=Z, labels=Y, groups=G)
    assert expected.chosen_ == "groupwise"
    assert "chose groupwise" in stdout and "worst" in stdout  # the worst group column
    with np.load(out) as written:
        got = written["probs"]
    np.testing.assert_array_equal(got, expected.predict_proba(logits=ZA, groups=GA))
    code, _, err = run(capsys, *args, "--apply", plain)  # its choice needs groups
    assert code == 2 and f"{plain}: has no groups; the fitted auto needs" in err
