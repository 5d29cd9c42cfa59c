"""The software and hardware a run ran on, stored with every run so a number can be traced
back to the code that produced it."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

GIT_TIMEOUT_S = 10.0


def environment(repo: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Versions, machine and code revision as a JSON-able dict.

    Keys: ``python``, ``torch``, ``numpy``, ``selfcal``, ``platform``, ``cpu_count`` (CPUs
    this process may use), ``device`` (CUDA device name, ``"mps"`` or ``"cpu"``) and
    ``git_commit``: ``git rev-parse HEAD`` of ``repo`` -- by default the directory holding the
    selfcal sources, i.e. the code that actually ran -- with ``-dirty`` appended when
    a tracked file differs from the commit (``git status --porcelain --untracked-files=no``, as
    ``git describe --dirty``: outputs written into the tree do not count), ``None`` when it is
    not a git working tree or git is unavailable.
    """
    import selfcal

    torch_version, device = _torch_and_device()
    where = Path(repo) if repo is not None else Path(selfcal.__file__).resolve().parent
    return {
        "python": platform.python_version(),
        "torch": torch_version,
        "numpy": np.__version__,
        "selfcal": selfcal.__version__,
        "platform": platform.platform(),
        "cpu_count": _usable_cpus(),
        "device": device,
        "git_commit": git_commit(where),
    }


def _torch_and_device() -> tuple[str | None, str]:
    try:
        import torch
    except ImportError:  # the store and runner do not need torch themselves
        return None, "cpu"
    if torch.cuda.is_available():
        return torch.__version__, torch.cuda.get_device_name(0)
    if torch.backends.mps.is_available():
        return torch.__version__, "mps"
    return torch.__version__, "cpu"


def _usable_cpus() -> int | None:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count()


def git_commit(where: str | os.PathLike[str]) -> str | None:
    """``HEAD`` commit of the git working tree containing ``where`` (``-dirty`` suffix when
    a tracked file is modified), or ``None`` when there is none."""
    head = _git(where, "rev-parse", "HEAD")
    if head is None:
        return None
    status = _git(where, "status", "--porcelain", "--untracked-files=no")
    return head + ("-dirty" if status else "")


def _git(where: str | os.PathLike[str], *args: str) -> str | None:
    """stdout of ``git -C where args...`` stripped, or ``None`` when git fails or is absent."""
    try:
        done = subprocess.run(
            ["git", "-C", os.fspath(where), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
