"""Hyperparameters are declared once, by each estimator's constructor signature, and checked
through the one mapping ``_parameters`` (:class:`~selfcal.estimator.ScoreEstimator`)."""

from __future__ import annotations

import inspect

import pytest

from selfcal.conformal import SplitConformal
from selfcal.estimator import ScoreEstimator, hyperparameter_names
from selfcal.estimator.persistence import subclasses
from selfcal.posthoc import Calibrator

ESTIMATORS = [c for c in subclasses(ScoreEstimator) if not c.__dict__.get("_abstract", False)]


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_the_signature_declares_the_hyperparameters(cls):
    signature = inspect.signature(cls.__init__).parameters
    positional = [n for n, p in signature.items() if p.kind is p.POSITIONAL_OR_KEYWORD]
    own = tuple(n for n in positional if n not in ("self", "kind"))
    assert hyperparameter_names(cls) == (*own, "kind")
    assert list(cls().get_params()) == list(hyperparameter_names(cls))


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_every_hyperparameter_has_a_check(cls):
    names = set(hyperparameter_names(cls)) - {"kind"}
    assert names <= set(cls._checks()), sorted(names - set(cls._checks()))


def test_a_family_base_declares_a_shared_check_once():
    """``mix`` is checked by :class:`Calibrator`'s entry for every calibrator that has it."""
    assert "mix" in vars(Calibrator)["_parameters"]
    mixed = [c for c in ESTIMATORS if "mix" in hyperparameter_names(c)]
    assert mixed and all("mix" not in vars(c).get("_parameters", {}) for c in mixed)


def test_keyword_only_aliases_are_not_hyperparameters():
    assert "score" not in hyperparameter_names(SplitConformal)
    assert hyperparameter_names(SplitConformal)[:2] == ("alpha", "nonconformity")
