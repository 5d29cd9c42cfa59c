"""The documentation keeps its promises: the quickstart runs, every ``methods §N.M`` citation and
every bibliography key in the source resolves on the site, every test file the pages name
exists, and the site builds with warnings as errors."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SRC = ROOT / "src" / "selfcal"

PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
CITATION = re.compile(
    r"\b[Mm]ethods\s+§(\d+(?:\.\d+)?)" r"((?:\s*(?:/|,|and|or)\s*§\d+(?:\.\d+)?)*)"
)
"""``methods §6.1``, with any further ``/ §6.6`` of the same citation."""
OUTSIDE_CITATION = re.compile(r"\b[Ss]pec(?:ification)?\s+(?:section\s+)?§?\d")
"""A citation of the specification outside the repository (now ``methods §``)."""
SECTION_NUMBER = re.compile(r"§(\d+(?:\.\d+)?)")
HEADING_ANCHOR = re.compile(r"^#{1,6} .*\{#([\w-]+)\}\s*$", flags=re.MULTILINE)
BIBLIOGRAPHY_KEYS = ("BO4SC", "MetaReg", "MC", "GRA", "FLC")
"""The keys docstrings cite; each has the anchor ``ref-<key in lower case>`` on the
references page."""
BRACKETED_KEY = re.compile(r"(?<![\w.\]\[`])\[([A-Z][A-Za-z0-9-]+)\](?![(\[])")
"""A bracketed capitalised token in prose (not a subscript such as ``list[str]``)."""
TEST_PATH = re.compile(r"\b(tests/[\w/]+\.py)(?:::(\w+))?")
PAGES_NAMING_TESTS = (*sorted(DOCS.rglob("*.md")), ROOT / "CONTRIBUTING.md")


def section_anchor(number: str) -> str:
    """The anchor of a methods section: ``6.1`` -> ``s6-1``."""
    return "s" + number.replace(".", "-")


def methods_anchors() -> set[str]:
    """Every explicit heading anchor of the methods pages."""
    return {
        anchor
        for page in (DOCS / "methods").glob("*.md")
        for anchor in HEADING_ANCHOR.findall(page.read_text(encoding="utf-8"))
    }


def cited_sections() -> dict[str, list[str]]:
    """Section number -> the source files citing it."""
    cited: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        for match in CITATION.finditer(path.read_text(encoding="utf-8")):
            numbers = [match.group(1), *SECTION_NUMBER.findall(match.group(2))]
            for number in numbers:
                cited.setdefault(number, []).append(str(path.relative_to(ROOT)))
    return cited


def prose_strings(path: Path) -> Iterator[str]:
    """The string literals and comments of a Python file (where citations are written)."""
    text = path.read_text(encoding="utf-8")
    kinds = {tokenize.STRING, tokenize.COMMENT, getattr(tokenize, "FSTRING_MIDDLE", -1)}
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type in kinds:
            yield token.string


def cited_keys() -> set[str]:
    """Every bracketed key cited in the source's strings and comments."""
    return {
        match.group(1)
        for path in SRC.rglob("*.py")
        for text in prose_strings(path)
        for match in BRACKETED_KEY.finditer(text)
    }


# ----------------------------------------------------------------------------- quickstart
def test_quickstart_snippets_run_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ```python block of the quickstart, in order, in one namespace, in a scratch folder
    (the reproduce step writes its store and report there). A snippet that no longer matches
    the API fails here -- it is never skipped."""
    blocks = PYTHON_BLOCK.findall((DOCS / "quickstart.md").read_text(encoding="utf-8"))
    assert len(blocks) >= 5, "the quickstart lost its snippets"
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "quickstart"}
    for index, block in enumerate(blocks):
        exec(compile(block, f"docs/quickstart.md[python block {index}]", "exec"), namespace)
    assert (tmp_path / "selfcal-report" / "gra-toy" / "README.md").exists()


TEXT_BLOCK = re.compile(r"^```text\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)


def test_the_conformal_tutorial_prints_what_it_shows(capsys: pytest.CaptureFixture[str]) -> None:
    """The calibrate-then-conformalise tutorial's code prints exactly the output on the page
    (its numbers come from the code, never typed in)."""
    page = (DOCS / "tutorials" / "calibrate-then-conformalise.md").read_text(encoding="utf-8")
    (code,), shown = PYTHON_BLOCK.findall(page), TEXT_BLOCK.findall(page)[0]
    exec(compile(code, "calibrate-then-conformalise.md", "exec"), {"__name__": "tutorial"})
    assert capsys.readouterr().out.strip() == shown.strip()


# ----------------------------------------------------------------------------- citations
def test_every_methods_citation_in_the_source_has_a_section() -> None:
    anchors = methods_anchors()
    cited = cited_sections()
    assert cited, "no methods citation found: has the citation spelling changed?"
    missing = {
        number: files for number, files in cited.items() if section_anchor(number) not in anchors
    }
    assert not missing, f"cited sections with no numbered heading in docs/methods: {missing}"


def test_no_citation_points_outside_the_repository() -> None:
    """Every citation of the method reference is ``methods §N.M`` (the numbered pages here),
    in the source, the tests, the benchmarks and the committed reports."""
    places = [
        *SRC.rglob("*.py"),
        *(ROOT / "tests").rglob("*.py"),
        *(ROOT / "benchmarks").glob("*.py"),
    ]
    places += sorted((ROOT / "results").glob("*/README.md"))
    outside = [
        f"{path.relative_to(ROOT)}: {match.group(0)!r}"
        for path in places
        if path != Path(__file__)
        for match in OUTSIDE_CITATION.finditer(path.read_text(encoding="utf-8"))
    ]
    assert not outside, outside


def test_the_methods_pages_number_every_section_of_the_reference() -> None:
    """§0-§9 with their subsections (the numbering docstrings use), each once."""
    expected = {"s0", *(f"s0-{k}" for k in range(1, 7)), "s1", *(f"s1-{k}" for k in range(1, 7))}
    expected |= {"s2", "s2-1", "s2-2", "s3", "s4", *(f"s4-{k}" for k in range(1, 8))}
    expected |= {"s5", *(f"s5-{k}" for k in range(1, 4)), "s6", *(f"s6-{k}" for k in range(1, 7))}
    expected |= {"s7", *(f"s7-{k}" for k in range(1, 5)), "s8", *(f"s8-{k}" for k in range(1, 6))}
    expected |= {"s9"}
    assert expected <= methods_anchors()
    all_anchors = [
        anchor
        for page in (DOCS / "methods").glob("*.md")
        for anchor in HEADING_ANCHOR.findall(page.read_text(encoding="utf-8"))
    ]
    assert len(all_anchors) == len(set(all_anchors)), "a section anchor is defined twice"


def test_every_bibliography_key_in_the_source_has_a_reference() -> None:
    found = cited_keys()
    assert found, "no bibliography key found: has the citation spelling changed?"
    assert found <= set(BIBLIOGRAPHY_KEYS), (
        f"keys cited in src/ but not listed here (add them to BIBLIOGRAPHY_KEYS and "
        f"docs/references.md): {sorted(found - set(BIBLIOGRAPHY_KEYS))}"
    )
    anchors = set(HEADING_ANCHOR.findall((DOCS / "references.md").read_text(encoding="utf-8")))
    missing = [key for key in BIBLIOGRAPHY_KEYS if f"ref-{key.lower()}" not in anchors]
    assert not missing, f"keys with no entry in docs/references.md: {missing}"


def test_every_test_file_the_documentation_names_exists() -> None:
    """The conventions page and the recipes name the tests that pin a behaviour; a moved or
    renamed test must be renamed there too."""
    named = [
        (page, match.group(1), match.group(2))
        for page in PAGES_NAMING_TESTS
        for match in TEST_PATH.finditer(page.read_text(encoding="utf-8"))
    ]
    assert named
    stale = []
    for page, test_file, test_name in named:
        path = ROOT / test_file
        if not path.exists():
            stale.append(f"{page.relative_to(ROOT)}: {test_file}")
        elif test_name and f"def {test_name}(" not in path.read_text(encoding="utf-8"):
            stale.append(f"{page.relative_to(ROOT)}: {test_file}::{test_name}")
    assert not stale, f"documentation names tests that do not exist: {stale}"


# ----------------------------------------------------------------------------- the site
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """``mkdocs build --strict``, exactly what CI runs, into a scratch folder: a broken link, a
    missing page, an unresolved citation or a docstring the renderer cannot parse fails it."""
    pytest.importorskip("mkdocs")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "methods" / "bo4sc" / "index.html").exists()
    assert (tmp_path / "studies" / "bo4sc" / "index.html").exists()
    for page in (tmp_path / "api").rglob("index.html"):  # no internals behind a public name
        assert "_CALIBRATORS" not in page.read_text(encoding="utf-8"), page
    assert (tmp_path / "stylesheets" / "extra.css").exists()
