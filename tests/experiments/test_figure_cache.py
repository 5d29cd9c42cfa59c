"""A fully stored rerun keeps the figures drawn from the same runs by the same code."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from selfcal.experiments.figure_cache import KEY_FILE, figures_key, kept_figures
from selfcal.experiments.report import FIGURE_DPI, write_report
from selfcal.experiments.store import ResultsStore
from selfcal.experiments.study import StudyResults, get_study, run_study


@pytest.fixture(scope="module")
def gra_toy(tmp_path_factory):
    study = get_study("gra-toy")
    protocol = study.protocol("quick")
    path = tmp_path_factory.mktemp("figures") / "s.sqlite"
    with ResultsStore(path) as store:
        run_study(study, protocol, store)
        return StudyResults.load(study, protocol, store)


def test_a_rerun_keeps_the_figures_and_redraws_a_missing_one(gra_toy, tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    calls = []

    def figures(self, results):
        calls.append(1)
        figure = Figure()
        figure.add_subplot().plot([0, 1])
        return {"a.png": figure, "b.png": figure, "none.png": None}

    monkeypatch.setattr(type(gra_toy.study), "figures", figures)
    out = tmp_path / "report"
    write_report(gra_toy, out, command="probe")
    assert calls == [1] and (out / KEY_FILE).is_file()
    assert sorted(p.name for p in out.glob("*.png")) == ["a.png", "b.png"]
    text = write_report(gra_toy, out, command="probe").read_text()
    assert calls == [1]  # kept
    assert "![a.png](a.png)" in text and "![b.png](b.png)" in text
    (out / "a.png").unlink()
    write_report(gra_toy, out, command="probe")
    assert calls == [1, 1] and (out / "a.png").is_file()


def test_the_key_changes_with_the_runs(gra_toy):
    key = figures_key(gra_toy, FIGURE_DPI)
    assert figures_key(gra_toy, FIGURE_DPI) == key
    rerun = dataclasses.replace(gra_toy.records[0], finished_at="2099-01-01T00:00:00")
    changed = SimpleNamespace(records=[rerun, *gra_toy.records[1:]], protocol=gra_toy.protocol)
    assert figures_key(changed, FIGURE_DPI) != key
    fewer = SimpleNamespace(records=gra_toy.records[1:], protocol=gra_toy.protocol)
    assert figures_key(fewer, FIGURE_DPI) != key
    assert figures_key(gra_toy, FIGURE_DPI + 1) != key


def test_a_damaged_key_file_redraws(tmp_path):
    (tmp_path / KEY_FILE).write_text("{not json")
    assert kept_figures(tmp_path, "k") is None
    (tmp_path / KEY_FILE).write_text('{"key": "k", "files": ["a.png"]}')
    assert kept_figures(tmp_path, "k") is None  # a.png is missing
    (tmp_path / "a.png").write_bytes(b"")
    assert kept_figures(tmp_path, "k") == ["a.png"]
    assert kept_figures(tmp_path, "other") is None


def test_an_interrupt_while_the_figures_are_redrawn_leaves_the_old_report(
    gra_toy, tmp_path, monkeypatch
):
    """A study's report folder is replaced whole: interrupted after its first new figure,
    the old README, provenance and figures stay as they were, with nothing beside them."""
    import hashlib

    from matplotlib.figure import Figure

    def figures(self, results):
        figure = Figure()
        figure.add_subplot().plot([0, 1])
        return {"a.png": figure, "b.png": figure}

    monkeypatch.setattr(type(gra_toy.study), "figures", figures)
    out = tmp_path / "report"
    write_report(gra_toy, out, command="old")
    old = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir()}
    saved = []
    real = Figure.savefig

    def interrupted(self, path, **kwargs):
        real(self, path, **kwargs)
        saved.append(path)
        raise KeyboardInterrupt

    monkeypatch.setattr("selfcal.experiments.report.kept_figures", lambda out, key: None)
    monkeypatch.setattr(Figure, "savefig", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_report(gra_toy, out, command="new")
    assert len(saved) == 1  # one new figure was written (in the scratch folder) before
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir()} == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]
