"""The README keeps its promises: it is short, names no commit, its set-up commands are the ones
CI runs, every link resolves, and every command and snippet it shows runs as written (on the
bundled digits logits standing in for the user's ``val.npz`` / ``test.npz``)."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest

from selfcal.cli import main
from selfcal.examples import example_path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
LINK = re.compile(r"\]\(([^)#]+)(?:#[^)]*)?\)")
MAX_LINES = 200


def blocks(language: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(README) if lang == language]


def test_the_readme_is_short_and_names_no_commit():
    assert len(README.splitlines()) <= MAX_LINES
    assert not re.findall(r"\b[0-9a-f]{7}\b", README)


def test_the_first_code_block_calibrates_the_users_logits():
    language, body = BLOCK.findall(README)[0]
    assert language == "python" and "np.load(" in body and ".fit(logits=" in body


def test_the_test_command_is_what_ci_runs():
    """``.ci/run`` runs exactly the README's test command (the set-up's second command)."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    setup = [b.strip() for b in blocks("bash") if b.startswith("python3 -m venv")]
    assert len(setup) == 2, "the README's set-up is two commands"
    install, tests = setup
    assert tests in ci.splitlines()
    assert install.endswith(".venv/bin/selfcal reproduce bo4sc")
    assert ".venv/bin/python scripts/check_wheel.py && " in tests  # the wheel, outside the clone


def test_contributing_sets_up_with_the_readmes_two_commands():
    contributing = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    setup = [b.strip() for b in blocks("bash") if b.startswith("python3 -m venv")]
    assert f"```bash\n{setup[0]}\n{setup[1]}\n```" in contributing


def test_every_relative_link_resolves():
    missing = [
        target
        for target in LINK.findall(README)
        if not target.startswith("http") and not (ROOT / target).exists()
    ]
    assert not missing, missing


@pytest.fixture
def users_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scratch folder with ``val.npz`` / ``test.npz`` (the bundled digits logits) and a
    ``sets/`` folder holding the same pair, as a user's would."""
    monkeypatch.chdir(tmp_path)
    for split in ("val", "test"):
        shutil.copy(example_path(f"digits_{split}"), tmp_path / f"{split}.npz")
    (tmp_path / "sets").mkdir()
    for split in ("val", "test"):
        shutil.copy(tmp_path / f"{split}.npz", tmp_path / "sets" / f"{split}.npz")
    return tmp_path


def test_the_python_snippets_run(users_files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snippets = blocks("python")
    assert len(snippets) >= 2
    for index, code in enumerate(snippets):
        exec(compile(code, f"README.md[python block {index}]", "exec"), {"__name__": "readme"})
    printed = capsys.readouterr().out.splitlines()
    before, after = float(printed[0]), float(printed[1])
    assert after < before  # the quickstart's calibration lowers the test ECE it prints
    test = np.load(users_files / "test.npz")
    assert np.isfinite(test["logits"]).all()


def commands() -> list[list[str]]:
    """Every ``selfcal`` command of the README's command blocks but the set-up's (comments
    dropped), in order."""
    lines = [
        line.split("  #")[0].strip()
        for body in blocks("bash")
        if not body.startswith("python3 -m venv")
        for line in body.splitlines()
    ]
    return [shlex.split(line)[1:] for line in lines if line.startswith("selfcal ")]


def test_the_commands_run(users_files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shown = commands()
    assert [c[0] for c in shown] == [
        "evaluate", "calibrate", "compare", "dataset", "train", "predict",
    ]  # fmt: skip
    for args in shown:
        code = main(args)
        err = capsys.readouterr().err
        assert code == 0, (args, err)
    assert (users_files / "calibrated.npz").exists() and (users_files / "preds.csv").exists()
