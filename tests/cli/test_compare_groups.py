"""``selfcal compare`` on a set with groups (:mod:`selfcal.cli._compare_groups`): the worst group
per calibrator with its interval in the terminal, every group in the report and in ``--json``
(as the library computes them), and a set without groups printed exactly as before."""

from __future__ import annotations

import json
import re
import types

import numpy as np
import pytest
from helpers.cli import run
from helpers.sets import write_folder_set

import selfcal.posthoc._compare_fits as F
from selfcal.io import load_prediction_set
from selfcal.posthoc.compare import comparison

N_GROUPS = 5
METHODS = ("--calibrators", "ts,svs,none")


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("sets")
    write_folder_set(root / "grouped" / "m", 0, groups=N_GROUPS)
    write_folder_set(root / "plain" / "m", 0)
    return root


def test_terminal_shows_each_calibrators_worst_group_with_its_interval(capsys, sets, tmp_path):
    folder = sets / "grouped" / "m"
    code, out, err = run(capsys, "compare", folder, *METHODS, "--out", tmp_path / "r")
    assert code == 0, err
    assert "note:" not in err  # the groups are used, not noted as unused
    assert f"{N_GROUPS} groups in the test split" in out
    section = out.split("groups in the test split")[1]
    found = comparison(load_prediction_set(folder), ["ts", "svs", "none"])
    for name in ("ts", "svs", "none"):
        ev = found.groups.evaluations[name]
        worst = ev.report.names[ev.report.worst]
        iv = ev.worst_ece
        shown = f"{100 * iv.value:.1f} [{100 * iv.low:.1f}, {100 * iv.high:.1f}]"
        line = next(line for line in section.splitlines() if line.strip().startswith(name + " "))
        assert worst in line and shown in line, line
        assert found.groups.worst_minus_ts[name].text() in line
    assert "perfectly calibrated model's worst of these 5 groups" in section
    assert "worst groups by excess under none, ts" in section
    listed = [f"g{k}" for k in range(N_GROUPS) if re.search(rf"^\s*g{k}\s", section, re.M)]
    assert 1 <= len(listed) <= N_GROUPS


def test_groups_shown_sets_how_many_worst_groups_are_listed(capsys, sets, tmp_path):
    folder = sets / "grouped" / "m"
    args = ("compare", folder, "--calibrators", "ts", "--out", tmp_path / "r")
    code, out, err = run(capsys, *args, "--groups-shown", "1")
    assert code == 0, err
    listed = [f"g{k}" for k in range(N_GROUPS) if re.search(rf"^\s*g{k}\s", out, re.M)]
    assert len(listed) in (1, 2)  # the worst under none and under ts (one group if the same)
    code, out, err = run(capsys, *args, "--groups-shown", "0")
    assert code == 0 and "worst groups by excess" not in out
    assert "groups in the test split" in out


def test_json_holds_every_group_as_the_library_computes_it(capsys, sets):
    folder = sets / "grouped" / "m"
    code, out, err = run(capsys, "compare", folder, *METHODS, "--json")
    assert code == 0, err
    got = json.loads(out)["sets"]["m"]["groups"]
    expected = comparison(load_prediction_set(folder), ["ts", "svs", "none"]).to_dict()["groups"]
    assert _close(got, expected)
    assert got["n_groups"] == N_GROUPS
    for entry in got["calibrators"].values():
        assert [g["name"] for g in entry["per_group"]] == [f"g{k}" for k in range(N_GROUPS)]
        assert entry["worst_group_ece"]["ci"][0] <= entry["worst_group_ece"]["value"]


def _close(got, expected) -> bool:
    """Nested JSON values equal, numbers to 1e-9."""
    if isinstance(expected, dict):
        assert set(got) == set(expected)
        return all(_close(got[k], expected[k]) for k in expected)
    if isinstance(expected, list):
        assert len(got) == len(expected)
        return all(_close(g, e) for g, e in zip(got, expected))
    if isinstance(expected, float):
        assert got == pytest.approx(expected, abs=1e-9)
        return True
    assert got == expected
    return True


def test_the_report_has_every_group_under_every_calibrator(capsys, sets, tmp_path):
    out = tmp_path / "r"
    code, _, err = run(capsys, "compare", sets / "grouped" / "m", *METHODS, "--out", out)
    assert code == 0, err
    report = (out / "README.md").read_text()
    part = report.split("### Per group")[1]
    assert "| calibrator | worst group by ECE |" in part and "worst group by excess" in part
    assert "Every group's ECE (%) under each calibrator:" in part
    assert "| group | n | svs | ts | none |" in part or "| group | n |" in part
    for k in range(N_GROUPS):
        assert part.count(f"| g{k} |") >= 3  # the ECE table, and none's and ts's full tables
    assert "Every group under none" in part and "Every group under ts" in part


def test_a_set_without_groups_prints_exactly_what_it_did(capsys, sets, tmp_path, monkeypatch):
    """The same scores with and without groups: the same lines up to the group section, which
    only the set with groups has (fit times fixed at 0 so that the tables compare)."""
    monkeypatch.setattr(F, "time", types.SimpleNamespace(perf_counter=lambda: 0.0))
    code, plain, err = run(
        capsys, "compare", sets / "plain" / "m", *METHODS, "--out", tmp_path / "a"
    )
    assert code == 0, err
    assert "groups in the test split" not in plain and "note:" not in err
    code, grouped, err = run(
        capsys, "compare", sets / "grouped" / "m", *METHODS, "--out", tmp_path / "b"
    )
    assert code == 0, err
    head = grouped.split(f"{N_GROUPS} groups in the test split")[0]
    assert plain == head + f"report: {tmp_path / 'a' / 'README.md'}\n"
    report = (tmp_path / "a" / "README.md").read_text()
    assert "Per group" not in report
    code, text, _ = run(capsys, "compare", sets / "plain" / "m", *METHODS, "--json")
    assert "groups" not in json.loads(text)["sets"]["m"]
    np.testing.assert_array_equal(
        load_prediction_set(sets / "plain" / "m").test,
        load_prediction_set(sets / "grouped" / "m").test,
    )
