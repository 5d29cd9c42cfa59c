"""``selfcal compare``: a table per set, the Markdown report with a figure per set, JSON, and
one-line errors."""

from __future__ import annotations

import json

import numpy as np
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
    assert report.index("## Summary") < report.index("## cnn")
    assert (out / "reliability_cnn.png").stat().st_size > 0
    assert "![reliability diagrams of llm](reliability_llm.png)" in report


def test_json_gives_every_calibrators_scores_and_differences_from_ts(capsys, sets):
    code, text, err = run(capsys, "compare", sets / "cnn", "--methods", "svs,auto", "--json")
    assert code == 0, err
    found = json.loads(text)["sets"]["cnn"]
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
    assert "binary problems" in json.loads(text)["sets"]["llm"]["calibrators"]["platt"]["error"]


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


def _softmax_set(folder, seed=0):
    """A folder set whose ``logits`` arrays hold probabilities."""
    write_folder_set(folder, seed)
    for split in ("val", "test"):
        arrays = dict(np.load(folder / f"{split}.npz"))
        z = arrays["logits"].astype(np.float64)
        p = np.exp(z - z.max(1, keepdims=True))
        arrays["logits"] = p / p.sum(1, keepdims=True)
        np.savez(folder / f"{split}.npz", **arrays)
    return folder


def test_probabilities_under_logits_are_refused_with_evaluates_message_and_the_rest_judged(
    capsys, tmp_path
):
    root = tmp_path / "sets"
    _softmax_set(root / "bad")
    write_folder_set(root / "good", 0)
    code, text, err = run(capsys, "compare", root, "--calibrators", "ts", "--out", tmp_path / "r")
    _, _, said = run(capsys, "evaluate", root / "bad" / "val.npz")
    assert code == 2 and "good: 400 validation / 400 test rows" in text
    assert err.startswith("error: ") and said.strip() in err.splitlines()[0]
    assert (
        "could not be read" in text
        and "could not be read" in (tmp_path / "r/README.md").read_text()
    )
    code, text, err = run(
        capsys, "compare", root / "bad", "--calibrators", "ts", "--kind", "logits", "--json"
    )
    assert code == 0 and json.loads(text)["sets"]["bad"]["kind"] == "logits"


def test_every_warning_of_a_fit_reaches_the_terminal_the_report_and_json(capsys, tmp_path):
    folder = write_folder_set(tmp_path / "easy", 0, n=60)
    for split in ("val", "test"):  # every validation prediction correct
        arrays = dict(np.load(folder / f"{split}.npz"))
        arrays["logits"] = (20 * np.eye(4)[arrays["labels"]]).astype(np.float32)
        np.savez(folder / f"{split}.npz", **arrays)
    out = tmp_path / "r"
    code, text, err = run(capsys, "compare", folder, "--calibrators", "ts,svs", "--out", out)
    assert code == 0, err
    lines = [line for line in err.splitlines() if "validation predictions are correct" in line]
    assert lines and all(line.startswith("warning: easy: ") for line in lines)
    assert len(lines) == len(set(lines))  # one line per distinct message
    assert "validation predictions are correct" in (out / "README.md").read_text()
    code, text, err = run(capsys, "compare", folder, "--calibrators", "ts,svs", "--json")
    found = json.loads(text)["sets"]["easy"]
    assert any("validation predictions are correct" in w["message"] for w in found["warnings"])
    assert any("predictions are correct" in m for m in found["calibrators"]["ts"]["warnings"])


def test_each_set_says_which_calibrator_to_use_by_the_criterion(capsys, sets, tmp_path):
    code, text, err = run(capsys, "compare", sets / "cnn", "--calibrators", "svs,auto", "--json")
    rec = json.loads(text)["sets"]["cnn"]["recommendation"]
    assert code == 0 and rec["criterion"] == "nll" and rec["use"] in ("sms", "svs", "ts", "ts-mix")
    args = ("--calibrators", "auto", "--criterion", "ece", "--out", tmp_path / "r")
    code, text, err = run(capsys, "compare", sets / "cnn", *args)
    assert code == 0 and "use " in text
    assert "ECE − TS's [95% CI]" in text and ("cross-validated ECE" in text or "use ts" in text)
    code, _, err = run(capsys, "compare", sets / "cnn", "--criterion", "auc")
    assert code == 2 and "--criterion must be one of" in err


def test_a_label_shifted_test_split_is_flagged_everywhere(capsys, tmp_path):
    folder = write_folder_set(tmp_path / "shifted", 0, n=2000)
    arrays = dict(np.load(folder / "test.npz"))
    keep = (
        np.flatnonzero(arrays["labels"] == 0)[:300].tolist()
        + np.flatnonzero(arrays["labels"] == 1)[:10].tolist()
    )
    np.savez(folder / "test.npz", logits=arrays["logits"][keep], labels=arrays["labels"][keep])
    out = tmp_path / "r"
    code, text, err = run(capsys, "compare", folder, "--calibrators", "ts", "--out", out)
    assert code == 0
    assert any(line.startswith("warning: shifted: test labels") for line in err.splitlines())
    assert "! test labels" in text
    assert "on a test split unlike validation" in " ".join(text.split())  # wrapped to width
    report = (out / "README.md").read_text()
    assert report.index("**Warning:** test labels") < report.index("| calibrator |")
    code, text, err = run(capsys, "compare", folder, "--calibrators", "ts", "--json")
    assert json.loads(text)["sets"]["shifted"]["split_check"]["exchangeable"] is False


def test_piped_output_is_at_most_120_columns_with_each_interval_on_one_line(
    capsys, sets, tmp_path, monkeypatch
):
    import re

    monkeypatch.delenv("COLUMNS", raising=False)
    code, text, err = run(capsys, "compare", sets, "--out", tmp_path / "r")
    assert code == 0, err
    assert max(map(len, text.splitlines())) <= 120
    assert text.index("set(s) compared") < text.index("cnn: 400 validation")
    interval = re.compile(r"[-+]\d\.\d{4} \[[-+]\d\.\d{4}, [-+]\d\.\d{4}\]")
    assert len(interval.findall(text)) >= 8  # every calibrator's, whole, on its line
    monkeypatch.setenv("COLUMNS", "100")
    code, text, err = run(capsys, "compare", sets / "cnn", "--out", tmp_path / "r")
    assert max(map(len, text.splitlines())) <= 100


def test_an_output_folder_that_is_a_file_is_refused_before_any_fit(capsys, sets, tmp_path):
    (tmp_path / "x.txt").write_text("")
    code, text, err = run(capsys, "compare", sets, "--out", tmp_path / "x.txt")
    assert code == 2 and "x.txt: is a file; a report is written as a folder" in err and text == ""


def test_two_sets_of_one_name_the_second_is_refused_by_name_and_the_first_judged(capsys, tmp_path):
    root = tmp_path / "dup"
    write_folder_set(root / "a", 0)
    write_file_set(root / "a.npz", 1)
    code, text, err = run(capsys, "compare", root, "--calibrators", "ts", "--json")
    found = json.loads(text)
    assert code == 2 and list(found["sets"]) == ["a"] and len(found["failed"]) == 1
    assert "another prediction set is named 'a'" in err and err.count("error:") == 1


def test_a_set_read_through_a_link_names_the_real_files(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # a long temporary path, whole on its line
    real = write_folder_set(tmp_path / "elsewhere" / "m", 0)
    (tmp_path / "sets").mkdir()
    (tmp_path / "sets" / "m").symlink_to(real)
    code, text, err = run(capsys, "compare", tmp_path / "sets", "--calibrators", "ts", "--json")
    assert code == 0 and str(real) in json.loads(text)["sets"]["m"]["read_from"]
    code, text, err = run(
        capsys, "compare", tmp_path / "sets", "--calibrators", "ts", "--out", tmp_path / "r"
    )
    assert (
        str(real) in " ".join(text.split()) and str(real) in (tmp_path / "r/README.md").read_text()
    )


def test_an_interrupt_after_the_first_new_figure_leaves_the_old_report_whole(
    capsys, sets, tmp_path, monkeypatch
):
    """The audit's kill of ``compare --out DIR`` over an earlier report (6 of 8 left the old
    README beside a mix of figures): interrupted after its first figure, the rerun on other
    data with the same set names leaves the old report, every file of it, and nothing beside."""
    import hashlib
    from pathlib import Path

    def contents(folder):
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}

    out, other = tmp_path / "report", tmp_path / "other"
    write_folder_set(other / "cnn", 7)
    write_file_set(other / "llm.npz", 8)
    assert run(capsys, "compare", sets, "--calibrators", "ts,svs", "--out", out)[0] == 0
    old = contents(out)
    assert {"README.md", "reliability_cnn.png", "reliability_llm.png"} <= set(old)
    real = Path.write_bytes

    def interrupted(self, data):
        real(self, data)
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_bytes", interrupted)
    code, _, err = run(capsys, "compare", other, "--calibrators", "ts,svs", "--out", out)
    monkeypatch.undo()
    assert code == 130 and "interrupted" in err
    assert contents(out) == old
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert run(capsys, "compare", other, "--calibrators", "ts,svs", "--out", out)[0] == 0
    new = contents(out)
    assert all(new[name] != old[name] for name in old)  # every file replaced, none mixed


def test_a_set_name_is_text_in_the_report_never_markdown(capsys, tmp_path):
    """The audit: a set folder named ``x | y`` + newline + ``# injected heading`` put a heading
    into the report."""
    write_folder_set(tmp_path / "sets" / "x | y\n# injected heading", 0, n=200, c=3)
    out = tmp_path / "report"
    code, _, err = run(capsys, "compare", tmp_path / "sets", "--calibrators", "ts", "--out", out)
    assert code == 0, err
    lines = (out / "README.md").read_text().splitlines()
    assert not any(line.startswith("# injected") for line in lines)
    assert "## x \\| y # injected heading" in lines
    image = next(line for line in lines if line.startswith("![reliability diagrams of x"))
    assert image.endswith("(reliability_x%20%7C%20y%0A%23%20injected%20heading.png)")
