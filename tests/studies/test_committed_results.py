"""The committed reports under ``results/`` were made by the code as it is: same study version,
same protocol fingerprint. Change a study's computation (bump its version) or a protocol, and
this fails until the report is regenerated with the command it names. A folder without the
study engine's ``provenance.json`` is the evidence of a script instead, and must say which
committed script wrote it, with the command that writes it there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from selfcal.experiments.report import check_provenance
from selfcal.experiments.study import get_study, study_names

RESULTS = Path(__file__).resolve().parents[2] / "results"
EVERY_FOLDER = sorted(p for p in RESULTS.iterdir() if p.is_dir()) if RESULTS.is_dir() else []
FOLDERS = [p for p in EVERY_FOLDER if (p / "provenance.json").exists()]
"""The study reports (written by the study engine, with its provenance)."""
SCRIPT_FOLDERS = [p for p in EVERY_FOLDER if p not in FOLDERS]
"""The evidence written by a script of ``scripts/`` (e.g. ``results/split-check``)."""
SCRIPT_COMMAND = re.compile(r"python (scripts/\w+\.py) .*--out results/([\w-]+)")


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_a_committed_report_matches_the_code(folder):
    made = check_provenance(folder)
    assert made.command.endswith(f"--out results/{folder.name}")
    assert (folder / "README.md").read_text().count(made.fingerprint) >= 1


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_a_committed_report_was_made_by_committed_code(folder):
    """Every run behind a committed report ran from a clean working tree (``-dirty`` marks a
    run made with uncommitted changes: its numbers belong to no commit anyone can check out)."""
    import json

    commits = json.loads((folder / "provenance.json").read_text())["git_commits"]
    assert commits and not any(c is None or c.endswith("-dirty") for c in commits), commits


@pytest.mark.parametrize("folder", SCRIPT_FOLDERS, ids=lambda p: p.name)
def test_a_folder_without_provenance_names_the_script_that_wrote_it(folder):
    match = SCRIPT_COMMAND.search((folder / "README.md").read_text(encoding="utf-8"))
    assert match, f"{folder.name}: neither provenance.json nor a scripts/ command in README.md"
    assert (RESULTS.parent / match.group(1)).exists(), match.group(1)
    assert match.group(2) == folder.name


def test_every_study_has_its_full_report_committed():
    committed = {
        check_provenance(f).study: f for f in FOLDERS if check_provenance(f).protocol == "full"
    }
    for name in study_names():
        assert name in committed, f"results/ has no full report of study {name!r}"
        assert committed[name].name == name
    assert not (RESULTS / "bsce-gra-long").exists()  # the long schedule is a regime now


def test_a_stale_folder_fails(tmp_path):
    import json
    import shutil

    source = next(f for f in FOLDERS if check_provenance(f).study == "gra-toy")
    copy = tmp_path / source.name
    shutil.copytree(source, copy)
    made = json.loads((copy / "provenance.json").read_text())
    (copy / "provenance.json").write_text(json.dumps({**made, "study_version": 1}))
    with pytest.raises(ValueError, match="stale.*study version 1"):
        check_provenance(copy)
    assert get_study("gra-toy").version != 1
