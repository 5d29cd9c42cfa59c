"""The scikit-learn face of every registered calibrator: ``sklearn.base.clone``,
``get_params(deep=True)`` / ``set_params``, positional ``fit(X, y)`` and
``predict_proba(X)`` with the score kind fixed at construction."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
from helpers.calibrators import groupless_names
from helpers.posthoc import BINARY_ONLY, make_logits, softmax

from selfcal import Predictions
from selfcal.posthoc import TemperatureScaling, build_calibrator


def data_for(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    c = 2 if name in BINARY_ONLY else 4
    z, y = make_logits(21, 200, c)
    zt, _ = make_logits(22, 40, c)
    return z, y, zt


@pytest.mark.parametrize("name", groupless_names())
def test_clone_gives_an_unfitted_copy_with_equal_params(name):
    from sklearn.base import clone

    z, y, _ = data_for(name)
    fitted = build_calibrator(name, kind="logits").fit(z, y)
    copy = clone(fitted)
    assert type(copy) is type(fitted) and copy is not fitted
    assert copy.get_params() == fitted.get_params() and copy.kind == "logits"
    assert not any(hasattr(copy, a) for a in ("n_classes_", *fitted._fitted_attributes))
    copy.fit(z, y)  # and it fits like the original
    np.testing.assert_array_equal(copy.predict_proba(z), fitted.predict_proba(z))


@pytest.mark.parametrize("name", groupless_names())
def test_params_are_the_constructor_arguments(name):
    cal = build_calibrator(name)
    signature = inspect.signature(type(cal).__init__)
    names = [p for p in signature.parameters if p != "self"]
    assert list(cal.get_params(deep=True)) == names
    assert cal.get_params(deep=False) == cal.get_params(deep=True)
    assert names[-1] == "kind" and cal.kind is None  # selfcal never guesses a kind
    assert cal.set_params(kind="probs") is cal and cal.kind == "probs"
    with pytest.raises(ValueError, match="has no hyperparameter 'n_neighbours'; valid: "):
        cal.set_params(n_neighbours=3)


DEFAULTS = {
    "auto": {
        "candidates": None,
        "criterion": "nll",
        "selection": "first",
        "n_folds": "auto",
        "seed": 0,
    },
    "none": {},
    "bbq": {"mix": "auto"},
    "beta": {"smooth_targets": True, "max_iter": 100},
    "dirichlet": {"off_diagonal_l2": 1.0, "diagonal_l2": 1.0, "bias_l2": 1.0, "max_iter": 100},
    "ets": {"loss": "mse"},
    "histogram": {"n_bins": 15, "mix": "auto"},
    "isotonic": {"mix": "auto"},
    "isotonic-ovr": {"mix": "auto"},
    "matrix": {"off_diagonal_l2": 1.0, "diagonal_l2": 1.0, "bias_l2": 1.0, "max_iter": 100},
    "platt": {"smooth_targets": True},
    "quadratic": {"smooth_targets": True},
    "sms": {
        "ts_mix": "auto",
        "off_diagonal_l2": 1.0,
        "diagonal_l2": 1.0,
        "bias_l2": 1.0,
        "max_iter": 100,
    },
    "svs": {"ts_mix": "auto", "diagonal_l2": 1.0, "bias_l2": 1.0, "max_iter": 100},
    "ts": {"method": "nll", "criterion": "ece", "mix": 0.0},
    "ts-grid": {"method": "grid", "criterion": "ece", "mix": 0.0},
    "ts-mix": {"method": "nll", "criterion": "ece", "mix": "auto"},
    "vector": {"diagonal_l2": 1.0, "bias_l2": 1.0, "max_iter": 100},
    "venn-abers": {"folds": 1, "merge": "log", "seed": 0},
    "venn-abers-top": {"folds": 1, "merge": "log", "seed": 0, "mix": "auto"},
}


@pytest.mark.parametrize("name", groupless_names())
def test_default_params(name):
    """The defaults, pinned: ``kind=None`` (never guessed), smoothed targets for Platt and
    beta, ``mix="auto"`` for the non-parametric maps, unit ridge strengths for the
    structured fits."""
    assert build_calibrator(name).get_params() == {**DEFAULTS[name], "kind": None}


@pytest.mark.parametrize("name", groupless_names())
def test_positional_fit_equals_keyword_fit(name):
    z, y, zt = data_for(name)
    keyword = build_calibrator(name).fit(logits=z, labels=y)
    positional = build_calibrator(name, kind="logits").fit(z, y)
    np.testing.assert_array_equal(positional.predict_proba(zt), keyword.predict_proba(logits=zt))
    np.testing.assert_array_equal(
        positional.predict_confidence(zt), keyword.predict_confidence(logits=zt)
    )
    # validated predictions say their own kind: no kind needed at construction
    validated = build_calibrator(name).fit(Predictions.from_logits(z, y))
    test = Predictions.from_logits(zt)
    np.testing.assert_array_equal(validated.predict_proba(test), keyword.predict_proba(logits=zt))
    np.testing.assert_array_equal(
        validated.predict_confidence(test), keyword.predict_confidence(logits=zt)
    )


@pytest.mark.parametrize("name", groupless_names())
def test_positional_scores_without_kind_raise(name):
    """Without ``kind`` a positional score array is a ``ValueError`` in ``fit`` and in
    ``predict_proba`` (selfcal never guesses); when the scores are probabilities, the
    message names that evidence, and for logits it does not."""
    z, y, zt = data_for(name)
    with pytest.raises(ValueError, match="got scores positionally but no kind") as logits_error:
        build_calibrator(name).fit(z, y)
    assert "look like probabilities" not in str(logits_error.value)
    with pytest.raises(ValueError, match="look like probabilities: every row lies in"):
        build_calibrator(name).fit(softmax(z), y)
    fitted = build_calibrator(name).fit(logits=z, labels=y)
    with pytest.raises(ValueError, match="got scores positionally but no kind"):
        fitted.predict_proba(zt)
    with pytest.raises(ValueError, match="look like probabilities"):
        fitted.predict_confidence(softmax(zt))


@pytest.mark.parametrize("name", groupless_names())
def test_kind_probs_reads_positional_probabilities(name):
    z, y, zt = data_for(name)
    p, pt = softmax(z), softmax(zt)
    keyword = build_calibrator(name).fit(probs=p, labels=y)
    positional = build_calibrator(name, kind="probs").fit(p, y)
    np.testing.assert_array_equal(positional.predict_proba(pt), keyword.predict_proba(probs=pt))
    out = positional.predict_proba(torch.from_numpy(pt))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float64


def test_scores_and_labels_given_twice_raise():
    z, y, _ = data_for("ts")
    with pytest.raises(ValueError, match="pass the scores once"):
        TemperatureScaling(kind="logits").fit(z, y, logits=z)
    with pytest.raises(ValueError, match="pass the labels once"):
        TemperatureScaling(kind="logits").fit(z, y, labels=y)
    with pytest.raises(ValueError, match="labels are required"):
        TemperatureScaling(kind="logits").fit(z)
    with pytest.raises(ValueError, match="kind must be one of"):
        TemperatureScaling(kind="scores").fit(z, y)


def test_grid_search_over_a_calibrator():
    """A scikit-learn meta-estimator drives a calibrator through clone / set_params / fit:
    pick ``off_diagonal_l2`` of matrix scaling by the held-out log-loss."""
    from sklearn.model_selection import GridSearchCV, KFold

    z, y = make_logits(23, 300, 3)
    search = GridSearchCV(
        build_calibrator("matrix", kind="logits"),
        {"off_diagonal_l2": [0.01, 1.0, 100.0]},
        scoring=lambda est, x, t: (
            -float(-np.mean(np.log(est.predict_proba(x)[np.arange(len(t)), t])))
        ),
        cv=KFold(3),
    )
    search.fit(z, y)
    assert search.best_params_["off_diagonal_l2"] in (0.01, 1.0, 100.0)
    assert search.best_estimator_.weight_.shape == (3, 3)


def test_score_is_the_mean_log_likelihood_so_grid_search_needs_no_scoring():
    from sklearn.model_selection import GridSearchCV

    from selfcal.metrics import nll
    from selfcal.posthoc import DirichletCalibration, TemperatureScaling

    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 600)
    z = 3 * rng.normal(size=(600, 3)) + 2 * np.eye(3)[y]
    cal = TemperatureScaling(kind="logits").fit(z, y)
    expected = -float(nll(probs=cal.predict_proba(z), labels=y))
    assert cal.score(z, y) == expected == cal.score(logits=z, labels=y)
    grid = {"off_diagonal_l2": [0.1, 10.0]}
    search = GridSearchCV(DirichletCalibration(kind="logits"), grid, cv=3).fit(z, y)
    assert search.best_score_ < 0 and search.best_params_["off_diagonal_l2"] in (0.1, 10.0)


def test_repr_shows_the_parameters_that_differ_from_their_defaults():
    """As scikit-learn prints estimators: temperature scaling's ``criterion`` (used only by
    ``method="grid"``) is not shown for the default NLL fit, and every repr rebuilds an
    estimator with the same parameters."""
    from selfcal.posthoc import CALIBRATORS, DirichletCalibration, TemperatureScaling

    assert repr(TemperatureScaling()) == "TemperatureScaling()"
    assert repr(TemperatureScaling(method="grid", criterion="nll")) == (
        "TemperatureScaling(method='grid', criterion='nll')"
    )
    assert repr(DirichletCalibration(off_diagonal_l2=10.0)) == (
        "DirichletCalibration(off_diagonal_l2=10.0)"
    )
    import selfcal.posthoc as namespace

    for factory in CALIBRATORS.values():
        cal = factory()
        again = eval(repr(cal), vars(namespace))
        assert type(again) is type(cal) and again.get_params() == cal.get_params()
