"""environment(): versions, machine and the git revision (compared with git run here)."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

import selfcal
from selfcal.experiments import environment

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


def git(where: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(where), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_versions_and_machine() -> None:
    env = environment()
    assert env["python"] == platform.python_version()
    assert env["torch"] == torch.__version__ and env["numpy"] == np.__version__
    assert env["selfcal"] == selfcal.__version__
    assert env["platform"] == platform.platform()
    assert env["cpu_count"] == len(os.sched_getaffinity(0))
    expected_device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    assert env["device"] == expected_device
    assert json.loads(json.dumps(env)) == env  # JSON-able as stored


@needs_git
def test_git_commit_of_the_selfcal_sources() -> None:
    source = Path(selfcal.__file__).resolve().parent
    try:
        head = git(source, "rev-parse", "HEAD")
    except subprocess.CalledProcessError:
        assert environment()["git_commit"] is None
        return
    dirty = git(source, "status", "--porcelain", "--untracked-files=no") != ""
    assert environment()["git_commit"] == head + ("-dirty" if dirty else "")


@needs_git
def test_git_commit_clean_dirty_and_absent(tmp_path: Path) -> None:
    assert environment(tmp_path)["git_commit"] is None  # not a repository
    assert environment(tmp_path / "missing")["git_commit"] is None
    git(tmp_path, "init", "-q")
    assert environment(tmp_path)["git_commit"] is None  # a repository without commits
    (tmp_path / "a.txt").write_text("a")
    git(tmp_path, "add", "a.txt")
    git(tmp_path, "commit", "-q", "-m", "first")
    head = git(tmp_path, "rev-parse", "HEAD")
    assert len(head) == 40 and environment(tmp_path)["git_commit"] == head
    (tmp_path / "b.txt").write_text("untracked")
    assert environment(tmp_path)["git_commit"] == head  # outputs in the tree do not count
    (tmp_path / "a.txt").write_text("changed")
    assert environment(tmp_path)["git_commit"] == head + "-dirty"
