"""MkDocs hooks: the pages made at build time from files that live outside ``docs/``.

* **Studies.** Every committed report ``results/<study>/README.md`` becomes the page
  ``studies/<study>/index.md``, and every PNG beside it ``studies/<study>/<name>.png``, so the
  report's relative image links (``![...](fig.png)``) work unchanged on the site. Nothing is
  copied by hand: a regenerated report is on the next build.
* **Benchmarks.** ``docs/benchmarks.md`` is the page's introduction; the committed outputs
  ``benchmarks/results/*.md`` are appended to it in file-name order, each with its headings
  one level down and its source named.

* **Contributing and Changelog.** The pages ``docs/contributing.md`` and ``docs/changelog.md``
  are placeholders whose content is replaced by the root ``CONTRIBUTING.md`` and
  ``CHANGELOG.md``, so those files are written once, where GitHub shows them.

Sphinx roles in the generated text (the reports quote docstrings) are shown as inline code, as
the API pages show them (``docs/griffe_sphinx.py``). Paths are resolved from this file, so the
site builds from any working directory.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
BENCHMARK_RESULTS = ROOT / "benchmarks" / "results"
BENCHMARKS_PAGE = "benchmarks.md"
INCLUDED_PAGES = {
    "contributing.md": ROOT / "CONTRIBUTING.md",
    "changelog.md": ROOT / "CHANGELOG.md",
}
"""Pages whose whole content is a root file."""
HEADING = re.compile(r"^(#{1,5}) ", flags=re.MULTILINE)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from griffe_sphinx import replace_roles  # noqa: E402  (docs/ is not a package)


def study_reports(results: Path = RESULTS) -> dict[str, Path]:
    """Study name -> its committed report folder, for every ``results/<study>/README.md``."""
    return {p.parent.name: p.parent for p in sorted(results.glob("*/README.md"))}


def study_page(name: str, report: Path) -> str:
    """The report's Markdown with a note under its title naming where it comes from."""
    lines = replace_roles(report.read_text(encoding="utf-8")).splitlines()
    note = (
        f'!!! note "Generated from `results/{name}/README.md`"\n'
        f"    This page is the committed report, included verbatim when the site is built. "
        f"`selfcal reproduce` rewrites it; a test fails when it no longer matches the code."
    )
    title, body = (lines[0], lines[1:]) if lines and lines[0].startswith("# ") else ("", lines)
    return "\n".join([title, "", note, *body]) + "\n"


def demoted(markdown: str) -> str:
    """Every ATX heading one level down (``#`` -> ``##``)."""
    return HEADING.sub(lambda m: "#" + m.group(1) + " ", markdown)


def benchmark_sections(folder: Path = BENCHMARK_RESULTS) -> str:
    """The committed benchmark outputs, one section each, in file-name order; a file without a
    title gets its name as one."""
    parts = []
    for path in sorted(folder.glob("*.md")):
        text = path.read_text(encoding="utf-8").strip()
        if not text.startswith("# "):
            text = f"# `{path.stem}`\n\n{text}"
        parts.append(f"{demoted(text)}\n\n*Source: `benchmarks/results/{path.name}`.*\n")
    return "\n".join(parts)


def on_files(files: Files, config: MkDocsConfig, **kwargs: Any) -> Files:
    """Add each study report and its figures as site files."""
    for name, folder in study_reports().items():
        page = study_page(name, folder / "README.md")
        files.append(File.generated(config, f"studies/{name}/index.md", content=page))
        for figure in sorted(folder.glob("*.png")):
            uri = f"studies/{name}/{figure.name}"
            files.append(File.generated(config, uri, abs_src_path=str(figure)))
    return files


def on_page_markdown(
    markdown: str, page: Page, config: MkDocsConfig, files: Files, **kwargs: Any
) -> str:
    """Append the committed benchmark outputs to the benchmarks page; replace the included
    pages by their root files."""
    if page.file.src_uri == BENCHMARKS_PAGE:
        return markdown.rstrip() + "\n\n" + benchmark_sections()
    if page.file.src_uri in INCLUDED_PAGES:
        return INCLUDED_PAGES[page.file.src_uri].read_text(encoding="utf-8")
    return markdown
