"""End-to-end tests of ``selfcal evaluate`` / ``calibrate`` and :mod:`selfcal.io`.

Commands run in-process through :func:`selfcal.cli.main` (exactly what the console script
calls); a few run as a subprocess to check that no traceback ever reaches the user.
Set ``SELFCAL_SLOW_TESTS=1`` to include the 10^6-row timing test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers.cli import run
from helpers.metrics import REPORT_KEYS

from selfcal.cli import main
from selfcal.evaluation import METRICS, load_metric
from selfcal.io import load_predictions, save_probs

KEYS = REPORT_KEYS


def make_data(n=300, c=4, seed=0, scale=3.0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    z = rng.normal(size=(n, c)) + 1.5 * np.eye(c)[y]
    return (scale * z).astype(np.float64), y


def evaluate_json(capsys, path, *extra):
    code, out, err = run(capsys, "evaluate", path, "--json", "--resamples", 20, *extra)
    assert code == 0, err
    return json.loads(out)


def write_tabular(path: Path, cols: dict[str, np.ndarray]) -> Path:
    """CSV via numpy (exact %.17g) or parquet via pyarrow."""
    if path.suffix == ".csv":
        names = list(cols)
        body = np.column_stack([np.asarray(v, dtype=np.float64) for v in cols.values()])
        fmt = ["%d" if n == "label" else "%.17g" for n in names]
        np.savetxt(path, body, delimiter=",", header=",".join(names), comments="", fmt=fmt)
    else:
        pa = pytest.importorskip("pyarrow")
        import pyarrow.parquet as pq

        pq.write_table(pa.table({k: np.asarray(v) for k, v in cols.items()}), path)
    return path


def write_all_formats(tmp_path: Path, kind: str, scores: np.ndarray, y: np.ndarray) -> list[Path]:
    """The same data as .npz, .npy pair, .csv and .parquet."""
    npz = tmp_path / "d.npz"
    np.savez(npz, **{kind: scores, "labels": y})
    npy = tmp_path / f"d.{kind}.npy"
    np.save(npy, scores)
    np.save(tmp_path / "d.labels.npy", y)
    prefix = kind[:-1]  # logit / prob
    if scores.ndim == 1:
        cols = {prefix: scores}
    else:
        cols = {f"{prefix}_{j}": scores[:, j] for j in range(scores.shape[1])}
    cols["label"] = y
    csv = write_tabular(tmp_path / "d.csv", cols)
    parquet = write_tabular(tmp_path / "d.parquet", cols)
    return [npz, npy, csv, parquet]


# ----------------------------------------------------------------------------- errors
def test_nan_row_17_one_line_error(tmp_path, capsys):
    z, y = make_data()
    z[17, 2] = np.nan
    path = tmp_path / "bad.npz"
    np.savez(path, logits=z, labels=y)
    code, out, err = run(capsys, "evaluate", path)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert "row 17" in err and "NaN" in err and "Traceback" not in err


def test_nan_row_17_subprocess_no_traceback(tmp_path):
    z, y = make_data()
    z[17] = np.nan
    path = tmp_path / "bad.csv"
    write_tabular(path, {**{f"logit_{j}": z[:, j] for j in range(z.shape[1])}, "label": y})
    proc = subprocess.run(
        [sys.executable, "-m", "selfcal.cli", "evaluate", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "row 17" in proc.stderr and "Traceback" not in proc.stderr


def bad_inputs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    z, y = make_data()
    out_of_range = y.copy()
    out_of_range[5] = 4
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    p[9] *= 0.5
    np.savez(tmp_path / "range.npz", logits=z, labels=out_of_range)
    np.savez(tmp_path / "sum.npz", probs=p, labels=y)
    np.savez(tmp_path / "both.npz", probs=p, logits=z, labels=y)
    np.savez(tmp_path / "nolabels.npz", logits=z)
    (tmp_path / "d.txt").write_text("x")
    np.save(tmp_path / "plain.npy", z)
    write_tabular(tmp_path / "cols.csv", {"a": z[:, 0], "b": z[:, 1], "label": y})
    return {
        "missing": (tmp_path / "nope.npz", "no such file"),
        "extension": (tmp_path / "d.txt", "unknown file type '.txt'"),
        "labels range": (tmp_path / "range.npz", "labels must lie in [0, 4); row 5"),
        "probs sum": (tmp_path / "sum.npz", "sum to 1"),
        "both arrays": (tmp_path / "both.npz", "both 'logits' and 'probs'"),
        "no labels": (tmp_path / "nolabels.npz", "no labels"),
        "npy naming": (tmp_path / "plain.npy", "NAME.logits.npy"),
        "unnamed columns": (tmp_path / "cols.csv", "pass --kind"),
        "unknown example": ("example:nope", "unknown example"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing",
        "extension",
        "labels range",
        "probs sum",
        "both arrays",
        "no labels",
        "npy naming",
        "unnamed columns",
        "unknown example",
    ],
)
def test_bad_input_one_line_errors(tmp_path, capsys, case):
    path, expected = bad_inputs(tmp_path)[case]
    code, out, err = run(capsys, "evaluate", path)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1
    assert expected in err and "Traceback" not in err


@pytest.mark.parametrize(
    "args",
    [
        ["evaluate"],
        ["evaluate", "x.npz", "--bogus"],
        ["evaluate", "x.npz", "--kind", "scores"],
        ["evaluate", "x.npz", "--confidence", "2"],
        ["evaluate", "x.npz", "--interval", "bca"],
        ["nonsense"],
    ],
)
def test_usage_errors_one_line(capsys, args):
    code, out, err = run(capsys, *args)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1


def test_unexpected_error_hint(tmp_path, capsys, monkeypatch):
    import selfcal.evaluation

    def boom(*a, **k):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(selfcal.evaluation, "evaluate", boom)
    z, y = make_data()
    np.savez(tmp_path / "d.npz", logits=z, labels=y)
    code, out, err = run(capsys, "evaluate", tmp_path / "d.npz")
    assert code == 1 and "kaboom" in err and "SELFCAL_DEBUG=1" in err and err.count("\n") == 1
    monkeypatch.setenv("SELFCAL_DEBUG", "1")
    with pytest.raises(RuntimeError):
        main(["evaluate", str(tmp_path / "d.npz")])


# ----------------------------------------------------------------------------- evaluate
def test_json_keys_values_and_intervals(tmp_path, capsys):
    z, y = make_data(n=500)
    path = tmp_path / "d.npz"
    np.savez(path, logits=z, labels=y)
    result = evaluate_json(capsys, path, "--bins", 10)
    assert list(result) == KEYS == list(METRICS)
    for key, entry in result.items():
        assert set(entry) == {"value", "ci"}
        f = load_metric(key)
        opts = {"n_bins": 10} if f.takes_bins else {}
        assert entry["value"] == pytest.approx(f(logits=z, labels=y, **opts), rel=1e-9, abs=1e-12)
        lo, hi = entry["ci"]
        assert lo <= hi
        # Percentile intervals of plug-in means bracket the estimate; binned/smoothed
        # calibration errors are biased upwards under resampling, so their interval may sit
        # above the point estimate -- only lo <= hi is guaranteed there.
        if key in ("accuracy", "nll", "brier"):
            assert lo <= entry["value"] <= hi


def test_basic_interval_mirrors_percentile(tmp_path, capsys):
    z, y = make_data(n=500)
    path = tmp_path / "d.npz"
    np.savez(path, logits=z, labels=y)
    pct = evaluate_json(capsys, path, "--interval", "percentile")
    basic = evaluate_json(capsys, path, "--interval", "basic")
    for key in KEYS:
        t, (lo, hi) = pct[key]["value"], pct[key]["ci"]
        assert basic[key]["ci"] == pytest.approx([2 * t - hi, 2 * t - lo], abs=1e-12)
    code, out, _ = run(capsys, "evaluate", path, "--resamples", 20, "--interval", "basic")
    assert code == 0 and "basic bootstrap CI" in out


def test_table_output_and_seed(tmp_path, capsys):
    z, y = make_data()
    np.savez(tmp_path / "d.npz", logits=z, labels=y)
    code, out, err = run(capsys, "evaluate", tmp_path / "d.npz", "--resamples", 20)
    assert code == 0
    for key in KEYS:
        assert key in out
    assert "95% CI" in out
    a = evaluate_json(capsys, tmp_path / "d.npz", "--seed", 3)
    b = evaluate_json(capsys, tmp_path / "d.npz", "--seed", 3)
    assert a == b


@pytest.mark.parametrize("kind", ["logits", "probs"])
def test_formats_agree(tmp_path, capsys, kind):
    z, y = make_data()
    scores = z if kind == "logits" else np.exp(z) / np.exp(z).sum(1, keepdims=True)
    results = [evaluate_json(capsys, p) for p in write_all_formats(tmp_path, kind, scores, y)]
    for r in results[1:]:
        _close(r, results[0])


def _close(a: dict, b: dict) -> None:
    """Two ``--json`` results agree (values and interval ends)."""
    for key in KEYS:
        np.testing.assert_allclose(
            [a[key]["value"], *a[key]["ci"]],
            [b[key]["value"], *b[key]["ci"]],
            rtol=1e-9,
            atol=1e-12,
        )


@pytest.mark.parametrize("kind", ["logits", "probs"])
def test_binary_one_column_formats_agree(tmp_path, capsys, kind):
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 400)
    z = 2.0 * rng.normal(size=400) + 2.0 * (2 * y - 1)
    one = z if kind == "logits" else 1 / (1 + np.exp(-z))
    two = np.stack([np.zeros_like(z), z], 1) if kind == "logits" else np.stack([1 - one, one], 1)
    np.savez(tmp_path / "two.npz", **{kind: two, "labels": y})
    reference = evaluate_json(capsys, tmp_path / "two.npz")
    for path in write_all_formats(tmp_path, kind, one, y):
        _close(evaluate_json(capsys, path), reference)


def test_kind_option_for_unnamed_columns(tmp_path, capsys):
    z, y = make_data()
    named = write_tabular(
        tmp_path / "named.csv", {**{f"logit_{j}": z[:, j] for j in range(4)}, "label": y}
    )
    plain = write_tabular(
        tmp_path / "plain.csv", {"target": y, **{f"s{j}": z[:, j] for j in range(4)}}
    )
    a = evaluate_json(capsys, named)
    b = evaluate_json(capsys, plain, "--kind", "logits", "--label-column", "target")
    _close(a, b)


def test_example_and_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("selfcal ")
    code, out, _ = run(capsys, "example-path", "digits_test")
    assert code == 0 and Path(out.strip()).is_file()
    assert Path(out.strip()).stat().st_size < 200_000
    result = evaluate_json(capsys, "example:digits_test")
    assert list(result) == KEYS and result["accuracy"]["value"] > 0.8


def test_plot_writes_pngs(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    plots = pytest.importorskip("selfcal.plots")
    if not hasattr(plots, "save_figures"):
        pytest.skip("selfcal.plots.save_figures not available")
    code, out, err = run(
        capsys,
        "evaluate",
        "example:digits_test",
        "--json",
        "--resamples",
        10,
        "--plot",
        tmp_path / "figs",
    )
    assert code == 0, err
    json.loads(out)  # figures go to disk, the note to stderr: stdout stays one JSON object
    assert list((tmp_path / "figs").glob("*.png"))


# ----------------------------------------------------------------------------- io
@pytest.mark.parametrize("name", ["p.npz", "p.csv", "p.parquet", "p.probs.npy"])
def test_save_probs_round_trip(tmp_path, name):
    if name.endswith(".parquet"):
        pytest.importorskip("pyarrow")
    z, y = make_data(n=50)
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    save_probs(tmp_path / name, p, y)
    pred = load_predictions(tmp_path / name)
    np.testing.assert_allclose(pred.scores.numpy(), p, rtol=1e-12)
    np.testing.assert_array_equal(pred.labels.numpy(), y)


# ----------------------------------------------------------------------------- calibrate
def _has_registry() -> bool:
    try:
        from selfcal.posthoc import CALIBRATORS
    except ImportError:
        return False
    return "ts" in CALIBRATORS


@pytest.mark.skipif(not _has_registry(), reason="selfcal.posthoc.CALIBRATORS not available")
@pytest.mark.parametrize("out_name", ["cal.npz", "cal.csv"])
def test_calibrate_ts_round_trip(tmp_path, capsys, out_name):
    z, y = make_data(n=2000, scale=1.0)
    over = 4.0 * z  # sharpen: the model is now over-confident
    np.savez(tmp_path / "val.npz", logits=over[:1000], labels=y[:1000])
    np.savez(tmp_path / "test.npz", logits=over[1000:], labels=y[1000:])
    out = tmp_path / out_name
    code, text, err = run(
        capsys,
        "calibrate",
        "--method",
        "ts",
        "--fit",
        tmp_path / "val.npz",
        "--apply",
        tmp_path / "test.npz",
        "--out",
        out,
        "--save-calibrator",
        tmp_path / "ts.json",
    )
    assert code == 0, err
    assert "before" in text and "after" in text
    cal = load_predictions(out)
    probs = cal.scores.numpy()
    np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(cal.labels.numpy(), y[1000:])
    from selfcal.metrics import nll

    assert nll(cal) < nll(logits=over[1000:], labels=y[1000:])
    assert (tmp_path / "ts.json").is_file()


@pytest.mark.skipif(not _has_registry(), reason="selfcal.posthoc.CALIBRATORS not available")
def test_calibrate_unknown_method(tmp_path, capsys):
    code, _, err = run(
        capsys,
        "calibrate",
        "--method",
        "magic",
        "--fit",
        "example:digits_val",
        "--apply",
        "example:digits_test",
        "--out",
        tmp_path / "o.npz",
    )
    assert code == 2 and "unknown calibrator 'magic'" in err and err.count("\n") == 1


def test_calibrate_param_sets_a_hyperparameter(tmp_path, capsys):
    """``--param NAME=VALUE`` reaches the calibrator (JSON values typed, plain text a string):
    matrix scaling on the bundled digits logits with a stronger off-diagonal penalty, in
    seconds."""
    code, text, err = run(
        capsys,
        "calibrate",
        "--method",
        "matrix",
        "--param",
        "off_diagonal_l2=10",
        "--param",
        "bias_l2=0.5",
        "--fit",
        "example:digits_val",
        "--apply",
        "example:digits_test",
        "--out",
        tmp_path / "o.npz",
        "--save-calibrator",
        tmp_path / "m.json",
    )
    assert code == 0, err
    from selfcal.posthoc import Calibrator

    cal = Calibrator.load(tmp_path / "m.json")
    assert cal.get_params() == {
        "off_diagonal_l2": 10,
        "diagonal_l2": 1.0,
        "bias_l2": 0.5,
        "max_iter": 100,
        "kind": None,
    }


@pytest.mark.parametrize(
    ("param", "message"),
    [
        ("off_diagonal_l2", "--param takes NAME=VALUE, got 'off_diagonal_l2'"),
        ("temperature=2", "MatrixScaling has no hyperparameter 'temperature'"),
        ("bias_l2=-1", "bias_l2"),
    ],
)
def test_calibrate_bad_param_is_one_line(tmp_path, capsys, param, message):
    code, _, err = run(
        capsys,
        "calibrate",
        "--method",
        "matrix",
        "--param",
        param,
        "--fit",
        "example:digits_val",
        "--apply",
        "example:digits_test",
        "--out",
        tmp_path / "o.npz",
    )
    assert code == 2 and message in err and err.count("\n") == 1, err


def test_calibrate_method_help_lists_the_registry(capsys, monkeypatch):
    from selfcal.posthoc import calibrator_names, calibrator_summary

    monkeypatch.setenv("COLUMNS", "400")  # one help paragraph per line
    code, text, err = run(capsys, "calibrate", "--help")
    assert code == 0, err
    for name in calibrator_names():
        assert f" {name}: {calibrator_summary(name)} " in text, name
    assert "ts-grid: Temperature scaling" in text and "(method='grid')" in text


def test_one_calibrator_flag_with_the_old_spelling_kept(capsys, tmp_path):
    """``--calibrator`` names a calibrator in calibrate (and train, compare); ``--method``
    (0.1's spelling) and the class's kebab-case name give the same output."""
    outs = []
    for index, (flag, name) in enumerate(
        (("--calibrator", "ts"), ("--method", "temperature-scaling"))
    ):
        code, out, err = run(
            capsys,
            "calibrate",
            flag,
            name,
            "--fit",
            "example:digits_val",
            "--apply",
            "example:digits_test",
            "--out",
            tmp_path / f"{index}.npz",
        )
        assert code == 0, err
        outs.append(" ".join(out.split()[3:]).replace(f"{index}.npz", "X"))  # after "fitted NAME"
    assert outs[0] == outs[1]
    with np.load(tmp_path / "0.npz") as a, np.load(tmp_path / "1.npz") as b:
        assert np.array_equal(a["probs"], b["probs"])


# ----------------------------------------------------------------------------- scale
def _large(tmp_path: Path, n: int) -> Path:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, n)
    z = (3 * rng.normal(size=(n, 10)) + 4 * np.eye(10)[y]).astype(np.float32)
    path = tmp_path / "large.npz"
    np.savez(path, logits=z, labels=y)
    return path


def _timed_evaluate(capsys, path: Path) -> float:
    start = time.perf_counter()
    code, out, err = run(capsys, "evaluate", path, "--json")
    elapsed = time.perf_counter() - start
    assert code == 0, err
    result = json.loads(out)
    assert list(result) == KEYS
    print(f"\n{path.name}: evaluate took {elapsed:.1f} s")
    return elapsed


def test_evaluate_1e5_rows(tmp_path, capsys):
    _timed_evaluate(capsys, _large(tmp_path, 100_000))


@pytest.mark.skipif(
    not os.environ.get("SELFCAL_SLOW_TESTS"),
    reason="10^6-row timing test; set SELFCAL_SLOW_TESTS=1",
)
def test_evaluate_1e6_rows(tmp_path, capsys):
    _timed_evaluate(capsys, _large(tmp_path, 1_000_000))


def test_calibrate_criterion_is_autos_choice_rule(tmp_path, capsys):
    """``--criterion`` reaches ``auto`` (the word ``compare`` takes); on another calibrator,
    or given twice, it is a one-line error before any fit."""
    files = ["--fit", "example:digits_val", "--apply", "example:digits_test"]
    saved = tmp_path / "a.json"
    args = ["--calibrator", "auto", "--criterion", "ece", *files, "--out", tmp_path / "o.npz"]
    code, text, err = run(capsys, "calibrate", *args, "--save-calibrator", saved)
    assert code == 0, err
    from selfcal.posthoc import Calibrator

    assert Calibrator.load(saved).get_params()["criterion"] == "ece"
    for extra, message in [
        (["--calibrator", "ts", "--criterion", "ece"], "--criterion is auto's choice rule"),
        (["--calibrator", "auto", "--criterion", "ece", "--param", "criterion=nll"], "once"),
        (["--calibrator", "auto", "--criterion", "auc"], "criterion"),
    ]:
        code, _, err = run(capsys, "calibrate", *extra, *files, "--out", tmp_path / "p.npz")
        assert code == 2 and message in err and err.count("\n") == 1
