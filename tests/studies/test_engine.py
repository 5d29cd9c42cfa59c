"""The study engine on the tiny study of the test tree: a new study is one folder; selection
reads validation only; reports carry their provenance and go stale with the code."""

from __future__ import annotations

import json

import pytest
from helpers.studies import quick_args

from selfcal.cli import main
from selfcal.exceptions import StaleResults
from selfcal.experiments import report as reporting
from selfcal.experiments.selection import hyperparameters


def run(args, capsys):
    code = main(args)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


def test_a_new_study_is_one_folder(tiny_study, tmp_path, capsys):
    assert "tiny" in run(["reproduce", "--help"], capsys)
    assert "lives in the test tree" in run(["reproduce", "tiny", "--help"], capsys)
    out = tmp_path / "report"
    args = quick_args("tiny", tmp_path)
    payload = json.loads(run(args, capsys))
    assert len(payload["runs"]) == 3 * 4  # 3 seeds x (raw + 3 scales)
    chosen = [r for r in payload["runs"] if r["selected"]]
    assert len(chosen) == 3 * 2
    for seed in (0, 1, 2):  # the lowest validation error wins, whatever the test says
        shrunk = [r for r in payload["runs"] if r["method"] == "shrunk" and r["seed"] == seed]
        best = min(shrunk, key=lambda r: r["metrics"]["val_error"])
        assert best["selected"] and sum(r["selected"] for r in shrunk) == 1
    text = (out / "README.md").read_text()
    assert text.startswith("# Tiny study (test tree)") and "selfcal reproduce tiny --quick" in text
    assert "shrunk − raw:" in text
    made = reporting.check_provenance(out)
    assert (made.study, made.protocol, made.runs) == ("tiny", "quick", 12)


def test_a_report_of_another_version_is_stale(tiny_study, tmp_path, capsys, monkeypatch):
    out = tmp_path / "report"
    run(
        quick_args("tiny", tmp_path, json=False),
        capsys,
    )
    reporting.check_provenance(out)
    monkeypatch.setattr(type(tiny_study), "version", 2)
    with pytest.raises(StaleResults, match="study version 1, code 2.*regenerate"):
        reporting.check_provenance(out)
    monkeypatch.setattr(type(tiny_study), "version", 1)
    made = json.loads((out / "provenance.json").read_text())
    (out / "provenance.json").write_text(json.dumps({**made, "fingerprint": "0" * 12}))
    with pytest.raises(StaleResults, match="fingerprint 000000000000"):
        reporting.check_provenance(out)
    (out / "provenance.json").unlink()
    with pytest.raises(StaleResults, match="no provenance.json"):
        reporting.check_provenance(out)


def test_selection_ignores_the_test_metrics(tiny_study, tmp_path):
    from selfcal.experiments import ResultsStore
    from selfcal.experiments.study import StudyResults, run_study

    protocol = tiny_study.protocol("quick")
    with ResultsStore(tmp_path / "s.sqlite") as store:
        run_study(tiny_study, protocol, store)
        results = StudyResults.load(tiny_study, protocol, store)
        chosen = {
            r.spec.seed: hyperparameters(r)["scale"] for r in results.runs("normal", "shrunk")
        }
        for record in results.records:  # a test metric that favours another candidate
            record.metrics["error"] = -record.metrics["val_error"]
        assert {
            r.spec.seed: hyperparameters(r)["scale"]
            for r in StudyResults.load(tiny_study, protocol, store).runs("normal", "shrunk")
        } == chosen


def test_retry_failed_reruns_the_stored_failures_only(tiny_study, tmp_path, capsys, monkeypatch):
    """A run that returned a NaN is stored as failed and kept by a plain rerun; after a fix,
    ``--retry-failed`` runs it again (and only it)."""
    args = quick_args("tiny", tmp_path, json=False)
    execute = type(tiny_study).execute

    def broken(self, protocol, group):
        results = execute(self, protocol, group)
        if group[0].method == "raw" and group[0].seed == 0:
            results[0].metrics["error"] = float("nan")
        return results

    monkeypatch.setattr(type(tiny_study), "execute", broken)
    assert "11 runs done, 0 already stored, 1 failed" in run(args, capsys)
    assert "0 runs done, 12 already stored, 0 failed" in run(args, capsys)
    assert "Failed runs (1;" in (tmp_path / "report" / "README.md").read_text()
    monkeypatch.setattr(type(tiny_study), "execute", execute)
    assert "1 runs done, 11 already stored, 0 failed" in run([*args, "--retry-failed"], capsys)
    assert "Failed runs" not in (tmp_path / "report" / "README.md").read_text()
