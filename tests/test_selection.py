"""The one selection rule (:mod:`selfcal.selection`) on candidates of any type that offer
``ok``, ``metrics`` and ``hyperparameters``: the lowest finite score per group, failed and
non-finite candidates never chosen, ties to the first grid values; the stored runs of a study
(:func:`selfcal.experiments.selection.select_runs`) follow the same rule."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest

from selfcal.selection import VAL_ACCURACY, VAL_ECE, Candidates, Criterion, Grid, grid, select


@dataclass(frozen=True)
class Point:
    hyperparameters: dict[str, Any]
    metrics: dict[str, float]
    ok: bool = True
    group: str = "a"
    tags: dict[str, Any] = field(default_factory=dict)


def test_the_lowest_finite_score_of_each_group_is_selected():
    points = [
        Point({"gamma": 1.0}, {"val_ece": 0.2}),
        Point({"gamma": 2.0}, {"val_ece": math.nan}),
        Point({"gamma": 3.0}, {"val_ece": 0.1}),
        Point({"gamma": 1.0}, {"val_ece": 0.3}, group="b"),
        Point({"gamma": 2.0}, {}, group="c"),  # no finite candidate: the group is left out
    ]
    chosen = select(points, VAL_ECE, key=lambda p: p.group)
    assert chosen == [points[2], points[3]]
    assert select(points[:3], VAL_ECE) == [points[2]]  # one group without a key


def test_failed_candidates_are_never_selected_and_ties_go_to_the_first_grid_values():
    points = [
        Point({"norm": 1, "gamma": 3.0}, {"val_ece": 0.01}, ok=False),
        Point({"norm": 1, "gamma": 2.0}, {"val_ece": 0.05}),
        Point({"norm": 2, "gamma": 1.0}, {"val_ece": 0.05}),
    ]
    assert select(points, VAL_ECE) == [points[2]]  # gamma (sorted first) = 1 < 2


def test_a_criterion_may_maximise_and_depend_on_the_candidate():
    points = [Point({"a": 1}, {"val_accuracy": 0.8}), Point({"a": 2}, {"val_accuracy": 0.9})]
    assert select(points, VAL_ACCURACY) == [points[1]]
    by_tag = {"a": VAL_ACCURACY, "b": Criterion("val_accuracy")}
    points = [Point(p.hyperparameters, p.metrics, group="b") for p in points]
    assert select(points, lambda p: by_tag[p.group]) == [points[0]]


def test_grids_and_candidate_lists():
    assert grid(a=(1, 2), b=(3,)) == [{"a": 1, "b": 3}, {"a": 2, "b": 3}]
    assert Grid("m", a=(1, 2)).configs() == grid(a=(1, 2))
    assert Candidates("m", [{"T": 10}]).describe() == "T=10"
    with pytest.raises(ValueError, match="no values"):
        Grid("m", a=())
    with pytest.raises(ValueError, match="no candidate"):
        Candidates("m", [])


def test_stored_runs_follow_the_same_rule():
    from selfcal.experiments.selection import hp, select_runs
    from selfcal.experiments.spec import RunSpec
    from selfcal.experiments.store import RunRecord

    def run(key: str, seed: int, gamma: float, score: float) -> RunRecord:
        spec = RunSpec("s", "d", "m", seed, hp({"gamma": gamma}))
        return RunRecord(key, spec, "done", None, {"val_ece": score}, {}, 0.0, "")

    records = [run("1", 0, 2.0, 0.1), run("2", 0, 1.0, 0.1), run("3", 1, 1.0, 0.3)]
    assert [r.key for r in select_runs(records, VAL_ECE)] == ["2", "3"]
