"""Reports are written whole (:mod:`selfcal._folders`): a kill or an interrupt while a report is
written over an old one leaves the old report or the new one, never old figures beside new
ones (the audit: 6 of 8 kills of ``selfcal compare --out DIR`` left the old README beside a mix
of figures); what a killed writer leaves is cleaned by the next."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from selfcal._folders import remove_abandoned_scratch, whole_folder


def contents(folder: Path) -> dict[str, str]:
    """Every file of ``folder`` and its digest."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def leftovers(folder: Path) -> list[str]:
    """The scratch folders beside ``folder``."""
    return sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}."))


def write_report(folder: Path, version: str, figures: int = 3) -> None:
    """A report of ``figures`` figures and a README, all saying ``version``."""
    with whole_folder(folder) as scratch:
        for i in range(figures):
            (scratch / f"f{i}.png").write_text(f"{version} figure {i}")
        (scratch / "README.md").write_text(f"{version} report")


def dead_pid() -> int:
    """The id of a process that has ended."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_an_interrupt_after_the_first_figure_leaves_the_old_report(tmp_path, monkeypatch):
    out = tmp_path / "report"
    write_report(out, "old")
    old = contents(out)
    real = Path.write_text

    def interrupted(self, text, *args, **kwargs):
        real(self, text, *args, **kwargs)
        if self.name == "f0.png":
            raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_report(out, "new")
    monkeypatch.undo()
    assert contents(out) == old and leftovers(out) == []
    write_report(out, "new")
    assert (out / "README.md").read_text() == "new report" and leftovers(out) == []
    assert {p.read_text().split()[0] for p in out.glob("*.png")} == {"new"}


def test_a_full_disk_leaves_the_old_report_and_says_which_in_one_line(tmp_path, monkeypatch):
    out = tmp_path / "report"
    write_report(out, "old")
    old = contents(out)
    real = Path.write_text

    def full_disk(self, text, *args, **kwargs):
        real(self, text[:3], *args, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full_disk)
    with pytest.raises(ValueError, match=f"cannot write the report {out}: No space left on device"):
        write_report(out, "new")
    monkeypatch.undo()
    assert contents(out) == old and leftovers(out) == []


def _write_slowly(out: str, flag: str, between_renames: bool) -> None:
    """Child: write a new report over ``out``; touch ``flag`` and sleep where it is to be
    killed -- after its first figure, or between the swap's two renames."""
    real = Path.rename

    def rename(self, target):
        result = real(self, target)
        if between_renames and str(target).endswith(".old"):
            Path(flag).touch()
            time.sleep(60)
        return result

    Path.rename = rename  # type: ignore[method-assign]
    with whole_folder(Path(out)) as scratch:
        (scratch / "f0.png").write_text("new figure 0")
        if not between_renames:
            Path(flag).touch()
            time.sleep(60)
        (scratch / "README.md").write_text("new report")
    os._exit(0)


@pytest.mark.parametrize("between_renames", [False, True], ids=["mid-write", "mid-swap"])
def test_a_sigkill_leaves_the_old_report_and_the_next_writer_cleans_up(tmp_path, between_renames):
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("needs fork")
    out, flag = tmp_path / "report", tmp_path / "flag"
    write_report(out, "old")
    old = contents(out)
    child = multiprocessing.get_context("fork").Process(
        target=_write_slowly, args=(str(out), str(flag), between_renames)
    )
    child.start()
    deadline = time.monotonic() + 30
    while not flag.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert flag.exists(), "the writer never reached the kill point"
    os.kill(child.pid, signal.SIGKILL)
    child.join()
    assert leftovers(out)  # what the killed writer left
    if between_renames:
        assert not out.exists()  # the old report is set aside, whole
    else:
        assert contents(out) == old
    remove_abandoned_scratch(out)  # what the next writer does first
    assert contents(out) == old and leftovers(out) == []


def test_a_live_writers_scratch_folder_is_kept_and_a_dead_ones_removed(tmp_path):
    out = tmp_path / "report"
    write_report(out, "old")
    live = tmp_path / f".report.{os.getpid()}.abcd1234"
    dead = tmp_path / f".report.{dead_pid()}.abcd1234"
    for scratch in (live, dead):
        scratch.mkdir()
        (scratch / "f0.png").write_text("half written")
    write_report(out, "new")
    assert live.is_dir() and not dead.exists()
    assert (out / "README.md").read_text() == "new report"


def test_a_folder_holding_other_files_is_refused_and_left_as_it_is(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("the user's own")
    (out / "README.md").write_text("the user's README")
    with pytest.raises(ValueError, match=r"mine: holds 'notes.txt', which a report does not write"):
        write_report(out, "new")
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "notes.txt"]
    assert leftovers(out) == []


def test_the_working_folder_is_never_replaced(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "README.md").write_text("an old report")
    with pytest.raises(ValueError, match="is the working folder"):
        write_report(Path("."), "new")
    assert (tmp_path / "README.md").read_text() == "an old report"
