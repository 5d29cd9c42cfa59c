"""``selfcal compare``: a table per set, the Markdown report with a figure per set, JSON, and
one-line errors."""

from __future__ import annotations

import json

import pytest
from helpers.cli import run
from helpers.sets import write_file_set, write_folder_set

from selfcal.io import PREDICTIONS_ENV


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("sets")
    write_folder_set(root / "cnn", 0)
    write_file_set(root / "llm.npz", 1)
    return root


def test_a_folder_of_sets_gives_a_table_each_and_the_report(capsys, sets, tmp_path):
    out = tmp_path / "report"
    code, text, err = run(capsys, "compare", sets, "--methods", "ts,svs,none", "--out", out)
    assert code == 0, err
    assert "cnn: 400 validation / 400 test rows, 4 classes" in text
    assert "llm: 400 validation / 400 test rows, 3 classes" in text
    assert "reference" in text and f"report: {out / 'README.md'}" in text
    report = (out / "README.md").read_text()
    assert "## cnn" in report and "## llm" in report
    assert "| calibrator | test NLL | NLL − TS's |" in report
    assert (out / "reliability_cnn.png").stat().st_size > 0
    assert "![reliability diagrams of llm](reliability_llm.png)" in report


def test_json_gives_every_calibrators_scores_and_differences_from_ts(capsys, sets):
    code, text, err = run(capsys, "compare", sets / "cnn", "--methods", "svs,auto", "--json")
    assert code == 0, err
    found = json.loads(text)["cnn"]
    assert found["n_val"] == 400 and found["n_classes"] == 4
    assert set(found["calibrators"]) == {"ts", "svs", "auto"}
    svs = found["calibrators"]["svs"]
    low, high = svs["nll_minus_ts"]["ci"]
    assert low <= svs["nll_minus_ts"]["value"] <= high
    assert svs["nll_minus_ts"]["value"] == pytest.approx(
        svs["nll"] - found["calibrators"]["ts"]["nll"]
    )
    assert found["calibrators"]["auto"]["chosen"] in ("sms", "svs", "ts", "ts-mix", "isotonic")


def test_the_default_folder_is_the_environment_variable(capsys, sets, monkeypatch):
    monkeypatch.setenv(PREDICTIONS_ENV, str(sets / "llm.npz"))
    code, text, err = run(capsys, "compare", "--methods", "ts,platt", "--json")
    assert code == 0, err
    assert "binary problems" in json.loads(text)["llm"]["calibrators"]["platt"]["error"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--methods", "ts,magic"], "unknown calibrator 'magic'"),
        (["--calibrators", ","], "--calibrators names no calibrator"),
    ],
)
def test_bad_methods_are_one_line_errors(capsys, sets, args, message):
    code, _, err = run(capsys, "compare", sets / "cnn", *args)
    assert code == 2 and message in err and err.count("\n") == 1


def test_no_sets_is_a_one_line_error(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv(PREDICTIONS_ENV, raising=False)
    code, _, err = run(capsys, "compare")
    assert code == 2 and f"set ${PREDICTIONS_ENV}" in err
    code, _, err = run(capsys, "compare", tmp_path)
    assert code == 2 and "no prediction sets here" in err
