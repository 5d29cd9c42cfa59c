"""``selfcal evaluate`` on predictions with groups (:mod:`selfcal.cli._groups`): per-group
numbers in the terminal (the worst few) and in ``--json`` (every group), equal to the library's;
groups are never ignored, and a bad group is one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.cli import run

from selfcal import Predictions
from selfcal.evaluation import evaluate_groups
from selfcal.io import write_table

N = 400
RNG = np.random.default_rng(0)
Y = RNG.integers(0, 3, N)
Z = RNG.normal(size=(N, 3)) * 2 + 2 * np.eye(3)[Y]
SUBJECT = RNG.choice(["law", "math", "virology", "art"], N, p=[0.5, 0.3, 0.15, 0.05])


def test_json_holds_every_group_as_the_library_computes_it(tmp_path, capsys):
    np.savez(tmp_path / "a.npz", logits=Z, labels=Y, groups=SUBJECT)
    code, out, err = run(capsys, "evaluate", tmp_path / "a.npz", "--json", "--resamples", 20)
    assert code == 0, err
    got = json.loads(out)["groups"]
    expected = evaluate_groups(Predictions.from_logits(Z, Y, SUBJECT), n_resamples=20)
    assert got["n_groups"] == 4 and got["n_draws"] == expected.n_draws
    assert [g["name"] for g in got["per_group"]] == ["art", "law", "math", "virology"]
    for g, row in enumerate(got["per_group"]):
        assert row["size"] == int((SUBJECT == row["name"]).sum())
        for key in ("accuracy", "nll", "ece", "null_ece", "excess_ece", "p_value"):
            assert row[key] == pytest.approx(float(getattr(expected.report, key)[g]))
    worst = got["worst_group_ece"]
    assert worst["group"] == expected.report.names[expected.report.worst]
    assert worst["value"] == pytest.approx(expected.worst_ece.value)
    assert worst["ci"] == pytest.approx([expected.worst_ece.low, expected.worst_ece.high])
    assert worst["ci"][0] <= worst["value"] <= worst["ci"][1]
    excess = got["worst_group_debiased_ece"]
    assert excess["value"] == pytest.approx(expected.worst_excess.value)
    assert got["multicalibration_error"]["value"] == pytest.approx(expected.multicalibration.value)


def test_terminal_lists_the_worst_few_and_the_worst_group(tmp_path, capsys):
    np.savez(tmp_path / "a.npz", logits=Z, labels=Y, groups=SUBJECT)
    code, out, err = run(
        capsys, "evaluate", tmp_path / "a.npz", "--resamples", 20, "--groups-shown", 2
    )
    assert code == 0, err
    assert "4 groups: the 2 whose ECE most exceeds" in out
    listed = [name for name in ("art", "law", "math", "virology") if f"│ {name} " in out]
    assert len(listed) == 2
    assert "worst group by ECE: " in out and "worst group by excess ECE: " in out
    assert "multicalibration error" in out


def test_table_groups_column(tmp_path, capsys):
    columns = {f"logit_{j}": Z[:, j] for j in range(3)} | {"label": Y, "subject": SUBJECT}
    path = write_table(tmp_path / "a.csv", columns)
    code, out, err = run(capsys, "evaluate", path, "--json", "--resamples", 10)
    assert code == 0 and "groups" not in json.loads(out)  # a table's groups are named
    code, out, err = run(
        capsys, "evaluate", path, "--json", "--resamples", 10, "--groups", "subject"
    )
    assert code == 0, err
    assert json.loads(out)["groups"]["n_groups"] == 4
    code, out, err = run(capsys, "evaluate", path, "--groups", "site")
    assert code == 2 and err.count("\n") == 1 and "no group column 'site'" in err


def test_bad_groups_are_one_line(tmp_path, capsys):
    bad = SUBJECT.copy()
    bad[7] = ""
    np.savez(tmp_path / "a.npz", logits=Z, labels=Y, groups=bad)
    code, out, err = run(capsys, "evaluate", tmp_path / "a.npz")
    assert code == 2 and err.count("\n") == 1
    assert "a.npz: groups has an empty group name in row 7" in err
    np.savez(tmp_path / "b.npz", logits=Z, labels=Y, groups=SUBJECT)
    code, out, err = run(capsys, "evaluate", tmp_path / "b.npz", "--groups", "subject")
    assert code == 2 and "--groups names columns of a .csv or .parquet table" in err


def test_compare_reports_groups_and_calibrate_says_it_does_not_use_them_yet(tmp_path, capsys):
    """Never silently ignored: compare reports each calibrator per group (no note); calibrate,
    which reads groups but does not use them with these calibrators, says so in one line naming
    the file (and none without groups)."""
    from helpers.sets import write_folder_set

    folder = write_folder_set(tmp_path / "sets" / "s", 0, n=200, c=3)
    for split in ("val", "test"):
        with np.load(folder / f"{split}.npz") as data:
            arrays = dict(data)
        np.savez(folder / f"{split}.npz", **arrays, groups=np.arange(200) % 4)
    args = ["--calibrators", "ts", "--out", tmp_path / "report"]
    code, out, err = run(capsys, "compare", tmp_path / "sets", *args)
    assert code == 0, err
    assert "note:" not in err and "4 groups in the test split" in out
    fit, apply = folder / "val.npz", folder / "test.npz"
    args = ["calibrate", "--fit", fit, "--apply", apply, "--out", tmp_path / "p.npz"]
    code, _, err = run(capsys, *args, "--calibrator", "ts")
    assert code == 0, err
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert [n.split(" holds")[0] for n in notes] == [f"note: {fit}", f"note: {apply}"]
    np.savez(tmp_path / "plain.npz", logits=Z, labels=Y)
    args = ["--fit", tmp_path / "plain.npz", "--apply", tmp_path / "plain.npz"]
    code, _, err = run(capsys, "calibrate", *args, "--out", tmp_path / "q.npz")
    assert code == 0 and "note:" not in err


def test_evaluate_conformal_reports_each_groups_coverage_of_the_marginal_sets(tmp_path, capsys):
    """``--conformal`` with groups: every group's scored rows, coverage and mean set size in
    ``--json`` equal those computed from the library's marginal sets on the same split; the
    terminal lists the least covered first."""
    from selfcal.conformal import SplitConformal

    np.savez(tmp_path / "a.npz", logits=Z, labels=Y, groups=SUBJECT)
    args = ("evaluate", tmp_path / "a.npz", "--conformal", "0.1", "--resamples", 20)
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    got = json.loads(out)["conformal"]["groups"]
    order = np.random.default_rng(0).permutation(N)  # the CLI's split: --seed 0
    cal, test = np.sort(order[: N // 2]), np.sort(order[N // 2 :])
    pred = Predictions.from_logits(Z, Y)
    model = SplitConformal(alpha=0.1, nonconformity="aps", seed=0)
    model.fit(probs=pred.probs[cal], labels=Y[cal])
    sets = model.predict_set(probs=pred.probs[test]).numpy()
    assert [g["name"] for g in got] == ["art", "law", "math", "virology"]
    for row in got:
        rows = SUBJECT[test] == row["name"]
        assert row["size"] == int(rows.sum())
        assert row["coverage"] == pytest.approx(sets[rows, Y[test][rows]].mean())
        assert row["set_size"] == pytest.approx(sets[rows].sum(1).mean())
    code, out, err = run(capsys, *args, "--groups-shown", 2)
    assert code == 0, err
    words = " ".join(out.split())  # rich wraps titles at the terminal's width
    assert "conformal coverage per group, alpha 0.1" in words
    assert "the 2 least covered of 4 groups" in words
    least = min(got, key=lambda g: g["coverage"])["name"]
    assert f"│ {least} " in out.split("least covered")[0].split("coverage per")[-1]
