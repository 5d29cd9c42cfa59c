from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers.calibrators import groupless_names
from helpers.posthoc import BINARY_ONLY, make_logits

from selfcal.exceptions import NotFittedError
from selfcal.posthoc import (
    CALIBRATORS,
    Calibrator,
    TemperatureScaling,
    VectorScaling,
    build_calibrator,
    calibrator_names,
    calibrator_summary,
    register_calibrator,
)


def data_for(name: str):
    c = 2 if name in BINARY_ONLY else 4
    z, y = make_logits(11, 200, c)
    zt, _ = make_logits(12, 50, c)
    return z, y, zt


@pytest.mark.parametrize("name", groupless_names())
def test_save_load_round_trip(name, tmp_path):
    z, y, zt = data_for(name)
    cal = build_calibrator(name).fit(logits=z, labels=y)
    path = tmp_path / f"{name}.json"
    cal.save(path)
    doc = json.loads(path.read_text())
    assert doc["class"] == type(cal).__name__ and doc["selfcal_version"]
    for loaded in (type(cal).load(path), Calibrator.load(path)):
        assert type(loaded) is type(cal) and loaded.get_params() == cal.get_params()
        np.testing.assert_array_equal(loaded.predict_proba(logits=zt), cal.predict_proba(logits=zt))


def test_loading_another_class_fails(tmp_path):
    z, y, _ = data_for("ts")
    path = tmp_path / "ts.json"
    TemperatureScaling().fit(logits=z, labels=y).save(path)
    expected = "holds a 'TemperatureScaling' calibrator, not a VectorScaling"
    with pytest.raises(ValueError, match=expected):
        VectorScaling.load(path)
    (tmp_path / "x.json").write_text('{"a": 1}')
    with pytest.raises(ValueError, match="not a selfcal calibrator"):
        Calibrator.load(tmp_path / "x.json")


@pytest.mark.parametrize("name", groupless_names())
def test_predict_before_fit_fails_clearly(name):
    """Using an unfitted calibrator raises selfcal's ``NotFittedError``, which scikit-learn's
    ``NotFittedError``, ``ValueError``, ``AttributeError`` and ``RuntimeError`` all catch."""
    from sklearn.exceptions import NotFittedError as SklearnNotFittedError

    z, _, _ = data_for(name)
    for caught in (NotFittedError, SklearnNotFittedError, ValueError, AttributeError, RuntimeError):
        with pytest.raises(caught, match="not fitted yet"):
            build_calibrator(name).predict_proba(logits=z)
    with pytest.raises(SklearnNotFittedError, match="not fitted yet"):
        build_calibrator(name).to_module()
    assert issubclass(NotFittedError, ValueError) and issubclass(NotFittedError, AttributeError)


NUMPY_PARAMS = {
    "histogram": {"n_bins": np.int64(15), "mix": np.float64(0.01)},
    "vector": {"max_iter": np.int64(50), "diagonal_l2": np.float32(1), "bias_l2": np.int64(2)},
    "matrix": {"max_iter": np.int64(50), "off_diagonal_l2": np.float32(0.5)},
    "beta": {"max_iter": np.int32(50), "smooth_targets": np.bool_(False)},
    "platt": {"smooth_targets": np.bool_(True)},
    "quadratic": {"smooth_targets": np.bool_(True)},
    "isotonic-ovr": {"mix": np.float32(0.25)},
}
"""Hyperparameters given as numpy scalars (what a grid from ``np.arange`` / ``np.logspace``
yields); every value is exact in float32."""


@pytest.mark.parametrize("name", sorted(NUMPY_PARAMS))
def test_numpy_scalar_hyperparameters_fit_and_save(name, tmp_path):
    """Numpy scalars are accepted as hyperparameters: the fit equals the one with the same
    Python numbers, and ``save`` / ``load`` round-trips it."""
    z, y, zt = data_for(name)
    numpy_params = NUMPY_PARAMS[name]
    python_params = {k: v.item() for k, v in numpy_params.items()}
    cal = build_calibrator(name, **numpy_params).fit(logits=z, labels=y)
    ref = build_calibrator(name, **python_params).fit(logits=z, labels=y)
    expected = ref.predict_proba(logits=zt)
    np.testing.assert_array_equal(cal.predict_proba(logits=zt), expected)
    cal.save(tmp_path / "cal.json")
    loaded = Calibrator.load(tmp_path / "cal.json")
    assert loaded.get_params() == ref.get_params()
    np.testing.assert_array_equal(loaded.predict_proba(logits=zt), expected)


def test_load_rejects_an_unknown_fitted_attribute(tmp_path):
    """A file whose ``fitted`` block holds a key the class does not set is refused (not set
    silently as an attribute)."""
    z, y, _ = data_for("ts")
    path = tmp_path / "ts.json"
    TemperatureScaling().fit(logits=z, labels=y).save(path)
    doc = json.loads(path.read_text())
    doc["fitted"]["scale_"] = 2.0
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="does not match the checksum selfcal wrote"):
        Calibrator.load(path)  # edited by hand: refused as such
    from selfcal.estimator.persistence import checksum

    doc["checksum"] = checksum(doc)  # re-signed: the schema still refuses it
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="TemperatureScaling has no fitted attribute 'scale_'"):
        Calibrator.load(path)
    with pytest.raises(ValueError, match="no fitted attribute 'scale_'"):
        TemperatureScaling.load(path)


@pytest.mark.parametrize("name", groupless_names())
def test_tensors_that_require_grad_are_detached(name):
    """``fit(logits=model(x))`` outside ``torch.no_grad()`` works for every calibrator and
    equals the fit on the same values without grad; the outputs carry no graph."""
    z, y, zt = data_for(name)
    c = z.shape[1]
    model = torch.nn.Linear(c, c, dtype=torch.float64)
    with torch.no_grad():
        model.weight.copy_(torch.eye(c))
        model.bias.zero_()
    logits, test = model(torch.from_numpy(z)), model(torch.from_numpy(zt))
    assert logits.requires_grad and test.requires_grad
    cal = build_calibrator(name).fit(logits=logits, labels=torch.from_numpy(y))
    ref = build_calibrator(name).fit(logits=z, labels=y)
    out, conf = cal.predict_proba(logits=test), cal.predict_confidence(logits=test)
    assert not out.requires_grad and not conf.requires_grad
    np.testing.assert_allclose(out.numpy(), ref.predict_proba(logits=zt), rtol=0, atol=1e-12)
    np.testing.assert_allclose(conf.numpy(), ref.predict_confidence(logits=zt), rtol=0, atol=1e-12)
    positional = build_calibrator(name, kind="logits").fit(logits, torch.from_numpy(y))
    assert not positional.predict_proba(test).requires_grad


@pytest.mark.parametrize("name", groupless_names())
def test_numpy_and_torch_agree(name):
    z, y, zt = data_for(name)
    a = build_calibrator(name).fit(logits=z, labels=y)
    b = build_calibrator(name).fit(logits=torch.from_numpy(z), labels=torch.from_numpy(y))
    out_np = a.predict_proba(logits=zt)
    out_t = b.predict_proba(logits=torch.from_numpy(zt))
    assert isinstance(out_np, np.ndarray) and isinstance(out_t, torch.Tensor)
    assert out_t.device == torch.device("cpu") and out_t.dtype == torch.float64
    np.testing.assert_allclose(out_t.numpy(), out_np, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", groupless_names())
def test_calibrated_confidence_is_the_top_calibrated_probability(name):
    """``predict_confidence`` is the largest calibrated probability -- except the top-label
    maps (isotonic regression, Venn-Abers), whose confidence is their map of the model's own
    confidence, which the renormalised probability vector need not keep as its largest
    entry."""
    z, y, zt = data_for(name)
    fitted = build_calibrator(name).fit(logits=z, labels=y)
    confidence = fitted.predict_confidence(logits=zt)
    assert isinstance(confidence, np.ndarray) and confidence.shape == (len(zt),)
    assert ((0 <= confidence) & (confidence <= 1)).all()
    if name == "venn-abers-top":  # its merged confidence, on the model's predicted class
        own = zt.argmax(1)
        probs = fitted.predict_proba(logits=zt)
        np.testing.assert_array_equal(confidence, probs[np.arange(len(zt)), own])
        low, high = fitted.predict_interval(logits=zt)
        assert (low <= confidence).all() and (confidence <= high).all()
    elif name != "isotonic":
        np.testing.assert_array_equal(confidence, fitted.predict_proba(logits=zt).max(1))
    else:
        own = torch.softmax(torch.from_numpy(zt), 1).amax(1).numpy()
        eps = fitted.mix_  # mixed with the uniform distribution as predict_proba is
        mapped = np.interp(own, fitted.x_thresholds_, fitted.y_thresholds_)
        np.testing.assert_allclose(confidence, (1 - eps) * mapped + eps / zt.shape[1])


MIXED = [name for name in groupless_names() if "mix" in build_calibrator(name).get_params()]


@pytest.mark.parametrize("name", groupless_names())
def test_the_public_pipeline_is_predict_proba_without_its_checks(name):
    """``calibrated`` / ``calibrated_confidence`` (floor, map, mix on validated predictions) are
    what ``predict_proba`` / ``predict_confidence`` return, bit for bit."""
    from selfcal.predictions import Predictions

    z, y, zt = data_for(name)
    cal = build_calibrator(name).fit(logits=z, labels=y)
    pred = Predictions.from_logits(torch.as_tensor(zt))
    np.testing.assert_array_equal(cal.calibrated(pred).numpy(), cal.predict_proba(logits=zt))
    np.testing.assert_array_equal(
        cal.calibrated_confidence(pred).numpy(), cal.predict_confidence(logits=zt)
    )


def test_warn_degenerate_warns_as_the_calibrator_with_the_remedy():
    from selfcal.exceptions import DegenerateCalibration

    with pytest.warns(DegenerateCalibration, match=r"^TemperatureScaling: the cause\. .+\.$"):
        TemperatureScaling().warn_degenerate("the cause")


def test_the_non_parametric_calibrators_and_ts_mix_are_mixed_by_default():
    """The isotonic, histogram and BBQ maps, top-label Venn-Abers and TS-mix mix by default
    (``mix="auto"``); temperature scaling offers ``mix`` and is un-mixed by default.
    (One-vs-rest Venn-Abers has no ``mix``: its merged probabilities never reach 0 or 1.)"""
    assert MIXED == [
        "bbq", "histogram", "isotonic", "isotonic-ovr", "ts", "ts-grid", "ts-mix", "venn-abers-top"
    ]  # fmt: skip
    default = [name for name in MIXED if build_calibrator(name).get_params()["mix"] == "auto"]
    assert default == ["bbq", "histogram", "isotonic", "isotonic-ovr", "ts-mix", "venn-abers-top"]


@pytest.mark.parametrize("c", [2, 4])
@pytest.mark.parametrize("name", MIXED)
def test_mix_auto_is_the_unmixed_map_mixed_with_uniform(name, c):
    """``mix="auto"``: ``predict_proba`` and ``predict_confidence`` are the ``mix=0`` outputs
    mixed with the uniform distribution, ``(1 - eps) q + eps / C`` with ``eps = 1/(n + 1)``;
    ``mix=0`` sets ``mix_ = 0`` and a number sets ``eps`` itself."""
    z, y = make_logits(13, 200, c)
    zt, _ = make_logits(14, 60, c, scale=5.0)
    mixed = build_calibrator(name, mix="auto").fit(logits=z, labels=y)
    plain = build_calibrator(name, mix=0).fit(logits=z, labels=y)
    eps = 1 / 201
    assert mixed.mix_ == eps and plain.mix_ == 0
    q = plain.predict_proba(logits=zt)
    np.testing.assert_allclose(
        mixed.predict_proba(logits=zt), (1 - eps) * q + eps / c, rtol=0, atol=1e-15
    )
    np.testing.assert_allclose(
        mixed.predict_confidence(logits=zt),
        (1 - eps) * plain.predict_confidence(logits=zt) + eps / c,
        rtol=0,
        atol=1e-15,
    )
    tenth = build_calibrator(name, mix=0.1).fit(logits=z, labels=y)
    assert tenth.mix_ == 0.1
    np.testing.assert_allclose(tenth.predict_proba(logits=zt), 0.9 * q + 0.1 / c, atol=1e-15)


@pytest.mark.parametrize("mix", [-0.1, 1.0, "none"])
def test_bad_mix_raises_in_fit(mix):
    """``mix`` must be ``"auto"`` or a number in ``[0, 1)``: checked by ``fit``."""
    z, y, _ = data_for("histogram")
    with pytest.raises(ValueError, match="mix"):
        build_calibrator("histogram", mix=mix).fit(logits=z, labels=y)


def test_bad_input_names_the_row():
    z, y, _ = data_for("ts")
    z[7, 2] = np.nan
    with pytest.raises(ValueError, match="row 7"):
        TemperatureScaling().fit(logits=z, labels=y)
    z, y, _ = data_for("ts")
    with pytest.raises(ValueError, match="shape"):
        TemperatureScaling().fit(logits=z[None], labels=y)
    y[3] = 9
    with pytest.raises(ValueError, match="row 3"):
        TemperatureScaling().fit(logits=z, labels=y)
    cal = TemperatureScaling().fit(logits=z, labels=np.arange(len(z)) % 4)
    with pytest.raises(ValueError, match="fitted on 4 classes"):
        cal.predict_proba(logits=z[:, :3])
    with pytest.raises(ValueError, match="exactly one"):
        cal.predict_proba(logits=z, probs=z)


def test_registry_factories():
    assert calibrator_names() == (
        "auto",
        "bbq",
        "beta",
        "dirichlet",
        "ets",
        "groupwise",
        "histogram",
        "isotonic",
        "isotonic-ovr",
        "matrix",
        "multicalibration",
        "none",
        "platt",
        "quadratic",
        "sms",
        "svs",
        "ts",
        "ts-grid",
        "ts-mix",
        "vector",
        "venn-abers",
        "venn-abers-top",
    )
    assert build_calibrator("ts-grid").method == "grid"
    assert type(build_calibrator("ts")) is TemperatureScaling
    assert build_calibrator("matrix", bias_l2=2.0).bias_l2 == 2.0
    with pytest.raises(ValueError, match="unknown calibrator 'magic'; known: auto, bbq"):
        build_calibrator("magic")
    with pytest.raises(ValueError, match="bad arguments for calibrator 'ts'"):
        build_calibrator("ts", n_bins=3)
    with pytest.raises(ValueError, match="already registered"):
        register_calibrator("ts")(VectorScaling)


def test_every_class_is_also_built_by_its_own_name_in_kebab_case():
    """One vocabulary: the papers' short names and the class names both build a calibrator;
    the aliases are never listed among the names (the CLI's help and choices stay short)."""
    from selfcal.posthoc import calibrator_aliases, calibrator_name
    from selfcal.posthoc.registry import kebab_case

    aliases = dict(calibrator_aliases())
    assert aliases["temperature-scaling"] == "ts"
    assert aliases["structured-matrix-scaling"] == "sms"
    assert aliases["one-vs-rest-isotonic"] == "isotonic-ovr"
    assert kebab_case("BBQ") == "bbq" and "bbq" not in aliases  # the same word: no alias
    for name, factory in CALIBRATORS.items():
        if isinstance(factory, type):
            spelled = kebab_case(factory.__name__)
            assert calibrator_name(spelled) == name
            assert type(build_calibrator(spelled)) is factory
    assert not set(aliases) & set(calibrator_names())
    with pytest.raises(ValueError, match="unknown calibrator 'temperature'"):
        calibrator_name("temperature")


def test_calibrators_is_a_read_only_view_of_the_registry():
    assert sorted(CALIBRATORS) == list(calibrator_names())
    assert CALIBRATORS["ts"] is TemperatureScaling
    with pytest.raises(TypeError):
        CALIBRATORS["mine"] = VectorScaling  # type: ignore[index]
    assert "mine" not in calibrator_names()


@pytest.mark.parametrize("name", groupless_names())
def test_every_calibrator_has_a_one_line_summary(name):
    summary = calibrator_summary(name)
    assert summary and "\n" not in summary and "``" not in summary
    cls = type(build_calibrator(name))
    assert summary.startswith(cls.__doc__.splitlines()[0].replace("``", "").rstrip("."))
    assert calibrator_summary("ts-grid").endswith("(method='grid').")


def test_import_does_not_import_sklearn():
    code = "import sys, selfcal.posthoc; print('sklearn' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
