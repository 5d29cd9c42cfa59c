"""The one reader of untrusted array files. Every ``.npz`` and ``.npy`` selfcal reads -- the
predictions of ``selfcal evaluate`` / ``calibrate``, the prediction sets of ``selfcal compare``
and of the ``--sets`` studies, a feature table of ``selfcal train``, a model folder's
``validation.npz`` and ``conformal.npz`` -- is opened here (:func:`open_npz`, :func:`read_npz`,
:func:`read_npy`; files are opened and hashed by :mod:`selfcal.io._regular`), every byte taken
as written by someone selfcal does not trust:

* **Regular files only.** The path is ``os.stat``-ed before it is opened (opening a FIFO
  blocks; ``/dev/zero`` never ends), then opened without blocking and checked again on the open
  file, so a device, FIFO, socket or folder -- named directly or through a symbolic link -- is
  one line saying what it is. A link to a regular file is followed (users gather their sets by
  linking them into one folder); the prediction-set reader reports where it led.
* **Declared sizes bounded before any data is read.** A file is refused when it is larger
  than the cap, or, for a zip, when its directory holds more than :data:`MAX_MEMBERS` members
  (read from the end records before ``zipfile`` parses it) or they declare more than the cap
  uncompressed. Each array's npy header is read first and refused when its dtype is not one of
  :data:`ACCEPTED` (object arrays: nothing is unpickled), it has more than :data:`MAX_DIMS`
  dimensions, or its values take more than the cap held as 64-bit numbers (at least 8 bytes a
  value, as selfcal computes in float64 / int64), the arrays read from one file together too.
  The cap is :data:`DEFAULT_MAX_ARRAY_BYTES` unless ``$SELFCAL_MAX_ARRAY_BYTES`` says otherwise.
* **Declared sizes are the sizes.** A zip member must hold exactly its header plus
  ``shape x itemsize`` bytes (``file_size``), and ``zipfile`` stops inflating there and checks
  the CRC, so a bomb declaring a small array that inflates huge, or the reverse, is refused; a
  ``.npy`` file must be exactly as long as its header says.
* **Data in bounded blocks**: an array is allocated at its checked size and filled in 1 MiB
  blocks; :func:`~selfcal.io._regular.file_digest` hashes in blocks too, after the
  regular-file check.

Every failure is one ``ValueError`` (``FileNotFoundError`` for a missing file) starting with
the file and, in an ``.npz``, naming the array.
"""

from __future__ import annotations

import math
import os
import struct
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from selfcal.io._regular import BLOCK, SLACK, cap_hint, max_array_bytes, open_regular, size_text

MAX_MEMBERS = 1024
"""The most members an ``.npz`` may hold (selfcal's files hold at most six)."""
MAX_DIMS = 2
"""The most dimensions of an array read (scores ``(N, C)``, labels ``(N,)``)."""
ACCEPTED = "booleans, integers, float16/32/64 and fixed-width strings"
"""The dtypes read, as messages say them."""
_NPY_MAGIC = b"\x93NUMPY"
_DAMAGED: tuple[type[Exception], ...] = (
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    OSError,
    RuntimeError,
    NotImplementedError,
)
"""What ``zipfile`` raises on a member it cannot open or inflate."""
try:
    import lzma

    _DAMAGED += (lzma.LZMAError,)
except ImportError:  # pragma: no cover - a Python built without lzma reads no lzma member
    pass
_END = struct.Struct("<4s4H2LH")
_END64_LOCATOR = struct.Struct("<4sLQL")
_END64 = struct.Struct("<4sQ2H2L4Q")


# ----------------------------------------------------------------------------- npy headers
@dataclass(frozen=True)
class ArrayHeader:
    """An array's npy header: ``shape``, ``dtype``, ``fortran_order`` and ``offset``, the
    bytes before its data."""

    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool
    offset: int

    @property
    def count(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of data stored."""
        return self.count * self.dtype.itemsize

    @property
    def counted(self) -> int:
        """Bytes held as 64-bit values (at least 8 a value): what the cap bounds."""
        return self.count * max(self.dtype.itemsize, 8)


def _accepted(dtype: np.dtype) -> bool:
    """One of :data:`ACCEPTED`: what selfcal computes with (no complex, no float128, which
    torch does not take), and strings for labels, groups and feature names (not empty ones,
    whose size says nothing of their count)."""
    if dtype.kind == "f":
        return dtype.itemsize <= 8
    return dtype.kind in "biu" or (dtype.kind in "US" and dtype.itemsize > 0)


def read_header(stream: IO[bytes], what: str) -> ArrayHeader:
    """The npy header at ``stream``'s position, checked (module docstring); ``what``: the
    file, or the file and the array, as messages name it."""
    from numpy.lib import format as npy

    try:
        version = npy.read_magic(stream)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f"npy format version {version[0]}.{version[1]}, not 1.0 or 2.0")
        read = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
        shape, fortran_order, dtype = read(stream)
    except (ValueError, SyntaxError, TypeError, EOFError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"{what} is not a NumPy array ({first})") from None
    header = ArrayHeader(tuple(shape), dtype, bool(fortran_order), stream.tell())
    check_header(header, what)
    return header


def check_header(header: ArrayHeader, what: str) -> None:
    """Refuse a header whose dtype, dimensions or size selfcal does not read."""
    if header.dtype.hasobject:
        raise ValueError(
            f"{what} holds non-numeric (object) values, which selfcal does not load "
            "(nothing is unpickled)"
        )
    if not _accepted(header.dtype):
        raise ValueError(f"{what} has dtype {header.dtype}; selfcal reads {ACCEPTED}")
    if len(header.shape) > MAX_DIMS or any(n < 0 for n in header.shape):
        raise ValueError(
            f"{what} has shape {header.shape}; selfcal reads arrays of at most {MAX_DIMS} "
            "dimensions"
        )
    cap = max_array_bytes()
    if header.counted > cap:
        raise ValueError(
            f"{what} declares shape {header.shape} of {header.dtype}: "
            f"{size_text(header.counted)} as 64-bit values, more than {cap_hint(cap)}"
        )


def read_data(stream: IO[bytes], header: ArrayHeader, what: str) -> np.ndarray:
    """The array ``header`` declares, read from ``stream`` (just past the header) in
    :data:`BLOCK` blocks into an array of that size, in native byte order."""
    array = np.empty(header.count, dtype=header.dtype)
    view = array.view(np.uint8).data
    done = 0
    while done < len(view):
        got = stream.readinto(view[done : done + BLOCK])  # type: ignore[attr-defined]
        if not got:
            raise ValueError(f"{what} ends after {done:,} of its {len(view):,} bytes of data")
        done += got
    if not header.dtype.isnative:
        array = array.byteswap(inplace=True).view(header.dtype.newbyteorder("="))
    if header.fortran_order:
        return array.reshape(header.shape[::-1]).transpose()
    return array.reshape(header.shape)


def read_npy(path: str | Path) -> np.ndarray:
    """The array in the ``.npy`` file ``path`` (module docstring)."""
    path = Path(path)
    with open_regular(path) as handle:
        if handle.read(len(_NPY_MAGIC)) != _NPY_MAGIC:
            raise ValueError(f"{path}: not a valid .npy file (no NumPy header)")
        handle.seek(0)
        header = read_header(handle, f"{path}: the file")
        size = os.fstat(handle.fileno()).st_size
        if size != header.offset + header.nbytes:
            raise ValueError(
                f"{path}: its header declares {header.nbytes:,} bytes of data, the file holds "
                f"{size - header.offset:,}; it is truncated or damaged"
            )
        return read_data(handle, header, f"{path}: the file")


# ----------------------------------------------------------------------------- npz archives
class NpzArchive:
    """An open ``.npz`` whose directory passed the checks: :attr:`names` of its arrays,
    each array's checked :meth:`header`, and :meth:`read` of some of them."""

    def __init__(self, path: Path, archive: zipfile.ZipFile) -> None:
        self.path = path
        self._zip = archive
        self._members = {
            info.filename.removesuffix(".npy"): info
            for info in archive.infolist()
            if info.filename.endswith(".npy")
        }

    @property
    def names(self) -> list[str]:
        """The arrays, in the archive's order (members not ending ``.npy`` are no arrays)."""
        return list(self._members)

    def _what(self, name: str) -> str:
        return f"{self.path}: the array {name!r}"

    def header(self, name: str) -> ArrayHeader:
        """The checked header of the array ``name``, whose member must hold exactly the
        bytes it declares."""
        with self._open(name) as stream:
            return self._header(name, stream)

    def _header(self, name: str, stream: IO[bytes]) -> ArrayHeader:
        header = read_header(stream, self._what(name))
        stored = self._members[name].file_size - header.offset
        if stored != header.nbytes:
            raise ValueError(
                f"{self._what(name)} declares shape {header.shape} of {header.dtype} "
                f"({header.nbytes:,} bytes) but its member holds {stored:,}; the archive is "
                "damaged or forged"
            )
        return header

    def read(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        """The arrays ``names``, every header checked first and their 64-bit size together
        within the cap."""
        names = list(names)
        total = sum(self.header(name).counted for name in names)
        cap = max_array_bytes()
        if total > cap:
            listed = ", ".join(names)
            raise ValueError(
                f"{self.path}: the arrays {listed} take {size_text(total)} together as 64-bit "
                f"values, more than {cap_hint(cap)}"
            )
        return {name: self._read_one(name) for name in names}

    def _read_one(self, name: str) -> np.ndarray:
        with self._open(name) as stream:
            return read_data(stream, self._header(name, stream), self._what(name))

    @contextmanager
    def _open(self, name: str) -> Iterator[IO[bytes]]:
        """The member of the array ``name``; a member zip cannot open or inflate (damaged
        data, a CRC mismatch, encryption, an unknown compression) is one line naming it."""
        if name not in self._members:
            raise ValueError(f"{self.path}: no array {name!r} (arrays: {self._listed()})")
        try:
            with self._zip.open(self._members[name]) as stream:
                yield stream
        except _DAMAGED as exc:
            raise ValueError(f"{self._what(name)} cannot be read ({exc})") from None

    def _listed(self) -> str:
        return ", ".join(self.names) or "none"


@contextmanager
def open_npz(path: str | Path) -> Iterator[NpzArchive]:
    """The ``.npz`` archive ``path``, opened as untrusted input (module docstring): a file
    that is not regular, empty, too large, not a zip, or whose directory is too large or
    declares too much is a ``ValueError`` naming it."""
    path = Path(path)
    with open_regular(path) as handle:
        _check_directory(path, handle)
        try:
            archive = zipfile.ZipFile(handle)
        except _DAMAGED + (ValueError,) as exc:
            raise ValueError(f"{path}: not a valid .npz archive ({exc})") from None
        with archive:
            _check_members(path, archive)
            yield NpzArchive(path, archive)


def _check_directory(path: Path, handle: IO[bytes]) -> None:
    """Refuse a file with no zip end record (saying whether it is a lone ``.npy``) and one
    whose end records declare more than :data:`MAX_MEMBERS` members or a directory larger
    than theirs, before ``zipfile`` builds an object per member."""
    declared = _end_records(handle)
    if declared is None:
        handle.seek(0)
        npy = handle.read(len(_NPY_MAGIC)) == _NPY_MAGIC
        what = "a single .npy array" if npy else "not a zip file"
        raise ValueError(f"{path}: not a valid .npz archive ({what})")
    members, directory = declared
    if members > MAX_MEMBERS or directory > MAX_MEMBERS * 1024:
        raise ValueError(
            f"{path}: its zip directory declares {members:,} members in {size_text(directory)}; "
            f"a .npz selfcal reads holds at most {MAX_MEMBERS:,}"
        )
    handle.seek(0)


def _end_records(handle: IO[bytes]) -> tuple[int, int] | None:
    """``(members, directory bytes)`` as the zip's end records declare them -- found and
    read as ``zipfile`` finds and reads them, zip64 record included -- or ``None``."""
    size = handle.seek(0, os.SEEK_END)
    tail_size = min(size, _END.size + 0xFFFF)
    handle.seek(size - tail_size)
    tail = handle.read(tail_size)
    at = len(tail) - _END.size
    if tail[at : at + 4] != b"PK\x05\x06" or tail[-2:] != b"\0\0":
        at = tail.rfind(b"PK\x05\x06")
    if at < 0 or at + _END.size > len(tail):
        return None
    fields = _END.unpack_from(tail, at)
    start = size - len(tail) + at
    if start >= _END64_LOCATOR.size + _END64.size:
        handle.seek(start - _END64_LOCATOR.size - _END64.size)
        record = handle.read(_END64.size + _END64_LOCATOR.size)
        if record[_END64.size :][:4] == b"PK\x06\x07" and record[:4] == b"PK\x06\x06":
            wide = _END64.unpack_from(record)
            return int(wide[7]), int(wide[8])
    return int(fields[4]), int(fields[5])


def _check_members(path: Path, archive: zipfile.ZipFile) -> None:
    """Refuse more members than :data:`MAX_MEMBERS`, two of one name, or members declaring
    more than the cap uncompressed together."""
    infos = archive.infolist()
    if len(infos) > MAX_MEMBERS:
        raise ValueError(f"{path}: holds {len(infos):,} members; at most {MAX_MEMBERS:,} are read")
    names = [info.filename for info in infos]
    if len(set(names)) != len(names):
        twice = next(name for name in names if names.count(name) > 1)
        raise ValueError(f"{path}: holds two members named {twice!r}; the archive is forged")
    total, cap = sum(info.file_size for info in infos), max_array_bytes()
    if total > cap + SLACK:
        raise ValueError(
            f"{path}: its members declare {size_text(total)} uncompressed, more than "
            f"{cap_hint(cap)}"
        )


def read_npz(
    path: str | Path, names: Iterable[str] | None = None
) -> tuple[list[str], dict[str, np.ndarray]]:
    """The array names of the ``.npz`` archive ``path`` and the arrays among ``names`` (every
    array when ``None``; names it does not hold are left out), read by :func:`open_npz`."""
    with open_npz(path) as archive:
        files = archive.names
        wanted = files if names is None else [n for n in names if n in files]
        return files, archive.read(wanted)


def read_npz_required(path: Path, names: Iterable[str], what: str) -> dict[str, np.ndarray]:
    """The arrays ``names`` of ``path``, each required: a missing one is a ``ValueError``
    saying the file is not ``what`` and which arrays it holds."""
    names = list(names)
    files, arrays = read_npz(path, names)
    missing = [name for name in names if name not in arrays]
    if missing:
        listed = ", ".join(files) or "none"
        raise ValueError(f"{path}: not {what} (no array {missing[0]!r}; arrays: {listed})")
    return arrays
