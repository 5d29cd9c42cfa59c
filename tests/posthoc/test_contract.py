from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers.posthoc import make_logits

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
    c = 2 if name == "platt" else 4
    z, y = make_logits(11, 200, c)
    zt, _ = make_logits(12, 50, c)
    return z, y, zt


@pytest.mark.parametrize("name", calibrator_names())
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


@pytest.mark.parametrize("name", calibrator_names())
def test_predict_before_fit_fails_clearly(name):
    z, _, _ = data_for(name)
    with pytest.raises(NotFittedError, match="not fitted yet"):
        build_calibrator(name).predict_proba(logits=z)
    assert issubclass(NotFittedError, ValueError) and issubclass(NotFittedError, RuntimeError)


@pytest.mark.parametrize("name", calibrator_names())
def test_numpy_and_torch_agree(name):
    z, y, zt = data_for(name)
    a = build_calibrator(name).fit(logits=z, labels=y)
    b = build_calibrator(name).fit(logits=torch.from_numpy(z), labels=torch.from_numpy(y))
    out_np = a.predict_proba(logits=zt)
    out_t = b.predict_proba(logits=torch.from_numpy(zt))
    assert isinstance(out_np, np.ndarray) and isinstance(out_t, torch.Tensor)
    assert out_t.device == torch.device("cpu") and out_t.dtype == torch.float64
    np.testing.assert_allclose(out_t.numpy(), out_np, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", calibrator_names())
def test_calibrated_confidence_is_the_top_calibrated_probability(name):
    """``predict_confidence`` is the largest calibrated probability -- except top-label
    isotonic regression, whose confidence is its map of the model's own confidence, which the
    renormalised probability vector need not keep as its largest entry."""
    z, y, zt = data_for(name)
    fitted = build_calibrator(name).fit(logits=z, labels=y)
    confidence = fitted.predict_confidence(logits=zt)
    assert isinstance(confidence, np.ndarray) and confidence.shape == (len(zt),)
    assert ((0 <= confidence) & (confidence <= 1)).all()
    if name != "isotonic":
        np.testing.assert_array_equal(confidence, fitted.predict_proba(logits=zt).max(1))
    else:
        own = torch.softmax(torch.from_numpy(zt), 1).amax(1).numpy()
        np.testing.assert_allclose(
            confidence, np.interp(own, fitted.x_thresholds_, fitted.y_thresholds_)
        )


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
    cal = TemperatureScaling().fit(logits=z, labels=np.zeros(len(z), dtype=int))
    with pytest.raises(ValueError, match="fitted on 4 classes"):
        cal.predict_proba(logits=z[:, :3])
    with pytest.raises(ValueError, match="exactly one"):
        cal.predict_proba(logits=z, probs=z)


def test_registry_factories():
    assert calibrator_names() == (
        "bbq",
        "beta",
        "dirichlet",
        "ets",
        "histogram",
        "isotonic",
        "isotonic-ovr",
        "matrix",
        "platt",
        "ts",
        "ts-grid",
        "vector",
    )
    assert build_calibrator("ts-grid").method == "grid"
    assert type(build_calibrator("ts")) is TemperatureScaling
    assert build_calibrator("matrix", bias_l2=2.0).bias_l2 == 2.0
    with pytest.raises(ValueError, match="unknown calibrator 'magic'; known: bbq"):
        build_calibrator("magic")
    with pytest.raises(ValueError, match="bad arguments for calibrator 'ts'"):
        build_calibrator("ts", n_bins=3)
    with pytest.raises(ValueError, match="already registered"):
        register_calibrator("ts")(VectorScaling)


def test_calibrators_is_a_read_only_view_of_the_registry():
    assert sorted(CALIBRATORS) == list(calibrator_names())
    assert CALIBRATORS["ts"] is TemperatureScaling
    with pytest.raises(TypeError):
        CALIBRATORS["mine"] = VectorScaling  # type: ignore[index]
    assert "mine" not in calibrator_names()


@pytest.mark.parametrize("name", calibrator_names())
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
