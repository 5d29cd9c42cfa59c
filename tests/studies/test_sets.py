"""The studies on the user's prediction sets (``selfcal reproduce posthoc|conformal --sets
DIR``): one run per set keyed by its files' digest, reports by family, each group's coverage,
and the one-line errors of the ``--sets`` option."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.cli import run
from helpers.sets import write_file_set, write_folder_set

from selfcal.experiments.report import check_provenance
from selfcal.io import PREDICTIONS_ENV


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("sets")
    write_folder_set(root / "grouped", 0, n=300, c=4, groups=6)
    write_file_set(root / "small.npz", 2, n=300, c=3)
    return root


@pytest.fixture(scope="module")
def posthoc(sets, tmp_path_factory):
    import os

    work = tmp_path_factory.mktemp("posthoc")
    before = os.environ.get(PREDICTIONS_ENV)
    args = ["reproduce", "posthoc", "--sets", str(sets), "--store", str(work / "s.sqlite")]
    args += ["--out", str(work / "report"), "--workers", "1", "--json"]
    from selfcal.cli import main

    code = main(args)
    assert code == 0
    if before is None:  # the option set it for the sweep's workers
        os.environ.pop(PREDICTIONS_ENV, None)
    return work


def test_every_set_is_one_run_and_the_report_groups_them_by_class_count(posthoc):
    text = (posthoc / "report" / "README.md").read_text()
    assert text.startswith("# Post-hoc leaderboard on prediction sets")
    assert "**4 classes**: 1 prediction sets (grouped)" in text
    assert "**3 classes**: 1 prediction sets (small)" in text
    assert "| grouped | 4 | 300 / 300 |" in text and "`auto` chose:" in text
    made = check_provenance(posthoc / "report")
    assert made.protocol == "sets" and "--sets " in made.command
    # the groups are not used by the leaderboard, and it says so (compare reports them)
    assert "Sets with groups: grouped (6 groups). This leaderboard" in text
    assert "small (" not in text.split("Sets with groups:")[1].split("\n")[0]


def test_a_rerun_resumes_and_a_changed_set_is_a_new_run(capsys, sets, posthoc, tmp_path):
    import shutil

    copy = tmp_path / "sets"
    shutil.copytree(sets, copy)
    store = posthoc / "s.sqlite"
    args = ["reproduce", "posthoc", "--sets", copy, "--store", store, "--out", tmp_path / "r"]
    code, text, err = run(capsys, *args, "--workers", "1")
    assert code == 0, err
    assert "0 runs done, 2 already stored" in text  # the files, not the folder, name a run
    y = np.load(copy / "grouped" / "test.npz")["labels"]
    z = np.load(copy / "grouped" / "test.npz")["logits"]
    np.savez(copy / "grouped" / "test.npz", logits=z, labels=y)  # groups dropped...
    np.savez(
        copy / "grouped" / "val.npz",
        **{k: v for k, v in np.load(copy / "grouped" / "val.npz").items() if k != "groups"},
    )
    code, text, err = run(capsys, *args, "--workers", "1")
    assert code == 0, err
    assert "1 runs done, 1 already stored" in text  # ...a new digest: a new run


def test_the_conformal_study_reports_each_groups_coverage(capsys, sets, tmp_path):
    args = ["reproduce", "conformal", "--sets", sets, "--store", tmp_path / "c.sqlite"]
    code, text, err = run(capsys, *args, "--out", tmp_path / "report", "--workers", "1", "--json")
    assert code == 0, err
    payload = json.loads(text)
    grouped = payload["4 classes"]["grouped"]
    for step in ("none", "ts", "sms", "auto"):
        for predictor in ("marginal", "mondrian"):
            worst = grouped[f"worst_group_coverage.{step}.{predictor}.0.1"]
            assert 0.0 <= worst <= 1.0
    assert "worst_group_coverage.none.marginal.0.1" not in payload["3 classes"]["small"]
    report = (tmp_path / "report" / "README.md").read_text()
    assert "### Coverage of each group" in report and "**grouped** (6 groups)" in report


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["reproduce", "gra-toy", "--sets", "."], "does not run on prediction sets"),
        (["reproduce", "posthoc", "--sets", ".", "--protocol", "full"], "not 'full'"),
    ],
)
def test_the_sets_option_says_when_it_does_not_apply(capsys, args, message):
    code, _, err = run(capsys, *args)
    assert code == 2 and message in err


def test_a_folder_without_sets_is_an_error_before_any_run(capsys, tmp_path):
    code, _, err = run(
        capsys, "reproduce", "posthoc", "--sets", tmp_path, "--store", tmp_path / "s"
    )
    assert code == 2 and "no prediction sets here" in err
    assert not (tmp_path / "s").exists()


def test_the_studies_read_sets_by_the_one_kind_rule_and_its_override(capsys, tmp_path):
    """Probabilities stored as ``logits``: the run is refused with ``evaluate``'s message;
    ``--kind logits`` reads them as logits (a run of its own, named in the report's command)."""
    import os

    root = tmp_path / "sets"
    folder = write_folder_set(root / "soft", 0, n=200, c=3)
    for split in ("val", "test"):
        arrays = dict(np.load(folder / f"{split}.npz"))
        z = arrays["logits"].astype(np.float64)
        arrays["logits"] = np.exp(z) / np.exp(z).sum(1, keepdims=True)
        np.savez(folder / f"{split}.npz", **arrays)
    before = {k: os.environ.get(k) for k in (PREDICTIONS_ENV, "SELFCAL_PREDICTIONS_KIND")}
    args = ["reproduce", "conformal", "--sets", root, "--store", tmp_path / "c.sqlite"]
    args += ["--workers", "1", "--out", tmp_path / "r"]
    try:
        code, text, err = run(capsys, *args)
        report = (tmp_path / "r" / "README.md").read_text()
        assert "the array 'logits' holds probabilities" in report + text + err
        code, text, err = run(capsys, *args, "--kind", "logits")
        assert code == 0, err
        assert "1 runs done" in text
        assert "--kind logits" in check_provenance(tmp_path / "r").command
    finally:
        for key, value in before.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
    code, _, err = run(capsys, "reproduce", "conformal", "--kind", "logits")
    assert code == 2 and "use it with --sets" in err


def test_the_report_names_the_sets_command_as_typed_without_a_protocol():
    """``--sets`` names the protocol that reads them: the report's command does not add
    ``--protocol sets`` (the committed ``results/posthoc-real`` names its command so), with
    ``--kind`` after the folder when given."""
    from selfcal.experiments.report import reproduce_command
    from selfcal.experiments.study import get_study
    from selfcal.studies import import_all

    import_all()
    study = get_study("posthoc")
    sets = "../shared/prediction-sets"
    command = reproduce_command(study, "sets", "r.sqlite", "results/x", sets)
    assert command == f"selfcal reproduce posthoc --sets {sets} --store r.sqlite --out results/x"
    with_kind = reproduce_command(study, "sets", None, None, sets, kind="logits")
    assert with_kind == f"selfcal reproduce posthoc --sets {sets} --kind logits"
    assert reproduce_command(study, "quick", None, None) == "selfcal reproduce posthoc --quick"


def test_the_leaderboard_says_on_stderr_that_it_does_not_use_a_sets_groups(capfd, sets, tmp_path):
    import shutil

    shutil.copytree(sets / "grouped", tmp_path / "sets" / "grouped")
    args = ["reproduce", "posthoc", "--sets", tmp_path / "sets", "--store", tmp_path / "s.sqlite"]
    code, _, err = run(capfd, *args, "--out", tmp_path / "r", "--workers", "1")
    assert code == 0, err
    notes = [line for line in err.splitlines() if line.startswith("note: grouped holds groups")]
    assert len(notes) == 1 and "selfcal compare grouped reports" in notes[0]
