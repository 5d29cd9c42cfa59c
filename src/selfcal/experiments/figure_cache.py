"""Redraw a report's figures only when what they are drawn from has changed.

Drawing and saving a study's figures is most of what a fully stored ``selfcal reproduce``
does (``selfcal reproduce bo4sc``: about 27 s computing the figures and 30 s saving 12 PNGs of
a 50 s rerun). The figures are a function of the stored runs, the code and matplotlib, so a
report folder keeps, beside them, the key of what they were drawn from (:data:`KEY_FILE`, not
committed: see ``.gitignore``):

``sha256`` of every stored run's key, status and finish time (a rerun or an added run changes
it), the source of every module of the installed ``selfcal`` package (any code change, not only
a study version bump, redraws), the matplotlib version and the DPI. When the key matches and
every figure file is there, the figures are kept as they are.
"""

from __future__ import annotations

import hashlib
import json
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import selfcal
from selfcal.experiments.study import StudyResults

KEY_FILE = ".figures.json"


def figures_key(results: StudyResults, dpi: int) -> str:
    """The key of everything ``results``' figures are drawn from (module doc)."""
    digest = hashlib.sha256()
    for record in sorted(results.records, key=lambda r: r.key):
        digest.update(f"{record.key} {record.status} {record.finished_at}\n".encode())
    package = Path(selfcal.__file__).resolve().parent
    for source in sorted(package.rglob("*.py")):
        digest.update(str(source.relative_to(package)).encode())
        digest.update(source.read_bytes())
    try:
        matplotlib = version("matplotlib")
    except PackageNotFoundError:
        matplotlib = "none"
    digest.update(f"{results.protocol.name} matplotlib {matplotlib} dpi {dpi}".encode())
    return digest.hexdigest()


def kept_figures(out: Path, key: str) -> list[str] | None:
    """The figure files of ``out`` when they were drawn under ``key`` and are all there, else
    ``None`` (draw them)."""
    try:
        cached = json.loads((out / KEY_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(cached, dict) or cached.get("key") != key:
        return None
    files = cached.get("files")
    if not isinstance(files, list) or not all((out / str(f)).is_file() for f in files):
        return None
    return [str(f) for f in files]


def remember_figures(out: Path, key: str, files: list[str]) -> None:
    """Record that ``files`` were drawn under ``key``."""
    (out / KEY_FILE).write_text(json.dumps({"key": key, "files": files}) + "\n")
