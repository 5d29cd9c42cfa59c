"""The one group rule (:func:`selfcal._inputs.as_groups`): groups enter once, beside the scores
and labels of :class:`~selfcal.Predictions`, as one label a row or overlapping membership
columns; every bad input is one line naming the problem and the row."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from selfcal import Predictions
from selfcal._inputs import Groups, as_groups
from selfcal.metrics import bootstrap_ci, ece, group_ece
from selfcal.predictions import as_predictions

Z = np.random.default_rng(0).normal(size=(6, 3))
Y = np.array([0, 1, 2, 0, 1, 2])


@pytest.mark.parametrize(
    "given, names, codes",
    [
        (["b", "a", "b", "c", "a", "a"], ("a", "b", "c"), [1, 0, 1, 2, 0, 0]),
        (np.array([3, 10, 3, 2, 2, 10]), ("2", "3", "10"), [1, 2, 1, 0, 0, 2]),  # numeric order
        (np.array([3.0, 10.0, 3.0, 2.0, 2.0, 10.0]), ("2", "3", "10"), [1, 2, 1, 0, 0, 2]),
        (torch.tensor([1, 0, 1, 0, 0, 1]), ("0", "1"), [1, 0, 1, 0, 0, 1]),
        (np.array([True, False, True, True, False, False]), ("False", "True"), [1, 0, 1, 1, 0, 0]),
        (np.array([b"x", b"y", b"x", b"x", b"y", b"y"]), ("x", "y"), [0, 1, 0, 0, 1, 1]),
        (np.array(["s", 1, "s", 1, 2.0, "s"], dtype=object), ("1", "2", "s"), [2, 0, 2, 0, 1, 2]),
    ],
)
def test_one_label_a_row(given, names, codes):
    groups = as_groups(given, 6)
    assert groups.names == names and not groups.overlapping
    assert groups.codes.tolist() == codes
    assert groups.sizes().tolist() == [codes.count(g) for g in range(len(names))]
    assert [r.tolist() for r in groups.rows()] == [
        [i for i, c in enumerate(codes) if c == g] for g in range(len(names))
    ]


def test_overlapping_membership_columns():
    mapping = {"old": [1, 0, 1, 0, 0, 1], "female": [True, True, False, False, False, True]}
    by_map = as_groups(mapping, 6)
    by_matrix = as_groups(np.array(list(mapping.values())).T, 6, names=["old", "female"])
    for groups in (by_map, by_matrix):
        assert groups.overlapping and groups.names == ("old", "female")
        assert [r.tolist() for r in groups.rows()] == [[0, 2, 5], [0, 1, 5]]
    assert as_groups(np.ones((6, 2)), 6).names == ("0", "1")
    empty = as_groups({"none": np.zeros(6), "all": np.ones(6)}, 6)
    assert empty.sizes().tolist() == [0, 6]  # a group without rows is kept, size 0


@pytest.mark.parametrize(
    "given, message",
    [
        (["a", "b", "a"], r"^groups has length 3; expected one group per row \(6\)$"),
        (["a", "b", None, "a", "b", "a"], r"^groups must name a group in every row; row 2 has No"),
        (
            [1.0, 2.0, 1.0, np.nan, 1.0, 2.0],
            r"^groups must name a group in every row; row 3 has NaN \(a missing group\)$",
        ),
        (
            np.array(["a", "b", "a", "a", np.nan, "b"], dtype=object),
            r"row 4 has NaN \(a missing group\)$",
        ),
        (["a", "b", "", "a", "b", "a"], r"^groups has an empty group name in row 2$"),
        (["a", "b", " ", "a", "b", "a"], r"^groups has an empty group name in row 2$"),
        ([1, 2, 1.5, 1, 2, 1], r"^groups must name a group in every row; row 2 has 1.5$"),
        (np.ones((6, 1, 1)), r"^groups must be 1-D .* or 2-D \(N, G\); got \(6, 1, 1\)$"),
        (np.ones((5, 2)), r"^groups has 5 rows; expected one per row \(6\)$"),
        (np.full((6, 2), 2), r"membership must be 0/1 or booleans; row 0, column 0 has 2$"),
        (np.array([[0, 1]] * 6, dtype=complex), r"must hold 0/1 or booleans$"),
        ({"a": np.ones(6), "": np.ones(6)}, r"membership column 1 has an empty group name$"),
        ({"a": np.ones(5)}, r"^groups\['a'\] must be one 0/1 membership value per row \(6\)"),
        ({}, r"^groups is an empty mapping"),
        (np.array([1 + 1j] * 6), r"must be strings or integers"),
    ],
)
def test_bad_groups_are_one_line(given, message):
    with pytest.raises(ValueError, match=message) as caught:
        as_groups(given, 6)
    assert "\n" not in str(caught.value)


def test_names_of_a_matrix_are_checked():
    with pytest.raises(ValueError, match="2 membership columns but 1 names"):
        as_groups(np.ones((6, 2)), 6, names=["a"])
    with pytest.raises(ValueError, match="the group name 'a' is given to two columns"):
        as_groups(np.ones((6, 2)), 6, names=["a", "a"])


def test_unseen_groups_are_named_and_coded_minus_one():
    fitted = ("a", "b")
    new = as_groups(["a", "c", "b", "c", "d", "a"], 6)
    assert new.unseen(fitted) == ("c", "d")
    assert new.codes_in(fitted).tolist() == [0, -1, 1, -1, -1, 0]
    assert as_groups(["a", "b"] * 3, 6).unseen(fitted) == ()


def test_predictions_carry_groups_through_every_view():
    pred = Predictions.from_logits(Z, Y, groups=["a", "b"] * 3)
    assert isinstance(pred.groups, Groups) and pred.groups.names == ("a", "b")
    assert pred.subset(torch.tensor([1, 3])).groups.codes.tolist() == [1, 1]
    assert pred.with_confidence(pred.confidence).groups is pred.groups
    assert Predictions.from_probs(pred.probs.numpy(), Y, ["a"] * 6).groups.names == ("a",)
    assert pred.with_groups(None).groups is None
    replaced = as_predictions(pred, groups=["x"] * 6)
    assert replaced.groups.names == ("x",) and replaced.labels is pred.labels
    with pytest.raises(ValueError, match="groups are required"):
        Predictions.from_logits(Z, Y).require_groups()
    with pytest.raises(ValueError, match="^groups has length 2"):
        Predictions.from_logits(Z, Y, groups=["a", "b"])


def test_only_group_metrics_take_groups():
    # a metric that does not read groups refuses them, rather than ignore them
    with pytest.raises(TypeError, match="unexpected keyword argument 'groups'"):
        ece(logits=Z, labels=Y, groups=["a"] * 6)
    # ... while predictions carrying groups give the marginal metric unchanged
    with_groups = Predictions.from_logits(Z, Y, ["a", "b"] * 3)
    assert ece(with_groups) == ece(Predictions.from_logits(Z, Y))
    assert "groups" in str(__import__("inspect").signature(group_ece))
    with pytest.raises(TypeError, match="unexpected keyword argument 'groups'"):
        bootstrap_ci(ece, logits=Z, labels=Y, groups=["a"] * 6, n_resamples=10)
