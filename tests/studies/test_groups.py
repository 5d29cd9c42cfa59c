"""The groups study (``selfcal reproduce groups``): the groups of each kind of set, the
published facts they rest on, the re-split protocol, and the report on a small folder of
sets and on the synthetic set."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from helpers.sets import write_folder_set

from selfcal._inputs import as_groups
from selfcal.io import PREDICTIONS_ENV, load_prediction_set
from selfcal.studies.groups import Groups
from selfcal.studies.groups.data import (
    CIFAR100_COARSE,
    CIFAR100_SUPERCLASSES,
    MMLU_REDUX_ERRORS,
    cifar10_table,
    cifar100_table,
    flagged_subjects,
    set_groups,
    synthetic_set,
    within_group_errors,
)
from selfcal.studies.groups.execute import (
    coverage_null,
    evaluate_split,
    mondrian_cells,
    mondrian_coverage_null,
    split_rows,
)
from selfcal.studies.groups.protocol import QUICK, SETS

FINE = (
    "apple aquarium_fish baby bear beaver bed bee beetle bicycle bottle bowl boy bridge bus "
    "butterfly camel can castle caterpillar cattle chair chimpanzee clock cloud cockroach couch "
    "crab crocodile cup dinosaur dolphin elephant flatfish forest fox girl hamster house "
    "kangaroo keyboard lamp lawn_mower leopard lion lizard lobster man maple_tree motorcycle "
    "mountain mouse mushroom oak_tree orange orchid otter palm_tree pear pickup_truck pine_tree "
    "plain plate poppy porcupine possum rabbit raccoon ray road rocket rose sea seal shark shrew "
    "skunk skyscraper snail snake spider squirrel streetcar sunflower sweet_pepper table tank "
    "telephone television tiger tractor train trout tulip turtle wardrobe whale willow_tree wolf "
    "woman worm"
).split()
"""CIFAR-100's class names in its class order (alphabetical)."""
LISTING = {
    "aquatic_mammals": "beaver dolphin otter seal whale",
    "fish": "aquarium_fish flatfish ray shark trout",
    "flowers": "orchid poppy rose sunflower tulip",
    "food_containers": "bottle bowl can cup plate",
    "fruit_and_vegetables": "apple mushroom orange pear sweet_pepper",
    "household_electrical_devices": "clock keyboard lamp telephone television",
    "household_furniture": "bed chair couch table wardrobe",
    "insects": "bee beetle butterfly caterpillar cockroach",
    "large_carnivores": "bear leopard lion tiger wolf",
    "large_man-made_outdoor_things": "bridge castle house road skyscraper",
    "large_natural_outdoor_scenes": "cloud forest mountain plain sea",
    "large_omnivores_and_herbivores": "camel cattle chimpanzee elephant kangaroo",
    "medium_mammals": "fox porcupine possum raccoon skunk",
    "non-insect_invertebrates": "crab lobster snail spider worm",
    "people": "baby boy girl man woman",
    "reptiles": "crocodile dinosaur lizard snake turtle",
    "small_mammals": "hamster mouse rabbit shrew squirrel",
    "trees": "maple_tree oak_tree palm_tree pine_tree willow_tree",
    "vehicles_1": "bicycle bus motorcycle pickup_truck train",
    "vehicles_2": "lawn_mower rocket streetcar tank tractor",
}
"""The superclass listing of the CIFAR-100 page (Krizhevsky 2009), by name: an independent
statement of the map the study writes by index."""


def test_the_cifar100_map_is_the_published_superclass_listing():
    assert len(FINE) == 100 and len(CIFAR100_COARSE) == 100
    assert np.bincount(CIFAR100_COARSE).tolist() == [5] * 20
    by_name = {fine: coarse for coarse, names in LISTING.items() for fine in names.split()}
    assert [by_name[name] for name in FINE] == cifar100_table().tolist()
    assert list(LISTING) == list(CIFAR100_SUPERCLASSES)


def test_cifar10_vehicles_are_airplane_automobile_ship_truck():
    names = "airplane automobile bird cat deer dog frog horse ship truck".split()
    table = cifar10_table()
    assert [n for n, kind in zip(names, table) if kind == "vehicle"] == [
        "airplane",
        "automobile",
        "ship",
        "truck",
    ]


def test_mmlu_redux_counts_are_the_papers_totals():
    assert len(MMLU_REDUX_ERRORS) == 57
    assert sum(MMLU_REDUX_ERRORS.values()) == 370  # 6.49% of 5,700, the paper's estimate
    assert round(100 * 370 / 5700, 2) == 6.49
    assert MMLU_REDUX_ERRORS["virology"] == 57  # its headline: 57% of virology
    flagged = flagged_subjects()
    assert "virology" in flagged and len(flagged) == 14
    assert all(MMLU_REDUX_ERRORS[s] >= 10 for s in flagged)


def test_within_group_errors_tell_the_class_order():
    rng = np.random.default_rng(0)
    table = cifar100_table()
    y = rng.integers(0, 100, 4000)
    members = {g: np.flatnonzero(table == g) for g in set(table)}
    wrong = np.array([rng.choice(members[table[k]][members[table[k]] != k]) for k in y])
    predicted = np.where(rng.random(4000) < 0.5, y, wrong)  # errors within the superclass
    scores = np.eye(100)[predicted]
    observed, chance = within_group_errors(scores, y, table)
    assert observed == 1.0 and chance == pytest.approx(4 / 99)
    shuffled, _ = within_group_errors(scores, y, table[rng.permutation(100)])
    assert shuffled < 0.2  # the wrong order: about chance


def test_groups_of_each_kind_of_set(tmp_path):
    write_folder_set(tmp_path / "toy_cifar10", 0, n=200, c=10)
    data = load_prediction_set(tmp_path / "toy_cifar10")
    found = set_groups("toy_cifar10", data)
    assert found.family == "cifar10"
    assert found.test.tolist() == cifar10_table()[np.argmax(data.test, 1)].tolist()
    write_folder_set(tmp_path / "plain", 0, n=200, c=10)
    with pytest.raises(ValueError, match="set 'plain' has no groups"):
        set_groups("plain", load_prediction_set(tmp_path / "plain"))
    write_folder_set(tmp_path / "grouped", 0, n=200, c=4, groups=3)
    assert set_groups("grouped", load_prediction_set(tmp_path / "grouped")).family == "given"


def test_the_synthetic_set_is_seeded_and_overlapping():
    z, y, member = synthetic_set(6000, 5, 3)
    again = synthetic_set(6000, 5, 3)
    assert np.array_equal(z, again[0]) and np.array_equal(y, again[1])
    assert member.shape == (6000, 3)
    assert member.mean(0) == pytest.approx([0.3, 0.2, 0.15], abs=0.02)
    assert (member.sum(1) >= 2).any() and (member.sum(1) == 0).any()


def test_the_splits_are_disjoint_and_cover_every_row():
    fit, cal, scored = split_rows(101, 4)
    rows = np.concatenate([fit, cal, scored])
    assert sorted(rows.tolist()) == list(range(101))
    assert len(fit) == 50 and abs(len(cal) - len(scored)) <= 1
    assert not np.array_equal(split_rows(101, 5)[0], fit)


def test_overlapping_groups_are_cut_into_the_cells_of_their_memberships():
    member = np.array([[1, 0], [1, 1], [0, 0], [0, 1], [1, 1]], dtype=bool)
    cells = mondrian_cells(as_groups(member, 5, names=("A", "B")))
    assert [cells.names[c] for c in cells.codes] == ["A", "A+B", "none", "B", "A+B"]
    partition = as_groups(["x", "y"], 2)
    assert mondrian_cells(partition) is partition


def test_the_coverage_yardstick_matches_a_binomial_minimum():
    from scipy import stats

    groups = as_groups(np.repeat(["a", "b"], [20, 200]), 220)
    found = coverage_null(groups, 0.1, 4000, 0)
    a, b = np.arange(21), np.arange(201)  # E min(A/20, B/200), A ~ Bin(20, .9), B ~ Bin(200, .9)
    joint = np.outer(stats.binom(20, 0.9).pmf(a), stats.binom(200, 0.9).pmf(b))
    expected = float((joint * np.minimum.outer(a / 20, b / 200)).sum())
    assert found == pytest.approx(expected, abs=0.003)


def test_the_mondrian_yardstick_adds_the_thresholds_beta_noise():
    from scipy import stats

    cal = as_groups(np.repeat(["a", "b"], [19, 400]), 419)
    scored = as_groups(np.repeat(["a", "b"], [2000, 2000]), 4000)
    found = mondrian_coverage_null(cal, scored, 0.1, 4000, 0)
    # group a: 19 calibration rows, k = 18, coverage ~ Beta(18, 2) (mean 0.9, sd 0.065); with
    # 2,000 scored rows its fraction is that draw; group b's is about 0.9
    pi = stats.beta(18, 2)
    grid = np.linspace(0, 1, 20001)
    expected = float(np.trapezoid(np.minimum(grid, 0.9) * pi.pdf(grid), grid))
    assert found == pytest.approx(expected, abs=0.004)
    assert found < coverage_null(scored, 0.1, 4000, 0) - 0.02  # wider than the binomial alone
    tiny = as_groups(np.repeat(["a", "b"], [5, 400]), 405)  # 5 rows: every label, covered
    assert mondrian_coverage_null(tiny, as_groups(["a"] * 50, 50), 0.1, 100, 0) == 1.0


def test_a_group_aware_method_is_given_groups_and_measured_per_group():
    z, y, member = synthetic_set(3000, 4, 0)
    groups = as_groups(member, len(y), names=("A", "B", "C"))
    protocol = dataclasses.replace(QUICK, methods=("none", "ts", "no-such-method"))
    found = evaluate_split(protocol, z, "logits", y, groups, 0)
    assert "no-such-method" in found.reasons and found.metrics["failed.no-such-method"] == 1.0
    per = found.artefacts["groups.ts"]
    assert per.shape == (4, 3) and not np.isnan(per[3]).any()  # Mondrian on the cells
    assert found.metrics["worst_ece.ts"] == pytest.approx(np.nanmax(per[0]))
    assert found.metrics["nll.ts"] < found.metrics["nll.none"]  # the model is overconfident
    # the worst of three groups of ~300 rows: a calibrated model shows a few points of ECE
    assert 0.0 < found.metrics["worst_null.ts"] < found.metrics["worst_ece.ts"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    import os

    root = tmp_path_factory.mktemp("sets")
    subjects = np.array(["virology", "anatomy", "marketing", "college_chemistry"])
    write_folder_set(root / "mmlu_tiny", 0, n=320, c=4)
    for split in ("val", "test"):
        arrays = dict(np.load(root / "mmlu_tiny" / f"{split}.npz"))
        arrays["groups"] = subjects[np.arange(320) % 4]
        np.savez(root / "mmlu_tiny" / f"{split}.npz", **arrays)
    write_folder_set(root / "tiny_cifar10", 1, n=300, c=10)
    write_folder_set(root / "plain", 2, n=200, c=3)
    work = tmp_path_factory.mktemp("groups")
    small = dataclasses.replace(SETS, seeds=(0, 1, 2), n_draws=20, synthetic_rows=1500)
    before = os.environ.get(PREDICTIONS_ENV)
    saved = Groups.protocols["sets"]
    Groups.protocols["sets"] = small  # type: ignore[index]
    try:
        from selfcal.cli import main

        args = ["reproduce", "groups", "--sets", str(root), "--store", str(work / "s.sqlite")]
        code = main([*args, "--out", str(work / "report"), "--workers", "1"])
    finally:
        Groups.protocols["sets"] = saved  # type: ignore[index]
        if before is None:
            os.environ.pop(PREDICTIONS_ENV, None)
    return code, work


def test_the_sets_report_has_each_family_and_a_failed_set(report):
    code, work = report
    assert code == 2  # the set without groups failed, with its reason; the others ran
    text = (work / "report" / "README.md").read_text()
    assert "set 'plain' has no groups" in text
    for title in ("MMLU: the 57 subjects", "CIFAR-10: animal or vehicle", "Synthetic: three"):
        assert f"## {title}" in text
    assert "### Without the subjects MMLU-Redux flags" in text
    assert "| virology | 57 |" in text  # the subject table, with MMLU-Redux's count
    assert "| TS | " in text and "| SMS | " in text
    assert "The class order checked" in text
    made = json.loads((work / "report" / "provenance.json").read_text())
    assert made["protocol"] == "sets" and made["study"] == "groups"


def test_the_sets_report_pairs_every_method_with_ts(report):
    from selfcal.experiments import ResultsStore

    _, work = report
    with ResultsStore(work / "s.sqlite") as store:
        records = store.runs("groups")
    mmlu = [r for r in records if r.spec.dataset == "mmlu_tiny"]
    assert sorted(r.spec.seed for r in mmlu) == [0, 1, 2]
    clean = mmlu[0].metrics
    assert clean["clean.n_fit"] < clean["n_fit"]  # virology and college chemistry left out
    diffs = [r.metrics["nll.sms"] - r.metrics["nll.ts"] for r in mmlu]
    text = (work / "report" / "README.md").read_text()
    assert f"{np.mean(diffs):+.4f}" in text
