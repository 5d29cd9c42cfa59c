"""No module of ``src/selfcal`` is longer than :data:`MAX_LINES` lines: past that a file holds
more than one concern, and is split along its seam (one concern per module; every importer then
imports each name from the one module that defines it, with no re-export left behind)."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "selfcal"
MAX_LINES = 450


def line_count(path: Path) -> int:
    """Lines as ``wc -l`` counts them."""
    return path.read_bytes().count(b"\n")


def test_no_module_is_longer_than_the_limit() -> None:
    sizes = {str(path.relative_to(SRC)): line_count(path) for path in sorted(SRC.rglob("*.py"))}
    too_long = {name: lines for name, lines in sizes.items() if lines > MAX_LINES}
    assert not too_long, f"modules over {MAX_LINES} lines (split them): {too_long}"
