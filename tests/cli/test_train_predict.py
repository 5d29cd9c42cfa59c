"""``selfcal train`` and ``selfcal predict`` end to end, on Blobs 1.7 written to files with
string labels, with tiny settings (a 16-unit MLP, 20 epochs, few bootstrap resamples).

Commands run in-process through :func:`selfcal.cli.main` (what the console script calls); the
fresh-process test runs ``python -m selfcal.cli``. The probabilities are recomputed by hand
from the saved files (standardisation, the layers' weights, the calibrator's temperature)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.cli import NAMES, TINY, blobs_csvs, run

from selfcal.cli import main
from selfcal.data import load_dataset
from selfcal.io import write_table
from selfcal.methods import method_names
from selfcal.pipeline import read_table
from selfcal.pipeline.model_dir import config_checksum


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    return blobs_csvs(tmp_path_factory.mktemp("blobs"))


def train_model(capsys, files, out: Path, method: str, *extra) -> dict:
    code, stdout, err = run(
        capsys,
        "train",
        files["train"],
        "--val",
        files["val"],
        "--test",
        files["test"],
        "--method",
        method,
        "--out",
        out,
        "--json",
        *TINY,
        *extra,
    )
    assert code == 0, err
    return json.loads(stdout)


@pytest.fixture(scope="module")
def trained(files, tmp_path_factory) -> dict[str, Path]:
    """One model folder per method (ce, bsce-gra with a 2-point grid, bo4sc)."""
    folders = {}
    for method, extra in (
        ("ce", []),
        ("bsce-gra", ["--grid", "gamma=1,3", "--grid", "norm=2"]),
        ("bo4sc", []),
    ):
        out = tmp_path_factory.mktemp(f"model-{method}")
        code = main(
            [
                "train",
                str(files["train"]),
                "--val",
                str(files["val"]),
                "--test",
                str(files["test"]),
                "--method",
                method,
                "--out",
                str(out),
                "--json",
                *TINY,
                *extra,
            ]
        )
        assert code == 0
        folders[method] = out
    return folders


def by_hand(folder: Path, x_raw: np.ndarray) -> np.ndarray:
    """The calibrated probabilities recomputed from the folder's files, written out."""
    from safetensors.torch import load_file

    config = json.loads((folder / "config.json").read_text())
    mean = np.asarray(config["features"]["mean"])
    std = np.asarray(config["features"]["std"])
    h = torch.from_numpy(((x_raw - mean) / std).astype(np.float32))
    w = load_file(str(folder / "model.safetensors"))
    n_hidden = len(config["architecture"]["hidden"])
    for i in range(n_hidden):
        h = torch.relu(h @ w[f"body.{2 * i}.weight"].T + w[f"body.{2 * i}.bias"])
    z = (h @ w["head.weight"].T + w["head.bias"]).double()
    cal = json.loads((folder / "calibrator.json").read_text())
    assert cal["class"] == "TemperatureScaling"
    return torch.softmax(z / cal["fitted"]["temperature_"], dim=1).numpy()


def read_output(path: Path) -> dict[str, np.ndarray]:
    """The columns of a predictions table (pyarrow)."""
    pa_csv = pytest.importorskip("pyarrow.csv")
    import pyarrow.parquet as pq

    table = pa_csv.read_csv(path) if path.suffix == ".csv" else pq.read_table(path)
    return {name: np.asarray(table.column(name).to_pylist()) for name in table.column_names}


def predict(capsys, folder, data, out, *extra) -> dict:
    code, stdout, err = run(capsys, "predict", folder, data, "--out", out, "--json", *extra)
    assert code == 0, err
    return json.loads(stdout)


# ----------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("method", ["ce", "bsce-gra", "bo4sc"])
def test_round_trip_the_probabilities_are_the_saved_model_and_calibrator(
    capsys, files, trained, tmp_path, method
):
    folder = trained[method]
    assert sorted(p.name for p in folder.iterdir()) == [
        "calibrator.json",
        "config.json",
        "model.safetensors",
        "report.json",
        "report.md",
        "selective.json",
        "validation.npz",
    ]
    payload = predict(capsys, folder, files["test"], tmp_path / "p.csv")
    out = read_output(tmp_path / "p.csv")
    probs = np.column_stack([out[f"prob_{c}"] for c in NAMES])
    raw = read_table(files["test"]).x
    np.testing.assert_allclose(probs, by_hand(folder, raw), rtol=0, atol=1e-6)
    assert np.array_equal(out["confidence"], probs.max(1))
    assert list(out["predicted"]) == list(NAMES[probs.argmax(1)])
    assert "abstain" not in out and payload["abstained"] == 0  # no target: no abstention
    assert payload["threshold"] is None
    assert list(out["label"]) == list(read_table(files["test"]).labels)  # passed through
    threshold = json.loads((folder / "selective.json").read_text())["thresholds"][0]
    assert threshold["kind"] == "accuracy" and threshold["target"] == 0.95
    predict(capsys, folder, files["test"], tmp_path / "q.csv", "--target-accuracy", 0.95)
    out = read_output(tmp_path / "q.csv")
    assert np.array_equal(out["abstain"], out["confidence"] < threshold["threshold"])


def test_the_report_holds_every_candidate_and_the_metrics(trained):
    report = json.loads((trained["bsce-gra"] / "report.json").read_text())
    assert [c["hyperparameters"] for c in report["candidates"]] == [
        {"gamma": 1.0, "norm": 2},
        {"gamma": 3.0, "norm": 2},
    ]
    scores = [c["criterion"] for c in report["candidates"]]
    assert [c["selected"] for c in report["candidates"]] == [s == min(scores) for s in scores]
    assert (
        report["model"]["hyperparameters"]
        == report["candidates"][scores.index(min(scores))]["hyperparameters"]
    )
    for split in ("validation", "test"):
        for column in ("raw", "calibrated"):
            for key in ("accuracy", "nll", "ece", "adaece", "brier"):
                entry = report["metrics"][split][column][key]
                assert entry["ci"][0] <= entry["ci"][1]
        # temperature scaling keeps every predicted class
        assert (
            report["metrics"][split]["raw"]["accuracy"]["value"]
            == report["metrics"][split]["calibrated"]["accuracy"]["value"]
        )
    text = (trained["bsce-gra"] / "report.md").read_text()
    assert "gamma=1, norm=2" in text and "## Calibration" in text and "## Abstention" in text
    config = json.loads((trained["bsce-gra"] / "config.json").read_text())
    assert config["labels"] == {"column": "label", "classes": list(NAMES)}
    assert config["features"]["columns"] == ["f0", "f1"]
    assert config["selfcal_version"] and config["torch_version"] == torch.__version__


def test_the_test_metrics_are_recomputed_from_the_predictions(capsys, files, trained, tmp_path):
    """The report's test ECE after calibration is the ECE of what predict writes."""
    from selfcal.metrics import ece

    folder = trained["ce"]
    predict(capsys, folder, files["test"], tmp_path / "p.NPZ")  # the name as given, any case
    assert [p.name for p in tmp_path.iterdir()] == ["p.NPZ"]
    with np.load(tmp_path / "p.NPZ", allow_pickle=False) as out:
        probs, labels, classes = out["probs"], out["labels"], out["classes"]
    y = np.searchsorted(classes, labels)
    report = json.loads((folder / "report.json").read_text())
    assert report["metrics"]["test"]["calibrated"]["ece"]["value"] == pytest.approx(
        ece(probs=probs, labels=y, n_bins=15), abs=1e-12
    )


@pytest.mark.parametrize(
    ("option", "target"),
    [("--target-coverage", 0.8), ("--target-coverage", 0.5), ("--target-accuracy", 0.9)],
)
def test_the_abstain_flag_meets_its_target_on_the_validation_set(
    capsys, files, trained, tmp_path, option, target
):
    from selfcal.metrics import coverage_at_accuracy

    folder = trained["bsce-gra"]
    payload = predict(capsys, folder, files["val"], tmp_path / "v.npz", option, target)
    with np.load(tmp_path / "v.npz", allow_pickle=False) as out:
        abstain, probs = out["abstain"], out["probs"]
        correct = out["predicted"] == out["labels"]
    kept = ~abstain
    n = len(abstain)
    if option == "--target-coverage":
        assert kept.sum() == math.ceil(target * n)  # distinct confidences: exactly the ceiling
    else:
        assert correct[kept].mean() >= target
        y = np.where(correct, probs.argmax(1), (probs.argmax(1) + 1) % probs.shape[1])
        assert kept.mean() == pytest.approx(
            coverage_at_accuracy(probs=probs, labels=y, target=target), abs=1e-12
        )
    assert payload["threshold"]["coverage"] == kept.mean()
    assert payload["abstained"] == int(abstain.sum())
    assert payload["accepted_accuracy"] == correct[kept].mean()


def test_the_stored_default_threshold_is_the_one_recomputed_from_validation(trained):
    from selfcal.pipeline import choose_threshold

    folder = trained["ce"]
    stored = json.loads((folder / "selective.json").read_text())["thresholds"]
    with np.load(folder / "validation.npz", allow_pickle=False) as data:
        conf, correct = data["confidence"], data["correct"]
    for t in stored:
        again = choose_threshold(conf, correct, kind=t["kind"], target=t["target"])
        assert again.to_json() == t


def test_a_fresh_process_predicts_bit_for_bit_the_same(capsys, files, trained, tmp_path):
    folder = trained["bo4sc"]
    predict(capsys, folder, files["test"], tmp_path / "here.npz")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "selfcal.cli",
            "predict",
            str(folder),
            str(files["test"]),
            "--out",
            str(tmp_path / "there.npz"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "here.npz") as a, np.load(tmp_path / "there.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        for key in a.files:
            assert np.array_equal(a[key], b[key]), key
            assert a[key].dtype == b[key].dtype


def test_parquet_and_npz_inputs_and_integer_labels(capsys, tmp_path):
    data = load_dataset("blobs-1.7", 1)
    for split, suffix in (("train", ".npz"), ("val", ".parquet"), ("test", ".csv")):
        x, y = data.raw(split).numpy(), data.split(split).y.numpy()
        if suffix == ".npz":
            np.savez(tmp_path / f"{split}.npz", x=x, y=y, feature_names=np.array(["f0", "f1"]))
        else:
            write_table(tmp_path / f"{split}{suffix}", {"f0": x[:, 0], "f1": x[:, 1], "y": y})
    report = train_model(
        capsys,
        {
            "train": tmp_path / "train.npz",
            "val": tmp_path / "val.parquet",
            "test": tmp_path / "test.csv",
        },
        tmp_path / "model",
        "focal",
        "--label-column",
        "y",
        "--grid",
        "gamma=2",
        "--calibrate",
        "none",
    )
    assert report["data"]["classes"] == [0, 1, 2, 3, 4]
    assert report["model"]["calibrator"] is None
    assert "--calibrator none" in report["command"]  # 0.1's --calibrate read, today's written
    assert list(report["metrics"]["test"]) == ["raw"]
    assert not (tmp_path / "model" / "calibrator.json").exists()
    predict(capsys, tmp_path / "model", tmp_path / "test.csv", tmp_path / "p.parquet")
    out = read_output(tmp_path / "p.parquet")
    assert list(out)[:5] == [f"prob_{k}" for k in range(5)]
    assert list(out)[5:] == ["predicted", "confidence", "y"]
    assert out["predicted"].dtype.kind == "i"


def test_train_help_lists_every_method(capsys):
    code = main(["train", "--help"])
    text = capsys.readouterr().out
    assert code == 0
    flat = " ".join(text.replace("│", " ").split())
    for name in method_names():
        assert f"{name}:" in flat, name
    assert "flg-sece" in flat


# ----------------------------------------------------------------------------- errors
def one_line_error(capsys, *args) -> str:
    code, out, err = run(capsys, *args)
    assert code == 2, err
    assert out == "" and err.startswith("error: ") and err.count("\n") == 1
    assert "Traceback" not in err
    return err


def test_errors_are_one_line(capsys, files, trained, tmp_path):
    t, v = files["train"], files["val"]
    no_label = write_table(tmp_path / "nolabel.csv", {"f0": [1.0, 2.0], "f1": [0.0, 1.0]})
    other_cols = write_table(
        tmp_path / "cols.csv", {"f0": [1.0, 2.0], "g": [0.0, 1.0], "label": ["ant", "bee"]}
    )
    raw = read_table(t)
    nan_x = raw.x.copy()
    nan_x[17, 1] = np.nan
    nan_file = write_table(
        tmp_path / "nan.csv", {"f0": nan_x[:, 0], "f1": nan_x[:, 1], "label": raw.labels}
    )
    one_class = write_table(
        tmp_path / "one.csv", {"f0": raw.x[:, 0], "f1": raw.x[:, 1], "label": ["ant"] * raw.n_rows}
    )
    new_label = write_table(
        tmp_path / "new.csv", {"f0": [1.0, 2.0], "f1": [0.0, 1.0], "label": ["ant", "yak"]}
    )
    out = tmp_path / "m"
    cases = [
        (
            ("train", no_label, "--val", v, "--method", "ce", "--out", out),
            "no label column 'label'",
        ),
        (
            ("train", t, "--val", other_cols, "--method", "ce", "--out", out),
            "missing 'f1'; unexpected 'g'",
        ),
        (
            ("train", nan_file, "--val", v, "--method", "ce", "--out", out),
            "feature 'f1' is not finite in row 17",
        ),
        (
            ("train", one_class, "--val", v, "--method", "ce", "--out", out),
            "a classifier needs at least 2 classes",
        ),
        (("train", t, "--val", new_label, "--method", "ce", "--out", out), "row 1 has label 'yak'"),
        (("train", t, "--val", v, "--method", "sgd", "--out", out), "method must be one of"),
        (
            ("train", t, "--val", v, "--method", "focal", "--grid", "beta=1", "--out", out),
            "no hyperparameter 'beta'",
        ),
        (
            ("train", t, "--val", v, "--method", "ce", "--calibrate", "magic", "--out", out),
            "unknown calibrator 'magic'",
        ),
        (
            ("train", t, "--val", v, "--method", "ce", "--calibrator", "groupwise", "--out", out),
            "--calibrator groupwise: needs each row's group",
        ),
        (
            ("train", t, "--val", v, "--method", "ce", "--out", trained["ce"]),
            "not empty; pass --overwrite",
        ),
        (
            ("predict", trained["ce"], other_cols, "--out", tmp_path / "p.csv"),
            "feature columns differ",
        ),
        (("predict", trained["ce"], nan_file, "--out", tmp_path / "p.csv"), "not finite in row 17"),
        (
            (
                "predict",
                trained["ce"],
                t,
                "--out",
                tmp_path / "p.csv",
                "--target-accuracy",
                0.9,
                "--target-coverage",
                0.5,
            ),
            "give one of --target-risk, --target-accuracy, --target-coverage",
        ),
        (
            ("predict", trained["ce"], t, "--out", tmp_path / "p.csv", "--target-coverage", 1.5),
            "target coverage must be",
        ),
        (("predict", tmp_path, t, "--out", tmp_path / "p.csv"), "not a selfcal model folder"),
    ]
    for args, message in cases:
        err = one_line_error(capsys, *args)
        assert message in err, (args, err)
    assert not out.exists()  # nothing was written by the failed runs


def test_a_label_the_model_never_saw_is_predicted_and_not_scored(capsys, trained, tmp_path):
    """Each row is handled on its own: a label the training data did not have warns in one
    line naming the file and the count, every row is predicted, and the accuracy is that of
    the rows whose label the model could predict."""
    rows = write_table(
        tmp_path / "new.csv",
        {"f0": [1.0, 2.0, 0.5], "f1": [0.0, 1.0, 0.5], "label": ["ant", "yak", "bee"]},
    )
    code, out, err = run(capsys, "predict", trained["ce"], rows, "--out", tmp_path / "q.npz")
    assert code == 0, err
    (line,) = err.splitlines()
    assert line == (
        f"warning: {rows}: 1 of 3 rows have labels the model was not trained on ('yak'); "
        "predicted, but left out of the scores"
    )
    with np.load(tmp_path / "q.npz", allow_pickle=False) as saved:
        predicted, labels = saved["predicted"], saved["labels"]
    assert len(predicted) == 3 and list(labels) == ["ant", "yak", "bee"]
    expected = np.mean(predicted[[0, 2]] == labels[[0, 2]])
    assert f"accuracy {expected:.4f}" in out


def test_a_folder_from_another_format_version_is_refused(capsys, files, trained, tmp_path):
    import shutil

    folder = tmp_path / "old"
    shutil.copytree(trained["ce"], folder)
    config = json.loads((folder / "config.json").read_text())
    config["format_version"] = 0
    (folder / "config.json").write_text(json.dumps(config))
    err = one_line_error(capsys, "predict", folder, files["test"], "--out", tmp_path / "p.csv")
    assert "model format version 0; this selfcal reads versions 1, 2" in err


def test_the_progress_bar_counts_candidates_and_epochs(files, tmp_path):
    """The CLI's bar (drawn only when stderr is a terminal) over grid points and epochs: BO4SC
    reports its epochs after each outer iteration (T = 10 epochs full batch)."""
    import io

    from rich.console import Console
    from rich.progress import Progress as Bar

    from selfcal.cli._train import progress_bar, rich_progress
    from selfcal.pipeline import TrainSettings, train

    with progress_bar(False) as nothing:
        assert nothing is None
    bar = Bar(console=Console(file=io.StringIO(), force_terminal=True))
    settings = TrainSettings(
        method="bo4sc", hidden=(8,), epochs=20, n_resamples=10, grid={"weight_lr": (30.0, 300.0)}
    )
    with bar:
        train(files["train"], files["val"], tmp_path / "m", settings, progress=rich_progress(bar))
    grid, epochs = bar.tasks
    assert (grid.total, grid.completed) == (2, 1)  # the second of two candidates ran last
    assert (epochs.total, epochs.completed) == (20, 20)


def test_a_run_that_fails_late_leaves_the_folder_as_it_was(capsys, files, trained, tmp_path):
    """Platt scaling refuses 5 classes only once it is fitted, after training: neither a new
    folder nor the model being replaced (--overwrite) is touched."""
    import shutil

    folder = tmp_path / "kept"
    shutil.copytree(trained["ce"], folder)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    common = ("--val", files["val"], "--method", "ce", "--calibrate", "platt", "--epochs", 2)
    for out in (folder, tmp_path / "new"):
        err = one_line_error(capsys, "train", files["train"], *common, "--out", out, "--overwrite")
        assert "binary" in err
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"]


# ----------------------------------------------------------------------------- selfcal dataset
@pytest.mark.parametrize("fmt", ["csv", "npz"])
def test_dataset_writes_the_loaders_raw_splits(capsys, tmp_path, fmt):
    code, stdout, _ = run(
        capsys, "dataset", "wine", "--out", tmp_path, "--seed", 3, "--format", fmt
    )
    assert code == 0 and stdout.count("wrote") == 3
    data = load_dataset("wine", 3)
    for split in ("train", "val", "test"):
        table = read_table(tmp_path / f"{split}.{fmt}")
        assert table.columns == data.feature_names
        assert np.array_equal(table.x, data.raw(split).numpy())
        assert np.array_equal(table.labels, data.split(split).y.numpy())


def test_dataset_refuses_what_is_not_a_table(capsys, tmp_path):
    code, _, err = run(capsys, "dataset", "digits-images", "--out", tmp_path)
    assert code == 2 and "is not tabular" in err
    code, _, err = run(capsys, "dataset", "wine", "--out", tmp_path, "--format", "xlsx")
    assert code == 2 and "--format must be one of" in err


def test_stop_by_refinement_keeps_the_epoch_of_lowest_validation_nll_after_ts(
    capsys, files, tmp_path, monkeypatch
):
    """``--stop-by refinement`` hands the refinement criterion to the checkpoint, whose kept
    epoch the report states in words; a bad value is a one-line error."""
    from selfcal.pipeline import fitting

    kept = []
    original = fitting.BestCheckpoint

    class Recording(original):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            kept.append(self)

    monkeypatch.setattr(fitting, "BestCheckpoint", Recording)
    report = train_model(capsys, files, tmp_path / "r", "ce", "--stop-by", "refinement")
    assert list(kept[0].kept) == ["refinement"]
    assert report["model"]["stop_by"] == "refinement"
    assert report["model"]["checkpoint_epoch"] == kept[0].kept["refinement"].epoch
    text = (tmp_path / "r" / "report.md").read_text()
    assert "the lowest validation NLL after temperature scaling" in text
    err = one_line_error(
        capsys, "train", files["train"], "--val", files["val"], "--stop-by", "ece",
        "--out", tmp_path / "bad",
    )  # fmt: skip
    assert "stop_by" in err


def test_by_default_a_trained_model_stops_by_refinement(capsys, files, tmp_path):
    """The default the benchmark's refine-stop regime supports; ``--stop-by nll`` the
    papers' rule."""
    default = train_model(capsys, files, tmp_path / "d", "ce")
    assert default["model"]["stop_by"] == "refinement"
    by_nll = train_model(capsys, files, tmp_path / "n", "ce", "--stop-by", "nll")
    assert by_nll["model"]["stop_by"] == "nll"


def test_a_model_folder_reads_only_its_own_files(capsys, files, trained, tmp_path):
    """A model folder is untrusted input: a config naming a file outside the folder (a path
    up, an absolute path, a device), a symbolic link in it, or an oversized JSON is a one-line
    error naming the file -- before anything is read from there."""
    import os
    import shutil

    def folder_with(edit) -> Path:
        folder = tmp_path / f"m{len(list(tmp_path.iterdir()))}"
        shutil.copytree(trained["ce"], folder)
        edit(folder)
        return folder

    def names_calibrator(name):
        def edit(folder):  # re-sealed: what a deliberate editor would do
            config = json.loads((folder / "config.json").read_text())
            config["calibrator"]["file"] = name
            config["checksum"] = config_checksum(config)
            (folder / "config.json").write_text(json.dumps(config))

        return edit

    def links_calibrator(folder):
        (folder / "calibrator.json").unlink()
        os.symlink("/dev/zero", folder / "calibrator.json")

    cases = [
        (names_calibrator("../calibrator.json"), "names the file '../calibrator.json'"),
        (names_calibrator("/dev/zero"), "names the file '/dev/zero'"),
        (names_calibrator("report.json"), "the calibrator's file must be calibrator.json"),
        (links_calibrator, "calibrator.json: a symbolic link"),
    ]
    for edit, message in cases:
        folder = folder_with(edit)
        err = one_line_error(capsys, "predict", folder, files["test"], "--out", tmp_path / "p.csv")
        assert message in err, err
    assert not (tmp_path / "p.csv").exists()


@pytest.mark.parametrize(("key", "value"), [("activation", "tanh"), ("dropout", 0.5)])
def test_an_architecture_predict_would_not_build_is_refused(
    capsys, files, trained, tmp_path, key, value
):
    import shutil

    folder = tmp_path / "m"
    shutil.copytree(trained["ce"], folder)
    config = json.loads((folder / "config.json").read_text())
    config["architecture"][key] = value
    config["checksum"] = config_checksum(config)
    (folder / "config.json").write_text(json.dumps(config))
    err = one_line_error(capsys, "predict", folder, files["test"], "--out", tmp_path / "p.csv")
    assert "config.json: architecture 'mlp' with activation" in err and repr(value) in err


@pytest.mark.parametrize(
    "edit",
    ["config", "calibrator.json", "selective.json", "model.safetensors"],
)
def test_a_model_folder_edited_after_training_is_refused(capsys, files, trained, tmp_path, edit):
    """``config.json`` records the SHA-256 of the files ``predict`` reads and of itself: a
    folder changed after training (by hand or on disk) says so, naming the file."""
    import shutil

    folder = tmp_path / "m"
    shutil.copytree(trained["ce"], folder)
    if edit == "config":
        config = json.loads((folder / "config.json").read_text())
        config["features"]["mean"][0] += 1.0
        (folder / "config.json").write_text(json.dumps(config))
        name = "config.json"
    else:
        data = bytearray((folder / edit).read_bytes())
        data[-3] ^= 1  # one bit
        (folder / edit).write_bytes(bytes(data))
        name = edit
    err = one_line_error(capsys, "predict", folder, files["test"], "--out", tmp_path / "p.csv")
    assert err.startswith(f"error: {folder / name}: its content does not match the checksum")
