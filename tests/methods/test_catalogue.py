"""The method catalogue (:mod:`selfcal.methods.catalogue`): each method's criterion and the
``--grid`` overrides of its candidates."""

from __future__ import annotations

import pytest

from selfcal.methods import ALIASES, METHODS, VAL_BCE, get_method


def test_bo4sc_is_selected_by_its_own_objective_the_others_by_validation_ece():
    assert get_method("bo4sc").criterion == VAL_BCE
    assert {m.criterion.metric for name, m in METHODS.items() if name != "bo4sc"} == {"val_ece"}


def test_aliases_name_methods_of_the_catalogue():
    assert all(get_method(alias) is METHODS[name] for alias, name in ALIASES.items())
    with pytest.raises(ValueError, match="method"):
        get_method("no-such-method")


def test_grid_overrides_are_checked():
    with pytest.raises(ValueError, match="no hyperparameter 'beta'"):
        get_method("focal").with_grid({"beta": (1.0,)})
    with pytest.raises(ValueError, match="has no tuned hyperparameters"):
        get_method("ce").with_grid({"gamma": (1.0,)})
    bo4sc = get_method("bo4sc").with_grid({"weight_lr": (30.0, 300.0)})
    assert bo4sc.configs() == [
        {"beta": 10.0, "inner_steps": 10, "weight_lr": 30.0},
        {"beta": 10.0, "inner_steps": 10, "weight_lr": 300.0},
    ]
