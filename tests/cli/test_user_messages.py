"""What a new user sees: the exact one-line errors for broken, empty or mislabelled files, the
number formatting of absurd values, and the lines ``calibrate``, ``predict`` and ``train``
print to explain themselves. Commands run in-process through :func:`selfcal.cli.main`."""

from __future__ import annotations

import contextlib
import io
import json
import sys
import warnings

import numpy as np
import pytest
from helpers.cli import TINY, run

from selfcal.cli import main
from selfcal.cli._common import fmt
from selfcal.data import load_dataset
from selfcal.io import load_predictions, write_table


def error_of(capsys, *args) -> str:
    """The one error line (without ``error: ``) of a command that must fail with exit 2."""
    code, out, err = run(capsys, *args)
    assert code == 2, err
    assert out == "" and err.startswith("error: ") and err.count("\n") == 1, err
    return err.removeprefix("error: ").removesuffix("\n")


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def scores(n: int = 60, c: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    return 2 * rng.normal(size=(n, c)) + 2 * np.eye(c)[y], y


# ----------------------------------------------------------------------------- 1. files
def test_broken_files_are_named_with_the_problem(tmp_path, capsys):
    (tmp_path / "x.npz").write_text("hello")
    (tmp_path / "e.npz").write_bytes(b"")
    (tmp_path / "adir").mkdir()
    (tmp_path / "j.logits.npy").write_text("junk")
    (tmp_path / "e.logits.npy").write_bytes(b"")
    np.save(tmp_path / "single.npy", np.zeros(3))
    (tmp_path / "single.npy").rename(tmp_path / "single.npz")
    np.savez(tmp_path / "obj.npz", logits=np.array([[1, 2]], dtype=object), labels=[0])
    z, y = scores()
    np.save(tmp_path / "o.logits.npy", z.astype(object), allow_pickle=True)
    np.savez(tmp_path / "nol.npz", logits=z, other=y)
    expected = {
        "x.npz": "not a valid .npz archive (not a zip file)",
        "e.npz": "the file is empty (0 bytes)",
        "single.npz": "not a valid .npz archive (a single .npy array)",
        "adir": "is a folder, not a file; pass one predictions file",
        "j.logits.npy": "not a valid .npy file (no NumPy header)",
        "e.logits.npy": "the file is empty (0 bytes)",
        "obj.npz": "the array 'logits' holds non-numeric (object) values, which selfcal does "
        "not load (nothing is unpickled)",
        "o.logits.npy": "the file holds non-numeric (object) values, which selfcal does not "
        "load (nothing is unpickled)",
        "nol.npz": "no labels (array 'labels' not found; arrays: logits, other)",
    }
    for name, message in expected.items():
        assert error_of(capsys, "evaluate", tmp_path / name) == f"{tmp_path / name}: {message}"


def test_a_folder_given_to_train_is_named_a_folder(tmp_path, capsys):
    (tmp_path / "adir").mkdir()
    (tmp_path / "x.npz").write_text("hello")
    err = error_of(capsys, "train", tmp_path / "adir", "--val", tmp_path / "adir", "--out", "m")
    assert err == f"{tmp_path / 'adir'}: is a folder, not a file"
    err = error_of(capsys, "train", tmp_path / "x.npz", "--val", tmp_path / "x.npz", "--out", "m")
    assert err == f"{tmp_path / 'x.npz'}: not a valid .npz archive (not a zip file)"


# ----------------------------------------------------------------------------- 2. kinds
LOOKS = "every row lies in [0, 1] and sums to 1"
OR_KIND = "or pass --kind logits (kind='logits' in Python) if these really are logits"


def test_probabilities_named_logits_stop_with_the_evidence(tmp_path, capsys):
    z, y = scores()
    p = softmax(z)
    np.savez(tmp_path / "f.npz", logits=p, labels=y)
    np.save(tmp_path / "g.logits.npy", p)
    np.save(tmp_path / "g.labels.npy", y)
    write_table(tmp_path / "f.csv", {**{f"logit_{j}": p[:, j] for j in range(3)}, "label": y})
    write_table(tmp_path / "b.csv", {"logit": p[:, 1], "label": (y == 1).astype(int)})
    expected = {
        "f.npz": f"the array 'logits' holds probabilities ({LOOKS}); rename it 'probs', {OR_KIND}",
        "g.logits.npy": "the scores named .logits.npy hold probabilities "
        f"({LOOKS}); rename the file NAME.probs.npy, {OR_KIND}",
        "f.csv": f"the logit_* columns hold probabilities ({LOOKS}); rename them "
        f"prob_0 .. prob_2, {OR_KIND}",
        "b.csv": "the 'logit' column holds probabilities (every value lies in [0, 1]); rename "
        f"it 'prob', {OR_KIND}",
    }
    for name, message in expected.items():
        path = tmp_path / name
        assert error_of(capsys, "evaluate", path) == f"{path}: {message}"
        with pytest.raises(ValueError, match="holds? probabilities"):
            load_predictions(path)
        # said explicitly, they are logits
        assert load_predictions(path, kind="logits").kind == "logits"
        code, out, err = run(capsys, "evaluate", path, "--kind", "logits", "--resamples", 10)
        assert code == 0, err
    out = tmp_path / "o.npz"
    fit = tmp_path / "f.npz"
    assert error_of(capsys, "calibrate", "--fit", fit, "--apply", fit, "--out", out).startswith(
        f"{fit}: the array 'logits' holds probabilities"
    )


# ----------------------------------------------------------------------------- 3. labels
STRING_LABELS = (
    "labels must be integer class indices in [0, C), got class names (e.g. 'a'); map each name "
    "to the index of its score column first"
)


def test_string_labels_get_the_one_message_with_the_file_name(tmp_path, capsys):
    z, y = scores()
    names = np.array(["a", "b", "c"])[y]
    np.savez(tmp_path / "s.npz", logits=z, labels=names)
    write_table(tmp_path / "s.csv", {**{f"logit_{j}": z[:, j] for j in range(3)}, "label": names})
    np.save(tmp_path / "s.logits.npy", z)
    np.save(tmp_path / "s.labels.npy", names)
    message = STRING_LABELS.replace("'a'", repr(str(names[0])))
    for name in ("s.npz", "s.csv", "s.logits.npy"):
        path = tmp_path / name
        assert error_of(capsys, "evaluate", path) == f"{path}: {message}"


# ----------------------------------------------------------------------------- 4. numbers
@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.04123, "0.0412"),
        (0.0, "0.0000"),
        (1.3160, "1.3160"),
        (5e304, "5e+304"),
        (2.0000000000000000034e306, "2e+306"),
        (3.2e-7, "3.2e-07"),
        (float("inf"), "inf"),
        (float("-inf"), "-inf"),
        (float("nan"), "nan"),
        (None, "n/a"),
    ],
)
def test_fmt_keeps_absurd_numbers_short(value, text):
    assert fmt(value) == text


def test_a_huge_logit_gives_a_readable_table(tmp_path, capsys):
    z, y = scores(n=50)
    z[0, (y[0] + 1) % 3] = 1e308
    np.savez(tmp_path / "big.npz", logits=z, labels=y)
    code, out, err = run(capsys, "evaluate", tmp_path / "big.npz", "--resamples", 10)
    assert code == 0, err
    nll = next(line for line in out.splitlines() if " nll " in line)
    assert "e+306" in nll and len(nll) < 60, nll
    assert "000000000" not in out
    warned = err.strip().splitlines()  # one line each, naming the file, no Python source line
    assert warned and all(line.startswith(f"warning: {tmp_path / 'big.npz'}: ") for line in warned)
    assert any("refinement_loss not computed" in line for line in warned)


def test_warnings_are_one_line_each_and_repeats_are_counted(capsys):
    import selfcal.cli._errors as boundary

    with boundary.errors(), boundary.source("val.npz"):
        for _ in range(3):
            warnings.warn("every validation prediction is correct;\n  T = 1", stacklevel=1)
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "warning: val.npz: every validation prediction is correct; T = 1",
        "warning: the warnings above came 2 more time(s)",
    ]


def test_applying_to_logits_beyond_the_fitted_range_names_the_file(tmp_path, capsys):
    z, y = scores(n=60)
    np.savez(tmp_path / "val.npz", logits=z, labels=y)
    np.savez(tmp_path / "big.npz", logits=np.array([[1.7e308, -1.7e308, 0.0]]), labels=[0])
    args = ("calibrate", "--method", "ts", "--fit", tmp_path / "val.npz")
    code, _, err = run(capsys, *args, "--apply", tmp_path / "big.npz", "--out", tmp_path / "o.npz")
    assert code == 2 and err.count("\n") == 1  # not "probs contain NaN", as before
    assert err.startswith(f"error: {tmp_path / 'big.npz'}: TemperatureScaling: row 0 has a logit")


def test_a_huge_feature_is_refused_before_training(tmp_path, capsys):
    rng = np.random.default_rng(0)
    f0 = rng.normal(size=40)
    f0[3] = 1e308
    y = np.arange(40) % 2
    table = write_table(tmp_path / "t.csv", {"f0": f0, "f1": rng.normal(size=40), "label": y})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy overflow warning either
        err = error_of(capsys, "train", table, "--val", table, "--out", tmp_path / "m", *TINY)
    assert err == (
        f"{table}: feature 'f0' has values too large to standardise (largest magnitude 1e+308; "
        "its variance overflows float64); rescale the column"
    )


# ----------------------------------------------------------------------------- 5. calibrate
def test_calibrate_prints_the_fitted_parameters(tmp_path, capsys):
    z, y = scores(n=200, c=4)
    np.savez(tmp_path / "v.npz", logits=3 * z, labels=y)
    out = tmp_path / "o.npz"
    code, stdout, err = run(
        capsys,
        "calibrate",
        "--fit",
        tmp_path / "v.npz",
        "--apply",
        tmp_path / "v.npz",
        "--out",
        out,
    )
    assert code == 0, err
    first = stdout.splitlines()[0]
    assert first.startswith("fitted ts on 200 rows: n_classes_=4; temperature_=")
    temperature = float(first.rsplit("=", 1)[1])
    assert 1 < temperature < 10 and len(first.rsplit("=", 1)[1]) <= 6  # 4 significant digits
    code, stdout, err = run(
        capsys, "calibrate", "--method", "vector", "--fit", tmp_path / "v.npz", "--apply",
        tmp_path / "v.npz", "--out", out,
    )  # fmt: skip
    assert code == 0, err
    first = stdout.splitlines()[0]
    assert first.startswith("fitted vector on 200 rows: n_classes_=4; weight_=4 values in [")
    assert "; bias_=4 values in [" in first


def test_calibrate_auto_names_its_choice_and_prints_the_cross_validation(tmp_path, capsys):
    z, y = scores(n=300, c=3)
    np.savez(tmp_path / "v.npz", logits=3 * z, labels=y)
    code, stdout, err = run(
        capsys, "calibrate", "--method", "auto", "--param", "candidates=ts,svs,platt", "--fit",
        tmp_path / "v.npz", "--apply", tmp_path / "v.npz", "--out", tmp_path / "o.npz",
    )  # fmt: skip
    assert code == 0, err
    first = stdout.splitlines()[0]
    assert first.startswith("fitted auto on 300 rows: chose ")
    chosen = first.split("chose ", 1)[1].split(":", 1)[0]
    assert chosen in ("ts", "svs")
    assert "3 candidates, nll of out-of-fold predictions" in stdout
    assert "PlattScaling" in stdout  # why platt failed, in its row


# ----------------------------------------------------------------------------- 6, 7. train/predict
@pytest.fixture(scope="module")
def blobs(tmp_path_factory) -> dict[str, object]:
    """Blobs 1.7 (seed 0) as CSVs with string labels, and a model trained on them without
    --method (with its exit code, stdout and stderr)."""
    folder = tmp_path_factory.mktemp("blobs")
    data = load_dataset("blobs-1.7", 0)
    paths: dict[str, object] = {}
    names = np.array(["ant", "bee", "cow", "dog", "elk"])
    for split in ("train", "val", "test"):
        x, y = data.raw(split).numpy(), data.split(split).y.numpy()
        columns = {"f0": x[:, 0], "f1": x[:, 1], "label": names[y]}
        paths[split] = write_table(folder / f"{split}.csv", columns)
    paths["model"] = folder / "model"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        args = ["train", paths["train"], "--val", paths["val"], "--out", paths["model"], *TINY]
        paths["train_run"] = (main([str(a) for a in args]), out.getvalue(), err.getvalue())
    return paths


def test_train_without_method_trains_ce_and_says_so(blobs):
    code, out, err = blobs["train_run"]
    assert code == 0, err
    assert err == (
        "no --method given: training 'ce' (cross-entropy), then temperature scaling -- what "
        "selfcal reproduce benchmark recommends\n"
    )
    assert out.startswith("ce: no hyperparameters to select; checkpoint epoch ")
    report = json.loads((blobs["model"] / "report.json").read_text())
    assert report["model"]["method"] == "ce" and "--method ce" in report["command"]
    assert report["model"]["calibrator"] == "ts"


def test_predict_abstains_only_when_asked_and_says_why(blobs, capsys, tmp_path):
    assert blobs["train_run"][0] == 0
    out = tmp_path / "p.csv"
    code, stdout, err = run(capsys, "predict", blobs["model"], blobs["test"], "--out", out)
    assert code == 0 and err == "", err
    flat = " ".join(stdout.split())  # the console wraps long lines
    assert flat.endswith(
        "no row abstained on (--target-risk certifies a threshold; --target-accuracy or "
        "--target-coverage choose one empirically)"
    )
    code, stdout, err = run(
        capsys,
        "predict",
        blobs["model"],
        blobs["test"],
        "--out",
        out,
        "--json",
        "--target-accuracy",
        0.95,
    )
    assert code == 0, err
    result = json.loads(stdout)  # stdout stays one JSON object
    n, k = result["rows"], result["abstained"]
    t = result["threshold"]["threshold"]
    assert err == (
        f"abstaining on {k} of {n} rows ({100 * k / n:.3g}%): the threshold {t:.4g} was chosen "
        "on the validation rows so that the accepted rows' accuracy is >= 0.95; "
        "use --target-coverage or --target-accuracy to trade coverage for accuracy\n"
    )
    code, stdout, err = run(
        capsys, "predict", blobs["model"], blobs["test"], "--out", out, "--target-coverage", 0.5
    )
    assert code == 0, err
    assert "so that it accepts 50% of them; use --target-coverage" in err
    assert err.count("\n") == 1 and "abstention, target coverage 0.5" in stdout


def test_predict_says_when_no_threshold_reaches_the_target():
    from selfcal.cli._predict import abstain_note
    from selfcal.pipeline.selective import Threshold

    none = Threshold("accuracy", 0.99, None, 0.0, None)
    assert abstain_note(none, 1000, 1000) == (
        "abstaining on 1000 of 1000 rows (100%): no threshold reaches accuracy 0.99 on the "
        "validation rows, not even the most confident rows alone; lower --target-accuracy or "
        "use --target-coverage"
    )


# ----------------------------------------------------------------------------- 8. help
def test_kind_help_speaks_of_array_and_column_names(capsys):
    code, out, _ = run(capsys, "evaluate", "--help")
    flat = " ".join(out.replace("│", " ").split())
    assert code == 0 and "when the array or column names don't say" in flat
    assert "file names don't say" not in flat


# ----------------------------------------------------------------------------- 9. output files
# Every output path is judged before the input is read, let alone a calibrator fitted or a
# bootstrap run: reading the input is replaced by a stand-in that stops the command with
# "input reached", so each refusal below provably comes first, and a good path reaches it.
REACHED = "input reached"


def _stop(*_args, **_kwargs):
    raise ValueError(REACHED)


def test_calibrate_refuses_bad_outputs_before_reading_or_fitting(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("selfcal.cli._calibrate.read", _stop)
    (tmp_path / "adir").mkdir()
    head = ["calibrate", "--fit", "example:digits_val", "--apply", "example:digits_test"]
    save = tmp_path / "ok.npz"
    refused = {
        ("--out", tmp_path / "x.txt"): f"{tmp_path / 'x.txt'}: unknown output type '.txt'; "
        "write .npz, .csv, .parquet or NAME.probs.npy",
        ("--out", tmp_path / "noext"): f"{tmp_path / 'noext'}: unknown output type "
        "'(no extension)'; write .npz, .csv, .parquet or NAME.probs.npy",
        ("--out", tmp_path / "x.npy"): f"{tmp_path / 'x.npy'}: name the output NAME.probs.npy",
        ("--out", tmp_path / "adir"): f"{tmp_path / 'adir'}: is a folder; name an output file "
        "(.npz, .csv, .parquet or NAME.probs.npy)",
        ("--out", save, "--save-calibrator", tmp_path / "c.npz"): f"--save-calibrator "
        f"{tmp_path / 'c.npz'}: the calibrator is saved as JSON; name the file NAME.json, not "
        "'.npz'",
        ("--out", save, "--save-calibrator", tmp_path / "adir"): f"--save-calibrator "
        f"{tmp_path / 'adir'}: is a folder; name a .json file",
    }
    for args, message in refused.items():
        assert error_of(capsys, *head, *args) == message
    for good in ("o.npz", "o.csv", "o.probs.npy", "o.NPZ"):
        args = ("--out", tmp_path / good, "--save-calibrator", tmp_path / "c.JSON")
        assert error_of(capsys, *head, *args) == REACHED
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # not installed
    assert error_of(capsys, *head, "--out", tmp_path / "o.parquet") == (
        "writing .parquet files needs pyarrow: pip install pyarrow (or selfcal[full])"
    )


def test_evaluate_refuses_a_bad_plot_folder_before_reading(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("selfcal.cli._evaluate.read", _stop)
    (tmp_path / "afile").write_text("")
    head = ["evaluate", "example:digits_test", "--plot"]
    assert error_of(capsys, *head, tmp_path / "afile") == (
        f"--plot {tmp_path / 'afile'}: is a file; --plot takes a folder for the PNG diagrams"
    )
    assert error_of(capsys, *head, tmp_path / "new") == REACHED
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # not installed
    assert error_of(capsys, *head, tmp_path / "new") == (
        "--plot needs matplotlib: pip install 'selfcal[full]' (or matplotlib)"
    )


def test_predict_refuses_bad_outputs_before_loading_the_model(tmp_path, capsys, monkeypatch):
    missing = tmp_path / "no-model"  # never read: the output is judged first
    assert error_of(capsys, "predict", missing, "rows.csv", "--out", tmp_path / "p.txt") == (
        f"{tmp_path / 'p.txt'}: unknown output type '.txt'; use .csv, .parquet or .npz"
    )
    monkeypatch.setattr("selfcal.pipeline.predict", _stop)
    (tmp_path / "p.csv").mkdir()
    assert error_of(capsys, "predict", missing, "rows.csv", "--out", tmp_path / "p.csv") == (
        f"{tmp_path / 'p.csv'}: is a folder; name an output file (.csv, .parquet or .npz)"
    )
    assert error_of(capsys, "predict", missing, "rows.csv", "--out", tmp_path / "p.npz") == (
        REACHED
    )
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # not installed
    assert error_of(capsys, "predict", missing, "rows.csv", "--out", tmp_path / "p.parquet") == (
        "writing .parquet files needs pyarrow: pip install pyarrow (or selfcal[full])"
    )


def test_a_csv_without_header_is_named_one(tmp_path, capsys):
    """``np.savetxt`` without ``header=``: the first data row is not read as column names,
    with or without --kind."""
    z, y = scores(n=20, c=4)
    path = tmp_path / "m08.csv"
    np.savetxt(path, np.column_stack([z, y]), delimiter=",")
    first = [f"{v:.18e}" for v in z[0, :2]]
    expected = (
        f"{path}: the first row looks like data, not column names ({first[0]}, {first[1]}, …): "
        "add a header (logit_0..logit_3, label; prob_* for probabilities), e.g. "
        "np.savetxt(..., delimiter=',', header='logit_0,...,label', comments='')"
    )
    assert error_of(capsys, "evaluate", path) == expected
    assert error_of(capsys, "evaluate", path, "--kind", "logits") == expected
