"""What the study tests share: the command line of a quick reproduction."""

from __future__ import annotations

from pathlib import Path


def quick_args(study: str, folder: Path, *, json: bool = True, report: str = "report") -> list[str]:
    """``selfcal reproduce STUDY --quick [--json] --workers 1`` with its store and report in
    ``folder``."""
    flags = ["--json"] if json else []
    store, out = str(folder / "s.sqlite"), str(folder / report)
    return ["reproduce", study, "--quick", *flags, "--workers", "1", "--store", store, "--out", out]


def run_quick(study: str, folder: Path) -> dict:
    """:func:`quick_args` run through the command line: its ``--json`` payload."""
    import io
    import json
    from contextlib import redirect_stdout

    from selfcal.cli import main

    buffer = io.StringIO()
    with redirect_stdout(buffer):
        assert main(quick_args(study, folder)) == 0
    return json.loads(buffer.getvalue())
