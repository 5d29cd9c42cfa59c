"""The contract every registered study keeps, checked on its quick protocol end to end through
the command line: the runs, selection, the report and its provenance, resumption, and numbers
that do not depend on the caller's thread count."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.studies import quick_args

from selfcal.cli import main
from selfcal.experiments import ResultsStore
from selfcal.experiments import report as reporting
from selfcal.experiments.study import get_study, study_names

STUDIES = study_names()


def test_the_registry_knows_the_studies_and_the_cli_offers_them(capsys):
    assert set(STUDIES) >= {"bo4sc", "bsce-gra", "gra-toy", "meta-reg"}
    assert main(["reproduce", "--help"]) == 0
    text = capsys.readouterr().out
    for name in STUDIES:
        assert name in text


@pytest.fixture(scope="module")
def quick_runs(tmp_path_factory):
    """Every study's quick protocol once (two caller threads, one worker), with its JSON."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    out = {}
    try:
        for name in STUDIES:
            root = tmp_path_factory.mktemp(name)
            args = quick_args(name, root)
            out[name] = (args, root, _run(args))
    finally:
        torch.set_num_threads(threads)
    return out


def _run(args):
    import io
    from contextlib import redirect_stdout

    buffer = io.StringIO()
    with redirect_stdout(buffer):
        assert main(args) == 0
    return json.loads(buffer.getvalue())


@pytest.mark.parametrize("name", STUDIES)
def test_protocols_specs_and_fingerprints(name):
    study = get_study(name)
    quick, full = study.protocol("quick"), study.protocol("full")
    assert study.protocol() is full and study.fingerprint(quick) != study.fingerprint(full)
    specs = study.specs(quick)
    assert len({s.key for s in specs}) == len(specs) > 0
    for spec in specs:
        assert spec.study == name and spec.seed in quick.seeds
        assert spec.hparams["protocol"] == "quick" and spec.hparams["threads"] == quick.threads
        assert spec.hparams["fingerprint"] == study.fingerprint(quick)
        assert study.protocol_of(spec) is quick
    stale = specs[0].replace(hparams={**specs[0].hparams, "fingerprint": "0" * 12})
    with pytest.raises(ValueError, match="another version"):
        study.protocol_of(stale)
    with pytest.raises(ValueError, match="--protocol must be one of"):
        study.protocol("nonsense")


@pytest.mark.parametrize("name", STUDIES)
def test_quick_run_report_selection_and_resume(name, quick_runs, capsys):
    args, root, payload = quick_runs[name]
    study = get_study(name)
    quick = study.protocol("quick")
    assert payload["failures"] == [] and payload["study"] == name
    assert len(payload["runs"]) == len(study.specs(quick))
    assert all(r["seconds"] >= 0 for r in payload["runs"])  # timed (tests never bound a time)
    keys = {(r["dataset"], r["method"], r["regime"], r["seed"]) for r in payload["runs"]}
    chosen = [r for r in payload["runs"] if r["selected"]]
    assert {(r["dataset"], r["method"], r["regime"], r["seed"]) for r in chosen} == keys
    assert len(chosen) == len(keys)  # exactly one selected run per (dataset, method, ...)
    for a in payload["aggregates"]:
        assert a["n"] <= len(quick.seeds)
    report = root / "report"
    text = (report / "README.md").read_text()
    assert text.startswith(f"# {study.title}")
    assert f"selfcal reproduce {name} --quick" in text and study.fingerprint(quick) in text
    made = reporting.check_provenance(report)
    assert (made.study, made.protocol, made.runs) == (name, "quick", len(payload["runs"]))
    with ResultsStore(root / "s.sqlite") as store:  # every artefact is stored with its run
        assert len(store.runs(study=name)) == len(payload["runs"])
    assert main([a for a in args if a != "--json"]) == 0  # a rerun resumes: nothing to run
    assert f"0 runs done, {len(payload['runs'])} already stored" in capsys.readouterr().out


def test_metrics_do_not_depend_on_the_callers_thread_count(quick_runs, tmp_path):
    """The engine fixes each run's thread count: the same quick study with one caller thread
    gives the same numbers, bit for bit, as with two."""
    name = "bsce-gra"
    _, _, two = quick_runs[name]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one = _run(quick_args(name, tmp_path, report="r"))
    finally:
        torch.set_num_threads(threads)

    def metrics(payload):
        return {
            (r["dataset"], r["method"], r["regime"], r["seed"], json.dumps(r["hp"])): r["metrics"]
            for r in payload["runs"]
        }

    assert metrics(one) == metrics(two)
