"""Groups read from files (:mod:`selfcal.io`): the ``groups`` array of a ``.npz`` (one label a
row, or a membership matrix with ``group_names``), ``NAME.groups.npy`` beside a pair, a
table's ``--groups`` columns, and a prediction set's splits; each problem one line naming the
file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from selfcal.io import load_prediction_set, load_predictions, read_arrays, read_inputs

N = 12
RNG = np.random.default_rng(0)
Z = RNG.normal(size=(N, 3))
Y = RNG.integers(0, 3, N)
SUBJECT = np.array(["law", "math", "virology"] * 4)


def write_table(path: Path, columns: dict[str, list]) -> Path:
    names = list(columns)
    rows = zip(*columns.values())
    text = ",".join(names) + "\n" + "\n".join(",".join(str(v) for v in r) for r in rows)
    path.write_text(text + "\n")
    return path


def table(**extra: list) -> dict[str, list]:
    scores = {f"logit_{j}": Z[:, j].tolist() for j in range(3)}
    return {**scores, "label": Y.tolist(), **extra}


def test_npz_groups_are_read_and_checked(tmp_path):
    np.savez(tmp_path / "a.npz", logits=Z, labels=Y, groups=SUBJECT)
    pred = load_predictions(tmp_path / "a.npz")
    assert pred.groups.names == ("law", "math", "virology")
    assert pred.groups.codes.tolist() == [0, 1, 2] * 4
    assert read_arrays(tmp_path / "a.npz")[0] == "logits"  # the 3-tuple reader is unchanged
    bad = SUBJECT.copy()
    bad[5] = ""
    np.savez(tmp_path / "b.npz", logits=Z, labels=Y, groups=bad)
    with pytest.raises(ValueError, match=r"b\.npz: groups has an empty group name in row 5$"):
        load_predictions(tmp_path / "b.npz")
    np.savez(tmp_path / "c.npz", logits=Z, labels=Y, groups=SUBJECT[:5])
    with pytest.raises(ValueError, match=r"c\.npz: groups has length 5; expected one group"):
        load_predictions(tmp_path / "c.npz")
    np.savez(tmp_path / "d.npz", logits=Z, labels=Y, groups=np.where(Y == 0, np.nan, 1.0))
    with pytest.raises(ValueError, match=r"d\.npz: groups must name a group in every row; row"):
        load_predictions(tmp_path / "d.npz")


def test_npz_membership_matrix_with_names(tmp_path):
    member = np.stack([SUBJECT == "law", np.arange(N) < 6], 1)
    np.savez(tmp_path / "a.npz", logits=Z, labels=Y, groups=member, group_names=["law", "early"])
    pred = load_predictions(tmp_path / "a.npz")
    assert pred.groups.overlapping and pred.groups.names == ("law", "early")
    assert pred.groups.sizes().tolist() == [4, 6]
    np.savez(tmp_path / "b.npz", logits=Z, labels=Y, groups=member, group_names=["law"])
    with pytest.raises(ValueError, match=r"'group_names' has shape \(1,\); 'groups' has 2"):
        load_predictions(tmp_path / "b.npz")
    np.savez(tmp_path / "c.npz", logits=Z, labels=Y, groups=SUBJECT, group_names=["x"])
    with pytest.raises(ValueError, match=r"'group_names' names the columns of a 2-D 'groups'"):
        load_predictions(tmp_path / "c.npz")
    np.savez(tmp_path / "d.npz", logits=Z, labels=Y, groups=member.astype(int))
    assert load_predictions(tmp_path / "d.npz").groups.names == ("0", "1")


def test_npy_pair_groups_beside_it(tmp_path):
    np.save(tmp_path / "run.logits.npy", Z)
    np.save(tmp_path / "run.labels.npy", Y)
    assert load_predictions(tmp_path / "run.logits.npy").groups is None
    np.save(tmp_path / "run.groups.npy", SUBJECT)
    assert load_predictions(tmp_path / "run.logits.npy").groups.n_groups == 3


def test_table_group_columns(tmp_path):
    path = write_table(tmp_path / "a.csv", table(subject=SUBJECT.tolist(), site=[1, 2] * 6))
    assert load_predictions(path).groups is None  # groups are named, never guessed
    one = load_predictions(path, group_columns=("subject",))
    assert one.groups.names == ("law", "math", "virology") and not one.groups.overlapping
    both = load_predictions(path, group_columns=("subject", "site"))
    assert both.groups.overlapping
    assert both.groups.names == (
        "subject=law",
        "subject=math",
        "subject=virology",
        "site=1",
        "site=2",
    )
    assert both.groups.sizes().tolist() == [4, 4, 4, 6, 6]
    # with --kind and unnamed score columns, the group columns are not scores
    plain = write_table(
        tmp_path / "b.csv",
        {"a": Z[:, 0].tolist(), "b": Z[:, 1].tolist(), "label": (Y % 2).tolist(), "g": [1, 2] * 6},
    )
    kind, scores, _, groups = read_inputs(plain, kind="logits", group_columns=("g",))
    assert scores.shape == (N, 2) and groups.tolist() == [1, 2] * 6


@pytest.mark.parametrize(
    "chosen, message",
    [
        (("nope",), r"a\.csv: no group column 'nope'; columns: logit_0, "),
        (("label",), r"a\.csv: group column 'label' is the label column$"),
        (("subject", "subject"), r"a\.csv: group column 'subject' is given twice$"),
        (("gap",), r"a\.csv: group column 'gap' has an empty group name in row 3$"),
        (("subject", "gap"), r"a\.csv: group column 'gap' has an empty group name"),
        (("hole",), r"'hole' must name a group in every row; row 3 has NaN \(a miss"),
    ],
)
def test_table_group_errors_are_one_line(tmp_path, chosen, message):
    gap = ["x", "y", "x", "", "y", "x"] * 2  # a missing text cell is an empty name
    hole = [1, 2, 1, "", 2, 1] * 2  # a missing number is NaN
    path = write_table(tmp_path / "a.csv", table(subject=SUBJECT.tolist(), gap=gap, hole=hole))
    with pytest.raises(ValueError, match=message) as caught:
        load_predictions(path, group_columns=chosen)
    assert "\n" not in str(caught.value)


def test_group_columns_are_for_tables_only(tmp_path):
    np.savez(tmp_path / "a.npz", logits=Z, labels=Y, groups=SUBJECT)
    with pytest.raises(ValueError, match=r"--groups names columns of a \.csv or \.parquet"):
        load_predictions(tmp_path / "a.npz", group_columns=("subject",))


def test_a_sets_splits_carry_their_groups(tmp_path):
    folder = tmp_path / "set"
    folder.mkdir()
    for split in ("val", "test"):
        np.savez(folder / f"{split}.npz", logits=Z, labels=Y, groups=SUBJECT)
    loaded = load_prediction_set(folder)
    assert loaded.predictions("test").groups.names == ("law", "math", "virology")
    bad = SUBJECT.copy()
    bad[2] = " "
    np.savez(folder / "test.npz", logits=Z, labels=Y, groups=bad)
    with pytest.raises(ValueError, match=r"test\.npz: groups has an empty group name in row 2$"):
        load_prediction_set(folder)
