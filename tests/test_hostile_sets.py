"""The hostile-folder battery of the reliability audit (``reliability-5``: items 1, 2, 4, 7 and
the one-class set), as a test of the one reader of untrusted prediction files.

Each case is a small file that *declares* something dangerous -- a huge array (an npy header
written by hand, no data), a zip member whose size lies, an object array, two members of one
name -- or a path that is no regular file (a link to ``/dev/zero``, a FIFO, a link to a FIFO, a
socket), or a set the layout forbids (one column of scores, two sets of one name). Each must be
refused in one line naming the file, through :func:`selfcal.io.load_prediction_set`, ``selfcal
compare`` and ``selfcal reproduce posthoc --sets``, **before any of its data is read**: the
reader's data step is watched (:func:`watched`: no array over 1 MiB is read in this module)
and an alarm fails any test that blocks (:func:`no_hang`). Links to regular files are followed
and the set says where they led.
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import warnings
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers.cli import run
from helpers.sets import write_file_set, write_folder_set

import selfcal.io._files as files
from selfcal.io import (
    MAX_BYTES_ENV,
    PREDICTIONS_ENV,
    find_prediction_sets,
    load_prediction_set,
    load_predictions,
    read_npy,
)

WATCHED_BYTES = 1 << 20
"""The largest array any test here lets the reader read (a refusal comes before the data)."""


@pytest.fixture(autouse=True)
def no_hang() -> Iterator[None]:
    """Fail a test that blocks (an open of a FIFO, a read of ``/dev/zero``) after 60 s."""

    def stop(signum: int, frame: object) -> None:
        raise TimeoutError("blocked: a hostile file was opened or read")

    before = signal.signal(signal.SIGALRM, stop)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, before)


@pytest.fixture(autouse=True)
def watched(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader's data step refuses any array over :data:`WATCHED_BYTES`: every refusal
    here must come from the headers, never after allocating what they declare."""
    read_data = files.read_data

    def guarded(stream, header, what):
        assert header.counted <= WATCHED_BYTES, f"{what}: read {header.counted:,} bytes"
        return read_data(stream, header, what)

    monkeypatch.setattr(files, "read_data", guarded)


def npy_header(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    """An npy 1.0 header declaring ``shape`` of ``descr`` (no data)."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buffer, {"descr": descr, "fortran_order": False, "shape": shape}
    )
    return buffer.getvalue()


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array)
    return buffer.getvalue()


def forged(path: Path, *members: tuple[str, bytes]) -> None:
    """A deflated zip of ``members`` (duplicates kept), written at ``path``."""
    path.unlink(missing_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zipfile's "Duplicate name"
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, data in members:
                archive.writestr(name, data)


LABELS = ("labels.npy", npy_bytes(np.arange(100) % 3))


def _replace(val: Path, make: Callable[[Path], None]) -> None:
    val.unlink()
    make(val)


def _socket(val: Path) -> None:
    here = Path.cwd()
    os.chdir(val.parent)  # a socket path is limited to 108 bytes: bind it relatively
    try:
        server = socket.socket(socket.AF_UNIX)
        server.bind(val.name)
        server.close()
    finally:
        os.chdir(here)


def _fifo_elsewhere(val: Path) -> None:
    os.mkfifo(val.parent.parent / "pipe")
    val.symlink_to(val.parent.parent / "pipe")


def _flipped(val: Path) -> None:
    """A valid stored archive with one byte of the scores' data changed."""
    np.savez(val, logits=np.zeros((100, 3)), labels=np.arange(100) % 3)
    data = bytearray(val.read_bytes())
    data[data.index(b"\x93NUMPY") + 200] ^= 0xFF
    val.write_bytes(bytes(data))


def _many(val: Path) -> None:
    forged(val, *[(f"a{i}.npy", b"") for i in range(1100)])


CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "dev-zero": (lambda v: v.symlink_to("/dev/zero"), "links to /dev/zero, a character device"),
    "fifo": (os.mkfifo, "is a FIFO, not a regular file"),
    "link-to-fifo": (_fifo_elsewhere, "pipe, a FIFO, not a regular file"),
    "socket": (_socket, "is a socket, not a regular file"),
    "dangling-link": (lambda v: v.symlink_to(v.parent / "gone"), "which does not exist"),
    "declared-1e12x5": (
        lambda v: forged(v, ("logits.npy", npy_header((10**12, 5))), LABELS),
        "'logits' declares shape (1000000000000, 5) of float64: 36.4 TiB",
    ),
    "declared-4e8x2": (
        lambda v: forged(v, ("logits.npy", npy_header((4 * 10**8, 2))), LABELS),
        "declares shape (400000000, 2) of float64: 6.0 GiB as 64-bit values, more than the 4.0",
    ),
    "member-shorter-than-declared": (
        lambda v: forged(v, ("logits.npy", npy_header((100, 3)) + bytes(64)), LABELS),
        "(2,400 bytes) but its member holds 64; the archive is damaged or forged",
    ),
    "member-inflates-past-declared": (
        lambda v: forged(v, ("logits.npy", npy_header((2, 3)) + bytes(8 << 20)), LABELS),
        "(48 bytes) but its member holds 8,388,608",
    ),
    "object-array": (
        lambda v: forged(v, ("logits.npy", npy_header((3,), "|O") + bytes(24)), LABELS),
        "the array 'logits' holds non-numeric (object) values",
    ),
    "two-members-one-name": (
        lambda v: forged(v, ("logits.npy", npy_bytes(np.zeros((100, 3)))), LABELS, LABELS),
        "holds two members named 'labels.npy'",
    ),
    "many-members": (_many, "a .npz selfcal reads holds at most 1,024"),
    "damaged-data": (_flipped, "the array 'logits' cannot be read (Bad CRC-32"),
    "rows-disagree": (
        lambda v: forged(v, ("logits.npy", npy_bytes(np.zeros((200_000, 2)))), LABELS),
        "'labels' must hold one label per row (200000), got shape (100,)",
    ),
    "one-class": (
        lambda v: np.savez(v, logits=np.zeros((100, 1)), labels=np.zeros(100, np.int64)),
        "a prediction set needs one column per class",
    ),
    "three-dimensions": (
        lambda v: np.savez(v, logits=np.zeros((100, 3, 1)), labels=np.arange(100) % 3),
        "has shape (100, 3, 1); selfcal reads arrays of at most 2 dimensions",
    ),
    "complex": (
        lambda v: np.savez(v, logits=np.zeros((100, 3), complex), labels=np.arange(100) % 3),
        "has dtype complex128; selfcal reads booleans, integers, float16/32/64",
    ),
    "not-a-zip": (lambda v: v.write_text("hello"), "not a valid .npz archive (not a zip file)"),
}


def hostile_set(folder: Path, case: str) -> Path:
    """A good 3-class set at ``folder`` whose ``val.npz`` is replaced by ``case``."""
    write_folder_set(folder, 0, n=100, c=3)
    _replace(folder / "val.npz", CASES[case][0])
    return folder


@pytest.mark.parametrize("case", CASES)
def test_each_hostile_split_is_one_line_naming_the_file(tmp_path, case):
    folder = hostile_set(tmp_path / "sets" / "s", case)
    with pytest.raises((ValueError, FileNotFoundError)) as caught:
        load_prediction_set(folder)
    message = str(caught.value)
    assert message.startswith(f"{folder / 'val.npz'}: ") and "\n" not in message
    assert CASES[case][1] in message


@pytest.mark.parametrize("case", ["dev-zero", "fifo"])
def test_a_device_or_fifo_is_never_called_empty(tmp_path, case):
    """``st_size`` is 0 for both; "the file is empty" is said of empty regular files only."""
    folder = hostile_set(tmp_path / "s", case)
    with pytest.raises(ValueError, match="not a regular file") as caught:
        load_prediction_set(folder)
    assert "empty" not in str(caught.value)
    (folder / "val.npz").unlink()
    (folder / "val.npz").write_bytes(b"")
    with pytest.raises(ValueError, match="val.npz: the file is empty"):
        load_prediction_set(folder)


def test_a_one_file_set_linked_to_a_device_is_found_and_refused_by_name(tmp_path):
    (tmp_path / "z.npz").symlink_to("/dev/zero")
    assert find_prediction_sets(tmp_path) == [tmp_path / "z.npz"]
    with pytest.raises(ValueError, match="z.npz: links to /dev/zero, a character device"):
        load_prediction_set(tmp_path / "z.npz")


def test_two_sets_of_one_name_are_refused_naming_both(tmp_path):
    write_folder_set(tmp_path / "one" / "a", 0, n=50, c=3)
    write_file_set(tmp_path / "one" / "a.npz", 1, n=50)
    with pytest.raises(ValueError) as caught:
        find_prediction_sets(tmp_path / "one")
    message = str(caught.value)
    assert "another prediction set is named 'a'" in message and "\n" not in message
    assert str(tmp_path / "one" / "a.npz") in message and str(tmp_path / "one" / "a") in message
    write_folder_set(tmp_path / "two" / "a", 2, n=50, c=3)
    write_folder_set(tmp_path / "three" / "a", 3, n=50, c=3)
    with pytest.raises(ValueError, match="another prediction set is named 'a'"):
        find_prediction_sets(tmp_path / "two", tmp_path / "three")
    twice = find_prediction_sets(tmp_path / "two", tmp_path / "two" / "a")
    assert twice == [tmp_path / "two" / "a"]  # one set named twice is one set


def test_links_to_regular_files_are_followed_and_the_set_says_where_they_led(tmp_path):
    outside = write_folder_set(tmp_path / "outside" / "secret", 0, n=60, c=3)
    single = write_file_set(tmp_path / "outside" / "one.npz", 1, n=60)
    root = tmp_path / "sets"
    root.mkdir()
    (root / "linked").symlink_to(outside)
    (root / "single.npz").symlink_to(single)
    split = write_folder_set(root / "split", 2, n=60, c=3)
    (split / "val.npz").unlink()
    (split / "val.npz").symlink_to(outside / "val.npz")
    plain = write_folder_set(root / "plain", 3, n=60, c=3)
    read = {p.name: load_prediction_set(p) for p in find_prediction_sets(root)}
    assert read["linked"].resolved == (
        (root / "linked" / "val.npz", outside / "val.npz"),
        (root / "linked" / "test.npz", outside / "test.npz"),
    )
    assert read["single.npz"].read_from() == f"read from {single}"
    assert read["split"].read_from() == f"read from {outside / 'val.npz'}"
    assert read["plain"].resolved == () and read["plain"].read_from() == ""
    assert load_prediction_set(plain).val.shape == (60, 3)


@pytest.mark.parametrize("study", ["posthoc", "conformal"])
def test_the_study_reports_say_where_linked_sets_were_read_from(
    capsys, tmp_path, monkeypatch, study
):
    monkeypatch.setenv(PREDICTIONS_ENV, str(tmp_path))  # restored after the --sets run
    outside = write_folder_set(tmp_path / "outside" / "secret", 0, n=120, c=3)
    root = tmp_path / "sets"
    write_folder_set(root / "plain", 1, n=120, c=3)
    (root / "linked").symlink_to(outside)
    out = tmp_path / "report"
    args = ["reproduce", study, "--sets", root, "--store", tmp_path / "s.sqlite", "--out", out]
    code, _, err = run(capsys, *args, "--workers", "1")
    assert code == 0, err
    lines = (out / "README.md").read_text().splitlines()
    section = lines[lines.index("## Sets read through links") :]
    assert section[2] == f"- linked: read from {outside / 'val.npz'}, {outside / 'test.npz'}"
    assert not any("plain" in line for line in section)


def test_the_cap_is_stated_and_overridable(tmp_path, monkeypatch):
    folder = write_folder_set(tmp_path / "s", 0, n=100, c=3)
    monkeypatch.setenv(MAX_BYTES_ENV, "1000")
    with pytest.raises(ValueError) as caught:
        load_prediction_set(folder)
    assert str(caught.value).startswith(f"{folder / 'val.npz'}: ")
    assert f"more than the 1,000 bytes selfcal reads (${MAX_BYTES_ENV} raises the cap)" in str(
        caught.value
    )
    monkeypatch.setenv(MAX_BYTES_ENV, "3000")  # each array fits (2,400 and 800 bytes), not both
    with pytest.raises(ValueError, match="the arrays logits, labels take 3.1 KiB together"):
        load_prediction_set(folder)
    monkeypatch.setenv(MAX_BYTES_ENV, "4GB")
    with pytest.raises(ValueError, match=f"\\${MAX_BYTES_ENV} must be a positive number"):
        load_prediction_set(folder)
    monkeypatch.setenv(MAX_BYTES_ENV, str(1 << 20))
    assert load_prediction_set(folder).n_classes == 3


def test_npy_files_and_plain_predictions_go_through_the_same_reader(tmp_path):
    (tmp_path / "huge.logits.npy").write_bytes(npy_header((10**9, 10)) + bytes(64))
    with pytest.raises(
        ValueError, match="huge.logits.npy: the file declares shape \\(1000000000, 10\\)"
    ):
        read_npy(tmp_path / "huge.logits.npy")
    np.save(tmp_path / "short.logits.npy", np.zeros((50, 3)))
    data = (tmp_path / "short.logits.npy").read_bytes()
    (tmp_path / "short.logits.npy").write_bytes(data[:-8])
    with pytest.raises(ValueError, match="declares 1,200 bytes of data, the file holds 1,192"):
        read_npy(tmp_path / "short.logits.npy")
    os.mkfifo(tmp_path / "pipe.npz")
    with pytest.raises(ValueError, match="pipe.npz: is a FIFO, not a regular file"):
        load_predictions(tmp_path / "pipe.npz")
    # a plain predictions file keeps the binary convention: one column is the positive class
    np.savez(tmp_path / "binary.npz", probs=np.full((10, 1), 0.7), labels=np.arange(10) % 2)
    assert load_predictions(tmp_path / "binary.npz").n_classes == 2


# ----------------------------------------------------------------------------- commands
def test_compare_refuses_each_hostile_set_by_its_file_and_judges_the_rest(capsys, tmp_path):
    root = tmp_path / "sets"
    for case in CASES:
        hostile_set(root / case, case)
    write_folder_set(root / "zz-good", 5, n=100, c=3)
    code, text, err = run(capsys, "compare", root, "--methods", "ts", "--out", tmp_path / "o")
    assert code == 2
    lines = err.strip().splitlines()
    for case, (_, fragment) in CASES.items():
        said = [line for line in lines if str(root / case / "val.npz") in line]
        assert len(said) == 1 and fragment in said[0], (case, said)
    assert "zz-good: 100 validation / 100 test rows, 3 classes" in text


def test_compare_refuses_two_sets_of_one_name(capsys, tmp_path):
    write_folder_set(tmp_path / "a", 0, n=50, c=3)
    write_file_set(tmp_path / "a.npz", 1, n=50)
    code, _, err = run(capsys, "compare", tmp_path, "--out", tmp_path / "o")
    assert code == 2 and "another prediction set is named 'a'" in err


@pytest.mark.parametrize(
    "case", ["dev-zero", "fifo", "declared-1e12x5", "member-inflates-past-declared", "one-class"]
)
def test_the_posthoc_study_refuses_a_hostile_set_in_one_line_and_runs_the_others(
    capsys, tmp_path, monkeypatch, case
):
    """As ``compare``: the reader's one line naming the file on stderr, the set beside it run,
    exit 2 -- and nothing blocks or is read past the headers."""
    monkeypatch.setenv(PREDICTIONS_ENV, str(tmp_path))  # restored after the --sets run
    root = tmp_path / "sets"
    hostile_set(root / "s", case)
    write_folder_set(root / "good", 1, n=100, c=3)
    args = ["reproduce", "posthoc", "--sets", root, "--store", tmp_path / "s.sqlite"]
    code, text, err = run(capsys, *args, "--out", tmp_path / "report", "--workers", "1", "--json")
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1, (code, err[-800:])
    assert errors[0].startswith(f"error: {root / 's' / 'val.npz'}: ")
    assert CASES[case][1] in errors[0]
    assert json.loads(text)["3 classes"]["ts"]["sets"] == 1  # the good set, run


def test_the_posthoc_study_refuses_two_sets_of_one_name(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv(PREDICTIONS_ENV, str(tmp_path))
    write_folder_set(tmp_path / "sets" / "a", 0, n=50, c=3)
    write_file_set(tmp_path / "sets" / "a.npz", 1, n=50)
    args = ["reproduce", "posthoc", "--sets", tmp_path / "sets", "--store", tmp_path / "s"]
    code, text, err = run(capsys, *args, "--out", tmp_path / "o", "--workers", "1")
    assert code == 2 and "another prediction set is named 'a'" in err
    assert "changed since the sweep began" not in text + err


def test_the_compare_report_says_where_linked_files_were_read_from_on_one_line(tmp_path):
    from selfcal.cli._compare_report import markdown
    from selfcal.posthoc.compare import comparison

    outside = write_folder_set(tmp_path / "out\n# injected" / "m", 0, n=60, c=3)
    (tmp_path / "sets").mkdir()
    (tmp_path / "sets" / "m").symlink_to(outside)
    data = load_prediction_set(tmp_path / "sets" / "m")
    lines = markdown(comparison(data, ["ts"]), None, data.read_from())
    escaped = str(outside).replace("\n", "\\\\n")  # escaped on one line, then as Markdown
    assert lines[:3] == ["## m", "", f"Files read from {escaped}/val.npz, {escaped}/test.npz."]
    assert "# injected" not in "\n".join(lines).replace("\\n# injected", "")


def test_the_zip_directory_is_bounded_by_its_end_records_zip64_included(tmp_path):
    """The member count is read from the end records ``zipfile`` reads -- the zip64 record
    where one precedes the classic record -- before ``zipfile`` builds an object per member:
    a classic record claiming 5 members in front of a zip64 record declaring 1,100 is refused
    by the latter, before parsing."""
    import struct

    path = tmp_path / "s.npz"
    forged(path, *[(f"a{i}.npy", b"") for i in range(1100)])
    data = path.read_bytes()
    end = data.rindex(b"PK\x05\x06")
    fields = list(struct.unpack_from("<4s4H2LH", data, end))
    size, offset = fields[5], fields[6]
    wide = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, 1100, 1100, size, offset)
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, end, 1)
    fields[3] = fields[4] = 5
    path.write_bytes(data[:end] + wide + locator + struct.pack("<4s4H2LH", *fields))
    assert len(zipfile.ZipFile(path).infolist()) == 1100  # what zipfile itself would build
    with pytest.raises(ValueError, match="its zip directory declares 1,100 members"):
        files.read_npz(path)
