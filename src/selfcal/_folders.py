"""Folders written whole: every report writer (``selfcal compare --out``, a study's report)
builds its folder in a scratch folder beside it and swaps it in (:func:`whole_folder`), so
that a kill at any moment leaves the old report or the new one, never a mix of the two.
``selfcal train`` writes its model folder in the same kind of scratch folder, cleaned the same
way (:func:`remove_abandoned_scratch`).

The scratch folder is ``.NAME.PID.xxxxxxxx`` beside ``NAME`` (``PID`` the writer's process).
The swap is two renames -- the old folder aside to ``<scratch>.old``, the scratch folder to
``NAME`` -- then the old one is removed. A writer killed while writing leaves its scratch
folder, and one killed between the two renames leaves no ``NAME`` and the old folder aside;
the next writer of ``NAME`` (:func:`remove_abandoned_scratch`) puts that old folder back and
removes what the dead writer left. A live writer's scratch folder is never touched, so two
writers of one folder do not undo each other: the last swap wins.

The folder replaced must hold only what its writer writes (``owns``): a folder the user keeps
other files in is refused, not removed.
"""

from __future__ import annotations

import errno
import glob
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

OLD = ".old"
"""The suffix of an old folder set aside during a swap (after its writer's scratch name)."""
SWAP_TRIES = 5
"""Swaps tried when another writer swaps the same folder at the same moment."""
REPORT_FILES = ("README.md", "provenance.json", ".figures.json")
"""What a report folder holds besides its figures (``*.png``)."""


def is_report_file(name: str) -> bool:
    """Whether a report writer writes files named ``name``: the README, the study's
    provenance and figure key, a figure, or an older version's half-written
    ``.README.md.partial``."""
    return name in REPORT_FILES or name.endswith(".png") or name.endswith(".partial")


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _writer(path: Path, folder: Path) -> int | None:
    """The process id in a scratch name ``.NAME.PID.xxxx`` beside ``folder``."""
    pid = path.name[len(folder.name) + 2 :].split(".", 1)[0]
    return int(pid) if pid.isdigit() else None


def remove_abandoned_scratch(folder: Path) -> None:
    """Clean what writers of ``folder`` killed mid-way left beside it (their process is gone):
    an old folder set aside by a swap goes back to ``folder`` when ``folder`` is missing (the
    newest, if several), and every other leftover is removed. A live writer's are kept."""
    dead = [
        path
        for path in folder.parent.glob(f".{glob.escape(folder.name)}.*.*")
        if path.is_dir() and (pid := _writer(path, folder)) is not None and not alive(pid)
    ]
    aside = sorted((p for p in dead if p.name.endswith(OLD)), key=lambda p: p.stat().st_mtime)
    if aside and not folder.exists():
        aside.pop().rename(folder)
    for path in dead:
        if path.exists():
            shutil.rmtree(path, ignore_errors=True)


def check_replaceable(folder: Path, owns: Callable[[str], bool], what: str) -> None:
    """A ``ValueError`` unless ``folder`` may be replaced by a new ``what``: it is absent, or a
    folder holding only files ``owns`` (and not the working folder or one above it)."""
    if not folder.exists():
        return
    if not folder.is_dir() or folder.is_symlink():
        kind = "a link" if folder.is_symlink() else "a file"
        raise ValueError(f"{folder}: is {kind}; a {what} is written as a folder of its own")
    if Path.cwd().resolve().is_relative_to(folder.resolve()):
        raise ValueError(f"{folder}: is the working folder; write the {what} to a folder below")
    foreign = sorted(p.name for p in folder.iterdir() if not (p.is_file() and owns(p.name)))
    if foreign:
        raise ValueError(
            f"{folder}: holds {', '.join(map(repr, foreign[:5]))}, which a {what} does not "
            f"write; the {what} replaces its folder whole, so give it a new or empty folder"
        )


@contextmanager
def whole_folder(
    folder: Path, owns: Callable[[str], bool] = is_report_file, what: str = "report"
) -> Iterator[Path]:
    """A scratch folder to write the new ``folder`` into; when the block ends, it replaces
    ``folder`` whole (module docstring). An exception in the block (``KeyboardInterrupt``
    included) removes the scratch folder and leaves ``folder`` as it was; an ``OSError`` (a
    full disk) becomes one ``ValueError`` line naming the folder. ``owns``: the files the
    folder replaced may hold (:func:`check_replaceable`)."""
    folder = Path(folder)
    check_replaceable(folder, owns, what)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        remove_abandoned_scratch(folder)
        scratch = Path(tempfile.mkdtemp(prefix=f".{folder.name}.{os.getpid()}.", dir=folder.parent))
        scratch.chmod(0o777 & ~_umask())  # a folder as mkdir makes it, not mkdtemp's 0700
    except OSError as err:
        raise ValueError(f"cannot write the {what} {folder}: {err.strerror or err}") from None
    try:
        yield scratch
        _swap(scratch, folder)
    except OSError as err:
        raise ValueError(f"cannot write the {what} {folder}: {err.strerror or err}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _swap(scratch: Path, folder: Path) -> None:
    """Put ``scratch`` in ``folder``'s place: the old folder aside, ``scratch`` renamed, the
    old one removed. When another writer's new folder takes the place in between, it is set
    aside in turn (the last swap wins); any other failure puts the old folder back."""
    aside = scratch.with_name(scratch.name + OLD)
    for _ in range(SWAP_TRIES):
        with suppress(FileNotFoundError):
            folder.rename(aside)
        try:
            scratch.rename(folder)
        except OSError as err:
            if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                if aside.exists() and not folder.exists():
                    aside.rename(folder)
                raise
            shutil.rmtree(aside, ignore_errors=True)
            continue
        shutil.rmtree(aside, ignore_errors=True)
        return
    raise OSError(f"{SWAP_TRIES} other writers replaced it at the same moment; run again")


def _umask() -> int:
    """The process's file mode creation mask (read by setting it, then set back)."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask
