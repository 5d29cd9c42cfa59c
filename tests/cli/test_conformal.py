"""Conformal prediction sets on the command line: ``selfcal train --conformal-split`` holds out
validation rows used for nothing else, ``selfcal predict --conformal ALPHA`` writes a set per
row from them, and ``selfcal evaluate --conformal ALPHA`` scores sets on a stated split of a
file's rows. Tiny data and settings, as the other CLI tests use."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from helpers.cli import TINY, blobs_csvs, run

from selfcal.cli import main
from selfcal.conformal import SplitConformal
from selfcal.pipeline.conformal import split_validation
from selfcal.pipeline.tables import FeatureTable, read_table


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    return blobs_csvs(tmp_path_factory.mktemp("blobs"))


@pytest.fixture(scope="module")
def model(files, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("model")
    args = ["train", files["train"], "--val", files["val"], "--method", "ce", "--out", out]
    code = main([str(a) for a in [*args, "--conformal-split", "0.4", "--overwrite", *TINY]])
    assert code == 0
    return out


def test_train_holds_out_validation_rows_and_says_so(files, model):
    config = json.loads((model / "config.json").read_text())
    n_val = read_table(files["val"]).n_rows
    held = config["conformal"]
    assert held["rows"] == round(0.4 * n_val) and held["split"] == 0.4
    assert config["data"]["rows"]["validation"] == n_val - held["rows"]  # the rest selects
    with np.load(model / "conformal.npz") as stored:
        assert stored["probs"].shape == (held["rows"], 5) and stored["labels"].shape == (120,)
    report = json.loads((model / "report.json").read_text())
    assert report["conformal"] == held


def test_the_held_out_rows_are_disjoint_and_seeded():
    table = FeatureTable.from_arrays(np.arange(20.0)[:, None], np.arange(20) % 2)
    rest, held = split_validation(table, 0.25, seed=3)
    assert sorted(np.r_[rest.x[:, 0], held.x[:, 0]].tolist()) == list(range(20))
    assert held.n_rows == 5
    again = split_validation(table, 0.25, seed=3)[1]
    assert (again.x == held.x).all()
    assert not (split_validation(table, 0.25, seed=4)[1].x == held.x).all()


def test_predict_writes_a_set_per_row_from_the_held_out_rows(capsys, files, model, tmp_path):
    out = tmp_path / "p.csv"
    code, stdout, err = run(
        capsys, "predict", model, files["test"], "--out", out, "--conformal", "0.1"
    )
    assert code == 0, err
    said = " ".join(stdout.split())  # the console wraps lines
    assert "calibrated on the 120 validation rows held out at training" in said
    assert "coverage of these rows" in said
    with out.open(newline="") as handle:
        text = list(csv.reader(handle))
    assert text[0][-3:] == ["set", "set_size", "label"]
    # the sets are SplitConformal's, fitted on the stored rows (probabilities and labels)
    with np.load(model / "conformal.npz") as stored:
        expected = SplitConformal(alpha=0.1, nonconformity="aps").fit(
            probs=stored["probs"], labels=stored["labels"]
        )
    code, stdout, _ = run(
        capsys,
        "predict",
        model,
        files["test"],
        "--out",
        tmp_path / "p.npz",
        "--conformal",
        "0.1",
        "--json",
    )
    payload = json.loads(stdout)
    with np.load(tmp_path / "p.npz") as written:
        sets = expected.predict_set(probs=written["probs"])
        assert (written["set"] == sets).all() and (written["set_size"] == sets.sum(1)).all()
        first = [str(c) for c, m in zip(written["classes"], written["set"][0]) if m]
    assert text[1][-3] == "|".join(first) and int(text[1][-2]) == len(first)
    assert payload["conformal"]["n_calibration"] == 120 and 0.8 < payload["conformal"]["coverage"]


def test_predict_conformal_one_line_errors(capsys, files, model, tmp_path):
    bare = tmp_path / "bare"
    args = ["train", files["train"], "--val", files["val"], "--method", "ce", "--out", bare]
    assert main([str(a) for a in [*args, *TINY]]) == 0
    capsys.readouterr()
    cases = [
        ((bare, "0.1"), "train it again with --conformal-split"),
        ((model, "0.001"), "needs at least 999 calibration rows, there are 120"),
        ((model, "1.5"), "--conformal must be in (0, 1)"),
    ]
    for (folder, alpha), message in cases:
        code, _, err = run(
            capsys,
            "predict",
            folder,
            files["test"],
            "--out",
            tmp_path / "x.csv",
            "--conformal",
            alpha,
        )
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def _probs_file(tmp_path: Path, name: str, n: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 4, n)
    z = 2.0 * (rng.normal(size=(n, 4)) + 1.5 * np.eye(4)[y])
    path = tmp_path / name
    np.savez(path, logits=z, labels=y)
    return path


def test_evaluate_scores_sets_on_a_stated_split(capsys, tmp_path):
    path = _probs_file(tmp_path, "p.npz", 400, 0)
    code, stdout, err = run(capsys, "evaluate", path, "--conformal", "0.1", "--resamples", "20")
    assert code == 0, err
    said = " ".join(stdout.split())
    assert "a random half of" in said and "(200 of 400, seed 0)" in said
    code, stdout, err = run(
        capsys, "evaluate", path, "--conformal", "0.1", "--resamples", "20", "--json"
    )
    block = json.loads(stdout)["conformal"]
    assert (block["n_calibration"], block["n_scored"], block["alpha"]) == (200, 200, 0.1)
    for metric in block["metrics"].values():
        lo, hi = metric["ci"]
        assert lo <= metric["value"] <= hi
    cal = _probs_file(tmp_path, "cal.npz", 300, 1)
    code, stdout, err = run(
        capsys,
        "evaluate",
        path,
        "--conformal",
        "0.05",
        "--json",
        "--conformal-calibration",
        cal,
        "--resamples",
        "20",
    )
    block = json.loads(stdout)["conformal"]
    assert (block["n_calibration"], block["n_scored"]) == (300, 400)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--conformal-calibration", "x.npz"], "--conformal-calibration needs --conformal"),
        (["--conformal", "0.1", "--conformal-score", "nope"], "--conformal-score"),
        (["--conformal", "0.001"], "needs at least 999 calibration rows"),
    ],
)
def test_evaluate_conformal_one_line_errors(capsys, tmp_path, extra, message):
    path = _probs_file(tmp_path, "p.npz", 100, 0)
    code, _, err = run(capsys, "evaluate", path, *extra)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def _conformal_edits() -> dict[str, tuple[Callable[[Path], None], str]]:
    """Edits of a model folder's ``conformal.npz`` (the audit's ``repro_model_conformal.sh``)
    and what the refusal says."""
    import io
    import zipfile

    def declared(path: Path) -> None:
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            header, {"descr": "<f8", "fortran_order": False, "shape": (10**12, 2)}
        )
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("probs.npy", header.getvalue() + bytes(64))
            archive.writestr("labels.npy", header.getvalue() + bytes(64))

    def rewrite(**change):
        def edit(path: Path) -> None:
            with np.load(path) as stored:
                arrays = {k: stored[k] for k in stored.files}
            np.savez(path, **{k: change[k](v) if k in change else v for k, v in arrays.items()})

        return edit

    def objects(path: Path) -> None:
        a = np.empty(2, dtype=object)
        a[:] = [{"x": 1}, "s"]
        np.savez(path, probs=a, labels=a)

    def no_labels(path: Path) -> None:
        with np.load(path) as stored:
            np.savez(path, probs=stored["probs"])

    return {
        "not a zip": (lambda p: p.write_bytes(b"PK\x03\x04garbage"), "not a valid .npz archive"),
        "object arrays": (objects, "holds non-numeric (object) values"),
        "labels + 7": (rewrite(labels=lambda y: y + 7), "labels must lie in [0, 5)"),
        "1e12 rows declared": (declared, "declares shape (1000000000000, 2) of float64"),
        "3 of 5 columns": (
            rewrite(probs=lambda p: p[:, :3]),
            "probs must be (n, 5), one column per class of the model, got shape (120, 3)",
        ),
        "no labels": (no_labels, "no array 'labels'; arrays: probs"),
    }


@pytest.mark.parametrize("edit", list(_conformal_edits()))
def test_a_resealed_conformal_file_not_as_train_writes_it_is_one_line_naming_it(
    capsys, files, model, tmp_path, edit
):
    """``conformal.npz`` is read by the one reader of untrusted array files and checked
    against the model (columns, labels), even when the folder's checksums were recomputed."""
    import shutil

    from selfcal.pipeline.model_dir import seal

    folder = tmp_path / "m"
    shutil.copytree(model, folder)
    make, message = _conformal_edits()[edit]
    make(folder / "conformal.npz")
    config = json.loads((folder / "config.json").read_text())
    body = {k: v for k, v in config.items() if k not in ("checksums", "checksum")}
    (folder / "config.json").write_text(json.dumps(seal(folder, body)))
    args = ["predict", folder, files["test"], "--out", tmp_path / "p.csv", "--conformal", "0.1"]
    code, _, err = run(capsys, *args)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert str(folder / "conformal.npz") in err and message in err, err
