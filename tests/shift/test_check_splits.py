"""selfcal.shift.check_splits: the level holds under exchangeable splits (by simulation), shifted
splits are flagged, the documented edge cases (absent classes, one class, tiny splits) behave as
stated, the inputs follow the library's contract and every bad input is a one-line error."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from scipy.stats import binom

from selfcal.predictions import Predictions
from selfcal.shift import SplitCheck, check_splits

C = 5
CLASS_SHARES = np.array([0.4, 0.25, 0.15, 0.12, 0.08])


def draw(rng: np.random.Generator, n: int, shares: np.ndarray = CLASS_SHARES, scale: float = 1.0):
    """``n`` rows: labels with ``shares``, logits whose top confidence depends on the class (so a
    label shift also moves the confidences a little) scaled by ``scale``."""
    y = rng.choice(len(shares), size=n, p=shares)
    z = rng.normal(size=(n, len(shares)))
    z[np.arange(n), y] += 1.0 + 0.3 * y
    return scale * z, y


def flag_bound(n: int, rate: float) -> int:
    """The flag count that ``n`` checks at true rate ``rate`` exceed with probability < 0.001."""
    return int(binom.ppf(0.999, n, rate))


# --------------------------------------------------------------------------- the level
@pytest.mark.parametrize("level", [0.2, 0.01])
def test_exchangeable_splits_are_flagged_at_most_at_the_level(level: float) -> None:
    """200 independent draws of exchangeable splits (iid rows, 180 / 120): the flag rate stays
    within the binomial 99.9% bound of ``level``, and each test's rejection rate within that
    of ``level / 2``. At 0.2 the check is sharp (expected 40 flags at most); at the default
    0.01 it guards against a gross excess."""
    rng = np.random.default_rng(1)
    checks = []
    for seed in range(200):
        zv, yv = draw(rng, 180)
        zt, yt = draw(rng, 120)
        checks.append(
            check_splits(
                val_logits=zv,
                val_labels=yv,
                test_logits=zt,
                test_labels=yt,
                level=level,
                resamples=999,
                seed=seed,
            )
        )
    assert sum(not c.exchangeable for c in checks) <= flag_bound(200, level)
    assert sum(c.labels_differ for c in checks) <= flag_bound(200, level / 2)
    assert sum(c.confidence_differs for c in checks) <= flag_bound(200, level / 2)


def test_ties_make_the_confidence_test_conservative_not_liberal() -> None:
    """Confidences on a coarse grid (many ties): the KS p-value is the continuous one, which
    ties can only make larger, so its rejection rate stays within the bound of its level."""
    rng = np.random.default_rng(2)
    rejected, tied = 0, []
    for _ in range(200):
        pv = rng.choice([0.5, 0.6, 0.7, 0.8, 0.9], size=150)
        pt = rng.choice([0.5, 0.6, 0.7, 0.8, 0.9], size=150)
        yv, yt = rng.integers(0, 2, 150), rng.integers(0, 2, 150)
        check = check_splits(
            val_probs=pv, val_labels=yv, test_probs=pt, test_labels=yt, level=0.2, resamples=99
        )
        rejected += check.confidence_differs
        tied.append(check.confidence_test.tied_rows)
    assert min(tied) == 295  # 300 rows, 5 distinct values
    assert rejected <= flag_bound(200, 0.1)


# --------------------------------------------------------------------------- power
def test_the_label_shift_of_issue_48_is_flagged() -> None:
    """Validation balanced over 10 classes; test 97% one class, 7 classes absent."""
    rng = np.random.default_rng(3)
    shares = np.full(10, 0.1)
    zv, yv = draw(rng, 1000, shares)
    skewed = np.zeros(10)
    skewed[[3, 5, 8]] = [0.97, 0.015, 0.015]
    zt, yt = draw(rng, 500, skewed)
    check = check_splits(val_logits=zv, val_labels=yv, test_logits=zt, test_labels=yt)
    assert not check.exchangeable and check.labels_differ
    assert check.label_test.exceedances == 0
    assert check.label_test.p_value == 1 / 10_000
    assert check.label_test.total_variation > 0.85
    assert check.label_test.largest_differences(1)[0].label == 3
    assert check.message.startswith("test labels")
    assert "total variation 0.8" in check.message and "p ≤ 0.0001" in check.message
    assert "class 3:" in check.message and "\n" not in check.message


def test_a_confidence_shift_with_the_same_labels_is_flagged_by_the_confidence_test() -> None:
    rng = np.random.default_rng(4)
    zv, yv = draw(rng, 600)
    zt, yt = draw(rng, 400, scale=3.0)  # the same label distribution, sharper scores
    check = check_splits(val_logits=zv, val_labels=yv, test_logits=zt, test_labels=yt)
    assert check.confidence_differs and not check.labels_differ
    assert check.message.startswith("test top confidence differs from validation: KS ")
    assert check.confidence_test.test_mean > check.confidence_test.val_mean


def test_both_shifts_are_named_in_one_line() -> None:
    rng = np.random.default_rng(5)
    zv, yv = draw(rng, 600)
    zt, yt = draw(rng, 400, np.array([0.05, 0.05, 0.1, 0.2, 0.6]), scale=3.0)
    message = check_splits(val_logits=zv, val_labels=yv, test_logits=zt, test_labels=yt).message
    assert message.startswith("test labels and top confidence differ from validation: ")
    assert "total variation" in message and "KS" in message and "\n" not in message


def test_unflagged_splits_say_so_with_both_numbers() -> None:
    rng = np.random.default_rng(6)
    zv, yv = draw(rng, 600)
    zt, yt = draw(rng, 400)
    check = check_splits(val_logits=zv, val_labels=yv, test_logits=zt, test_labels=yt)
    assert check.exchangeable
    assert check.message.startswith("no evidence that validation and test differ at level 0.01: ")
    assert "total variation" in check.message and "KS" in check.message


# --------------------------------------------------------------------------- edge cases
def test_a_class_absent_from_both_splits_changes_nothing_in_the_label_test() -> None:
    """Columns of classes no row has: the same total variation and the same draws (the urn
    holds the classes that occur), so the same p-value at the same seed."""
    rng = np.random.default_rng(7)
    zv, yv = draw(rng, 200)
    zt, yt = draw(rng, 150)
    pad = lambda z: np.hstack([z, np.full((len(z), 3), -8.0)])  # noqa: E731
    narrow = check_splits(val_logits=zv, val_labels=yv, test_logits=zt, test_labels=yt)
    wide = check_splits(val_logits=pad(zv), val_labels=yv, test_logits=pad(zt), test_labels=yt)
    assert wide.n_classes == C + 3
    assert wide.label_test.total_variation == narrow.label_test.total_variation
    assert wide.label_test.exceedances == narrow.label_test.exceedances
    assert wide.label_test.val_counts == (*narrow.label_test.val_counts, 0, 0, 0)


def test_one_class_in_every_row_gives_no_evidence() -> None:
    rng = np.random.default_rng(8)
    check = check_splits(
        val_logits=rng.normal(size=(30, 3)),
        val_labels=np.zeros(30, int),
        test_logits=rng.normal(size=(20, 3)),
        test_labels=np.zeros(20, int),
    )
    assert check.label_test.total_variation == 0.0 and check.label_test.p_value == 1.0


def test_five_rows_a_split_can_never_be_flagged_at_the_default_level() -> None:
    """The most extreme 5 + 5 split -- every label and every confidence apart -- has exact
    p-values 2 / C(10, 5) = 0.0079 > 0.005 in both tests (the docstring's statement)."""
    val = np.tile([0.9, 0.1], (5, 1)) - np.linspace(0, 0.01, 5)[:, None] * [1, -1]
    test = np.tile([0.1, 0.9], (5, 1)) - np.linspace(0.02, 0.03, 5)[:, None] * [1, -1]
    check = check_splits(
        val_probs=val, val_labels=np.zeros(5, int), test_probs=test, test_labels=np.ones(5, int)
    )
    assert check.exchangeable
    assert check.confidence_test.ks == 1.0
    assert check.confidence_test.p_value == pytest.approx(2 / 252)
    assert check.label_test.total_variation == 1.0
    sd = np.sqrt((2 / 252) * (1 - 2 / 252) / 9999)
    assert abs(check.label_test.p_value - 2 / 252) < 5 * sd


def test_two_classes_and_binary_columns() -> None:
    """Binary scores as one column (the library's contract) give the same check as two."""
    rng = np.random.default_rng(9)
    pv, pt = rng.random(80), rng.random(60)
    yv, yt = (rng.random(80) < pv).astype(int), (rng.random(60) < pt).astype(int)
    one = check_splits(val_probs=pv, val_labels=yv, test_probs=pt, test_labels=yt)
    two = check_splits(
        val_probs=np.stack([1 - pv, pv], 1),
        val_labels=yv,
        test_probs=np.stack([1 - pt, pt], 1),
        test_labels=yt,
    )
    assert one.to_dict() == two.to_dict()
    assert one.n_classes == 2


# --------------------------------------------------------------------------- inputs and result
def test_predictions_numpy_and_torch_inputs_give_the_same_check() -> None:
    rng = np.random.default_rng(10)
    zv, yv = draw(rng, 120)
    zt, yt = draw(rng, 90)
    by_arrays = check_splits(val_logits=zv, val_labels=yv, test_logits=zt, test_labels=yt)
    by_predictions = check_splits(Predictions.from_logits(zv, yv), Predictions.from_logits(zt, yt))
    by_tensors = check_splits(
        val_logits=torch.from_numpy(zv),
        val_labels=torch.from_numpy(yv),
        test=Predictions.from_logits(torch.from_numpy(zt), torch.from_numpy(yt)),
    )
    assert by_arrays.to_dict() == by_predictions.to_dict() == by_tensors.to_dict()


def test_labels_can_be_given_beside_a_predictions_object() -> None:
    rng = np.random.default_rng(11)
    zv, yv = draw(rng, 50)
    zt, yt = draw(rng, 40)
    given = check_splits(
        Predictions.from_logits(zv), Predictions.from_logits(zt), val_labels=yv, test_labels=yt
    )
    assert (
        given.to_dict()
        == check_splits(val_logits=zv, val_labels=yv, test_logits=zt, test_labels=yt).to_dict()
    )


def test_deterministic_given_the_seed() -> None:
    rng = np.random.default_rng(12)
    zv, yv = draw(rng, 100)
    zt, yt = draw(rng, 100, np.array([0.3, 0.3, 0.2, 0.1, 0.1]))
    run = lambda seed: check_splits(  # noqa: E731
        val_logits=zv, val_labels=yv, test_logits=zt, test_labels=yt, seed=seed
    )
    assert run(0).to_dict() == run(0).to_dict()
    assert run(0).label_test.exceedances != run(1).label_test.exceedances
    assert run(0).confidence_test == run(1).confidence_test


def test_the_result_is_frozen_readable_and_json_ready() -> None:
    rng = np.random.default_rng(13)
    zv, yv = draw(rng, 100)
    zt, yt = draw(rng, 80)
    check = check_splits(val_logits=zv, val_labels=yv, test_logits=zt, test_labels=yt)
    with pytest.raises(dataclasses.FrozenInstanceError):
        check.level = 0.5  # type: ignore[misc]
    assert repr(check).startswith("SplitCheck(exchangeable=True, level=0.01, n_val=100, n_test=80")
    assert "LabelTest(total_variation=" in repr(check)
    data = json.loads(json.dumps(check.to_dict()))
    assert data["exchangeable"] is True and data["labels"]["resamples"] == 9999
    assert data["labels"]["val_counts"] == list(check.label_test.val_counts)
    assert json.dumps(dataclasses.asdict(check))
    assert isinstance(check, SplitCheck)


def one_line_error(match: str, **kwargs) -> None:
    with pytest.raises(ValueError, match=match) as caught:
        check_splits(**kwargs)
    assert "\n" not in str(caught.value)


def test_bad_input_is_a_one_line_error_naming_the_problem() -> None:
    z, y = np.zeros((4, 3)), np.array([0, 1, 2, 0])
    test = {"test_logits": z, "test_labels": y}
    one_line_error("pass exactly one of val, val_logits", val_labels=y, **test)
    one_line_error("pass exactly one of val", val_logits=z, val_probs=z, val_labels=y, **test)
    one_line_error("val must be a selfcal Predictions object; pass arrays as val_logits", val=z)
    one_line_error("val has no labels", val_logits=z, **test)
    one_line_error(
        "test has no labels", val_logits=z, val_labels=y, test=Predictions.from_logits(z)
    )
    one_line_error("val: labels has length 3", val_logits=z, val_labels=y[:3], **test)
    one_line_error("val: labels must lie in", val_logits=z, val_labels=y + 1, **test)
    one_line_error("val: logits is empty", val_logits=np.zeros((0, 3)), val_labels=[], **test)
    one_line_error("val: probs must", val_probs=z + 2, val_labels=y, **test)
    one_line_error(
        "val scores 4 classes and test 3", val_logits=np.zeros((4, 4)), val_labels=y, **test
    )
    empty = Predictions.from_logits(z, y).subset(slice(0, 0))
    one_line_error("val is empty", val=empty, **test)
    valid = {"val_logits": z, "val_labels": y, **test}
    one_line_error(r"level must be a finite number in \(0, 1\)", level=0, **valid)
    one_line_error(r"level must be a finite number", level=1.0, **valid)
    one_line_error("resamples must be at least 199 at level 0.01", resamples=100, **valid)
    one_line_error("resamples must be an integer", resamples=True, **valid)
    one_line_error("seed must be an integer >= 0", seed=-1, **valid)


def test_one_row_a_split_is_accepted_and_gives_no_evidence() -> None:
    """Both possible tables of 1 + 1 rows are as extreme as the observed one: p = 1."""
    check = check_splits(val_probs=[0.3], val_labels=[0], test_probs=[0.9], test_labels=[1])
    assert check.label_test.total_variation == 1.0 and check.label_test.p_value == 1.0
    assert check.confidence_test.ks == 1.0 and check.exchangeable
