"""Untrusted files opened safely, for the one array reader (:mod:`selfcal.io._files`, whose
docstring states the rules): a path is ``os.stat``-ed before it is opened and must be a regular
file (a device, FIFO, socket or folder, directly or through a symbolic link, is one line saying
what it is; a link to a regular file is followed), it is opened without blocking and checked
again on the open file, an empty file and one larger than the cap are refused, and a file is
hashed in blocks only after those checks. The cap (:func:`max_array_bytes`) is
:data:`DEFAULT_MAX_ARRAY_BYTES` unless ``$SELFCAL_MAX_ARRAY_BYTES`` says otherwise."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

MAX_BYTES_ENV = "SELFCAL_MAX_ARRAY_BYTES"
"""The environment variable that, set to a positive number of bytes, replaces
:data:`DEFAULT_MAX_ARRAY_BYTES`."""
DEFAULT_MAX_ARRAY_BYTES = 4 << 30
"""The most bytes the arrays read from one file may take as 64-bit values (4 GiB: a 50,000 x
10,000 float64 set is 4 GB), and the largest file read."""
BLOCK = 1 << 20
"""Bytes read at a time."""
SLACK = 1 << 20
"""Bytes a file may hold beyond its arrays' (npy and zip headers)."""
_FILE_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def max_array_bytes() -> int:
    """The cap: ``$SELFCAL_MAX_ARRAY_BYTES`` when set (a positive integer, else a
    ``ValueError`` naming the variable), else :data:`DEFAULT_MAX_ARRAY_BYTES`."""
    text = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_ARRAY_BYTES
    value = int(text) if text.isdigit() else 0
    if value <= 0:
        raise ValueError(
            f"${MAX_BYTES_ENV} must be a positive number of bytes (17179869184 for 16 GiB), "
            f"got {text!r}"
        )
    return value


def size_text(n: int) -> str:
    """``n`` bytes as people read them: ``812 bytes``, ``3.0 GiB``, ``36.4 TiB``."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,} bytes"


def cap_hint(cap: int) -> str:
    """``the 4.0 GiB selfcal reads ($SELFCAL_MAX_ARRAY_BYTES raises the cap)``."""
    return f"the {size_text(cap)} selfcal reads (${MAX_BYTES_ENV} raises the cap)"


# ----------------------------------------------------------------------------- regular files
def _kind_of(mode: int) -> str:
    return next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")


def check_regular(path: Path) -> os.stat_result:
    """``os.stat`` of ``path`` (links followed) when it is a regular file; else one line
    saying what it is (and where a link leads), before anything opens it."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            target = os.readlink(path)
            raise FileNotFoundError(f"{path}: links to {target}, which does not exist") from None
        raise FileNotFoundError(f"{path}: no such file") from None
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        kind = _kind_of(info.st_mode)
        via = f"links to {os.path.realpath(path)}, " if os.path.islink(path) else "is "
        raise ValueError(f"{path}: {via}{kind}, not a regular file")
    return info


@contextmanager
def open_regular(path: Path) -> Iterator[IO[bytes]]:
    """``path`` opened for reading after :func:`check_regular`, without blocking, and checked
    again on the open file (the same file, still regular); an empty file and one larger than
    the cap are refused."""
    before = check_regular(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino) or not stat.S_ISREG(
            now.st_mode
        ):
            raise ValueError(f"{path}: was replaced while it was opened; run it again")
        _check_file_size(path, now.st_size)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


def _check_file_size(path: Path, size: int) -> None:
    if size == 0:
        raise ValueError(f"{path}: the file is empty (0 bytes)")
    cap = max_array_bytes()
    if size > cap + SLACK:
        raise ValueError(f"{path}: {size_text(size)}, more than {cap_hint(cap)}")


def file_digest(*paths: Path) -> str:
    """SHA-256 (hex) of the contents of the regular files ``paths``, one after the other, each
    read in :data:`BLOCK` blocks after the checks of :func:`open_regular` (so ``/dev/zero`` or
    a FIFO is refused, never read)."""
    digest = hashlib.sha256()
    for path in paths:
        with open_regular(path) as handle:
            for block in iter(lambda: handle.read(BLOCK), b""):
                digest.update(block)
    return digest.hexdigest()
