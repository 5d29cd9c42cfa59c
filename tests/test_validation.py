"""The package's argument checks: one wording per rule, canonical return values."""

from __future__ import annotations

import math

import pytest
import torch

from selfcal._validation import (
    check_choice,
    check_fraction,
    check_hyper,
    check_int,
    check_nonnegative,
    check_optional_int,
    check_positive,
    check_real,
    interval,
)


def test_integers_exclude_bools_floats_and_values_below_the_minimum():
    assert check_int("n", 3) == 3
    assert check_int("seed", 0, minimum=0) == 0
    for bad in (True, 2.0, "3", None, 0):
        with pytest.raises(ValueError, match=r"^n must be an integer >= 1, got "):
            check_int("n", bad)
    assert check_optional_int("batch_size", None) is None
    with pytest.raises(ValueError, match=r"batch_size must be None or an integer >= 1, got 0"):
        check_optional_int("batch_size", 0)


def test_reals_are_finite_in_their_interval_and_returned_as_float():
    assert check_real("x", 2) == 2.0 and isinstance(check_real("x", 2), float)
    assert check_nonnegative("wd", 0) == 0.0
    assert check_fraction("coverage", 1) == 1.0
    for bad in (math.nan, math.inf, -math.inf, True, "1", torch.tensor(1.0)):
        with pytest.raises(ValueError, match=r"x must be a finite number in \(-inf, inf\)"):
            check_real("x", bad)
    with pytest.raises(ValueError, match=r"lr must be a finite number in \(0, inf\), got 0"):
        check_positive("lr", 0)
    with pytest.raises(ValueError, match=r"coverage must be a finite number in \(0, 1\], got 0"):
        check_fraction("coverage", 0)
    with pytest.raises(ValueError, match=r"m must be a finite number in \[0, 1\), got 1"):
        check_real("m", 1, 0.0, 1.0, high_open=True)


def test_interval_notation():
    assert interval(0.0, math.inf) == "[0, inf)"
    assert interval(0.0, 1.0, low_open=True) == "(0, 1]"
    assert interval(0.5, 2.5, high_open=True) == "[0.5, 2.5)"


def test_choices_and_hyperparameters():
    assert check_choice("norm", "l1", ("l1", "l2")) == "l1"
    with pytest.raises(ValueError, match=r"^norm must be one of l1, l2; got 'l3'$"):
        check_choice("norm", "l3", ("l1", "l2"))
    message = r"method must be one of ce, focal; got 'focl' \(did you mean 'focal'\?\)"
    with pytest.raises(ValueError, match=message):
        check_choice("method", "focl", ("ce", "focal"))
    check_hyper("lr", torch.tensor(-1.0))  # a traced value is not inspected
    with pytest.raises(ValueError, match="lr must be a number or a 0-d tensor"):
        check_hyper("lr", torch.ones(2))
    with pytest.raises(ValueError, match=r"beta must be a finite number in \[0, inf\)"):
        check_hyper("beta", -1.0, 0.0)
