"""The one label rule (:mod:`selfcal._inputs`): the same label array is valid or invalid the same
way at every boundary that reads labels, and a valid one becomes the same int64 labels."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from selfcal import Predictions
from selfcal._inputs import Labels, as_features, as_labels
from selfcal.bilevel import BO4SC
from selfcal.data.core import build_splits
from selfcal.losses import cross_entropy, focal_loss
from selfcal.models import MLP
from selfcal.plots.regions import check_labels
from selfcal.training import TrainConfig, fit, prepare_run

N, C = 6, 3
EXPECTED = [0, 1, 2, 0, 1, 2]

VALID = {
    "int64": np.array(EXPECTED, dtype=np.int64),
    "int32": np.array(EXPECTED, dtype=np.int32),
    "uint8": np.array(EXPECTED, dtype=np.uint8),
    "int64 tensor": torch.tensor(EXPECTED),
    "whole float64": np.array(EXPECTED, dtype=np.float64),
    "whole float32 tensor": torch.tensor(EXPECTED, dtype=torch.float32),
    "list": list(EXPECTED),
}
BOOL = np.array([0, 1, 1, 0, 1, 0], dtype=bool)
INVALID = {
    "2.5": np.array([0, 1, 2.5, 0, 1, 2]),
    "-1": np.array([0, 1, -1, 0, 1, 2]),
    "n_classes": np.array([0, 1, C, 0, 1, 2]),
    "wrong length": np.array(EXPECTED[:-1]),
    "2-D": np.array(EXPECTED)[:, None],
    "NaN": np.array([0, 1, np.nan, 0, 1, 2]),
    "inf": np.array([0, 1, np.inf, 0, 1, 2]),
    "complex": np.array(EXPECTED, dtype=np.complex128),
    "strings": np.array(["a", "b", "c", "a", "b", "c"]),
}
X = np.random.default_rng(0).normal(size=(N, 2))


def _predictions(y):
    return Predictions.from_logits(np.zeros((N, C)), y).labels


def _training_loop(y):
    torch.manual_seed(0)
    return prepare_run(MLP(2, C), (torch.as_tensor(X), y), config=TrainConfig(epochs=1)).train[1]


def _losses(y):
    logits = torch.zeros(N, C)
    cross_entropy(logits, torch.as_tensor(y) if not isinstance(y, torch.Tensor) else y)
    return as_labels(y, N, C).values  # what the loss was given, by the rule it checked


def _data_core(y):
    splits = build_splits(
        name="toy",
        x_raw=X,
        y=y,
        n_classes=C,
        sizes=(2, 2, 2),
        rng=np.random.default_rng(1),
        feature_names=["a", "b"],
        description="toy",
        seed=1,
    )
    return torch.cat([splits.split(s).y for s in ("train", "val", "test")])


def _plots(y):
    return torch.from_numpy(check_labels(y, N))


def _bo4sc(y):
    torch.manual_seed(0)
    x = torch.as_tensor(X, dtype=torch.float32)
    BO4SC(inner_steps=1, outer_iterations=1, seed=0).fit(MLP(2, C), (x, y), (x, y))
    return as_labels(y, N, C).values


BOUNDARIES = {
    "predictions": _predictions,
    "training loop": _training_loop,
    "losses": _losses,
    "data.core": _data_core,
    "plots.regions": _plots,
    "bilevel": _bo4sc,
}


def _as_tensor_input(boundary, y):
    """Losses and the training loop take tensors or arrays; losses take tensors only (a type
    contract of their own, the label *values* follow the one rule)."""
    if boundary == "losses" and not isinstance(y, torch.Tensor):
        arr = np.asarray(y)
        return torch.from_numpy(arr) if arr.dtype.kind in "biufc" else y
    return y


@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("case", VALID)
def test_valid_labels_are_valid_everywhere(boundary, case):
    y = _as_tensor_input(boundary, copy.deepcopy(VALID[case]))
    got = BOUNDARIES[boundary](y)
    assert got.dtype == torch.int64
    if boundary == "data.core":  # the splits reorder rows: compare the label counts
        assert sorted(got.tolist()) == sorted(EXPECTED)
    else:
        assert got.tolist() == EXPECTED


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_bool_labels_are_classes_0_and_1_everywhere(boundary):
    got = BOUNDARIES[boundary](_as_tensor_input(boundary, BOOL.copy()))
    assert sorted(got.tolist()) == sorted(BOOL.astype(int).tolist())


@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("case", INVALID)
def test_invalid_labels_are_invalid_everywhere(boundary, case):
    if boundary == "plots.regions" and case == "n_classes":
        pytest.skip("a region plot knows no class count: its labels lie in [0, inf)")
    if boundary == "losses" and case == "strings":
        pytest.skip("strings make no torch tensor, and the losses take tensors only")
    y = _as_tensor_input(boundary, INVALID[case])
    with pytest.raises(ValueError, match=r"labels|y must|y has length|integer"):
        BOUNDARIES[boundary](y)


@pytest.mark.parametrize(
    ("y", "message"),
    [
        ([0, 1, 2.5], r"^labels must be integers; row 2 has 2\.5$"),
        ([0, 1, float("nan")], r"^labels must be integers; row 2 has nan$"),
        ([0, 3, 1], r"^labels must lie in \[0, 3\); row 1 has label 3$"),
        ([0, -1, 1], r"^labels must lie in \[0, 3\); row 1 has label -1$"),
        ([0, 1], r"^labels has length 2; expected one label per row \(3\)$"),
        ([[0], [1], [2]], r"^labels must be 1-D, got shape \(3, 1\)$"),
        (torch.zeros(3, dtype=torch.complex64), r"^labels must be integers, got dtype"),
        (["a", "b", "c"], r"^labels must be integer class indices in \[0, C\), got class names"),
    ],
)
def test_one_line_errors(y, message):
    with pytest.raises(ValueError, match=message):
        as_labels(y, 3, 3)


def test_labels_are_int64_on_the_device_and_their_rows_stay_checked():
    labels = as_labels(np.array([2, 0, 1], dtype=np.uint8), 3, 3, device="cpu")
    assert isinstance(labels, Labels) and labels.values.dtype == torch.int64
    assert labels.n_classes == 3 and len(labels) == 3
    rows = labels[torch.tensor([0, 2])]
    assert isinstance(rows, Labels) and rows.values.tolist() == [2, 1] and rows.n_classes == 3
    assert as_labels(rows, 2, 5) is rows  # checked against fewer classes: trusted as it is
    with pytest.raises(ValueError, match=r"must lie in \[0, 2\)"):
        as_labels(rows, 2, 2)  # checked against 3 classes: scanned again for 2
    assert as_labels([5, 0], 2, None).values.tolist() == [5, 0]


def test_losses_read_no_value_of_checked_labels(monkeypatch):
    logits, y = torch.randn(6, 3), torch.tensor(EXPECTED)
    expected = focal_loss(logits, y, 2.0)
    checked = as_labels(y, 6, 3)
    monkeypatch.setattr(torch, "aminmax", lambda *a, **k: pytest.fail("labels scanned"))
    assert torch.equal(focal_loss(logits, checked, 2.0), expected)


def test_whole_float_labels_now_train_exactly_like_integer_labels():
    """Whole-valued float labels were refused by the training loop before; now accepted, they
    give the run of the same labels as integers, bit for bit."""
    x = torch.as_tensor(np.random.default_rng(1).normal(size=(40, 2)), dtype=torch.float32)
    y = torch.arange(40) % 3
    config = TrainConfig(epochs=2, batch_size=16, seed=0)
    torch.manual_seed(0)
    a = MLP(2, 3)
    b = copy.deepcopy(a)
    history_a = fit(a, (x, y), (x, y), config=config, loss_fn=focal_loss_2)
    history_b = fit(b, (x, y.double()), (x, y.float()), config=config, loss_fn=focal_loss_2)
    assert history_a.train_loss == history_b.train_loss and history_a.val_nll == history_b.val_nll
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)


def focal_loss_2(logits, labels):
    return focal_loss(logits, labels, 2.0)


def test_bool_and_whole_float_labels_now_build_the_same_splits():
    """``build_splits`` took numpy integer labels only; bools and whole floats are now the same
    classes, split the same way."""
    x = np.random.default_rng(2).normal(size=(30, 2))
    y = np.arange(30) % 2

    def build(labels):
        return build_splits(
            name="toy",
            x_raw=x,
            y=labels,
            n_classes=2,
            sizes=(10, 10, 10),
            rng=np.random.default_rng(3),
            feature_names=["a", "b"],
            description="toy",
            seed=1,
        )

    reference = build(y)
    for other in (build(y.astype(bool)), build(y.astype(float))):
        for s in ("train", "val", "test"):
            assert torch.equal(other.split(s).y, reference.split(s).y)
            assert torch.equal(other.split(s).x, reference.split(s).x)


def test_features_rule():
    assert as_features(np.zeros((2, 3)), "x", dtype=torch.float32).dtype == torch.float32
    assert as_features(torch.zeros(2, 3, dtype=torch.uint8), "x").dtype == torch.uint8
    with pytest.raises(ValueError, match=r"^x must have shape \(N, \.\.\.\) with N >= 1"):
        as_features(np.zeros((0, 3)), "x")
    with pytest.raises(ValueError, match=r"^x must have shape"):
        as_features(np.zeros(3), "x", min_ndim=2)
    with pytest.raises(ValueError, match=r"^x contains NaN or infinity$"):
        as_features(np.array([[1.0, np.nan]]), "x")
