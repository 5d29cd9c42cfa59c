"""The calibrator contract (``tests/posthoc/test_contract.py``, ``test_estimator_api.py``) for
every registered calibrator that uses groups (``uses_groups``), fitted and predicting with
groups: required, numpy and torch alike, detached, cloned, saved and loaded exactly."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from helpers.posthoc import group_names, make_logits

from selfcal import Predictions
from selfcal.posthoc import Calibrator, TemperatureScaling, build_calibrator


def data(seed: int = 0, n: int = 600):
    z, y = make_logits(seed, n=n, c=4)
    groups = np.array(["north", "south", "east"])[np.random.default_rng(seed).integers(0, 3, n)]
    return z, y, groups


def fitted(name: str, **params):
    z, y, g = data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_calibrator(name, **params).fit(logits=z, labels=y, groups=g), z, g


@pytest.mark.parametrize("name", group_names())
def test_groups_are_required_to_fit_and_to_predict(name):
    z, y, g = data()
    with pytest.raises(ValueError, match="needs groups="):
        build_calibrator(name).fit(logits=z, labels=y)
    cal, z, g = fitted(name)
    with pytest.raises(ValueError, match="needs groups="):
        cal.predict_proba(logits=z)


@pytest.mark.parametrize("name", group_names())
def test_groups_carried_by_predictions_equal_groups_given(name):
    cal, z, g = fitted(name)
    given = cal.predict_proba(logits=z, groups=g)
    carried = cal.predict_proba(Predictions.from_logits(z, groups=g))
    np.testing.assert_array_equal(given, carried)
    z_, y, _ = data()
    again = build_calibrator(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again.fit(Predictions.from_logits(z_, y, g))
    np.testing.assert_array_equal(again.predict_proba(logits=z, groups=g), given)


@pytest.mark.parametrize("name", group_names())
def test_numpy_and_torch_agree_and_grad_is_detached(name):
    cal, z, g = fitted(name)
    p = cal.predict_proba(logits=z, groups=g)
    t = torch.tensor(z, requires_grad=True)
    out = cal.predict_proba(logits=t, groups=g)
    assert isinstance(out, torch.Tensor) and not out.requires_grad
    np.testing.assert_array_equal(out.numpy(), p)
    np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-12)
    conf = cal.predict_confidence(logits=z, groups=g)
    assert conf.shape == (len(z),) and np.all((conf > 0) & (conf <= 1))


@pytest.mark.parametrize("name", group_names())
def test_positional_fit_equals_keyword_fit(name):
    z, y, g = data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        by_name = build_calibrator(name).fit(logits=z, labels=y, groups=g)
        positional = build_calibrator(name, kind="logits").fit(z, y, groups=g)
    np.testing.assert_array_equal(
        positional.predict_proba(z, groups=g), by_name.predict_proba(logits=z, groups=g)
    )


@pytest.mark.parametrize("name", group_names())
def test_save_load_round_trip_is_exact(name, tmp_path):
    cal, z, g = fitted(name)
    path = tmp_path / f"{name}.json"
    cal.save(path)
    loaded = Calibrator.load(path)
    assert type(loaded) is type(cal) and loaded.get_params() == cal.get_params()
    for method in ("predict_proba", "predict_confidence"):
        expected = getattr(cal, method)(logits=z, groups=g)
        np.testing.assert_array_equal(getattr(loaded, method)(logits=z, groups=g), expected)
    again = tmp_path / "again.json"
    loaded.save(again)
    assert again.read_bytes() == path.read_bytes()


@pytest.mark.parametrize("name", group_names())
def test_clone_gives_an_unfitted_copy_with_equal_params(name):
    sklearn_base = pytest.importorskip("sklearn.base")
    cal, _, _ = fitted(name)
    copy = sklearn_base.clone(cal)
    assert type(copy) is type(cal) and copy.get_params() == cal.get_params()
    assert not hasattr(copy, "n_classes_")


def test_a_calibrator_without_groups_still_refuses_them():
    z, y, g = data()
    with pytest.raises(ValueError, match="TemperatureScaling does not use groups"):
        TemperatureScaling().fit(logits=z, labels=y, groups=g)
