"""``to_module()`` of every registered calibrator: a ``torch.nn.Module`` from scores to
calibrated logits whose softmax is ``predict_proba``, holding the fitted values as buffers,
exportable with ``torch.export`` and scriptable with ``torch.jit.script``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from helpers.posthoc import BINARY_ONLY, groupless_names, make_logits, softmax

from selfcal.posthoc import build_calibrator
from selfcal.posthoc._modules import MixtureModule

TABLES = {
    "histogram": {"bin_values": ("bin_values_", None, 0)},
    "isotonic": {
        "x_thresholds": ("x_thresholds_", None, 0),
        "y_thresholds": ("y_thresholds_", None, 0),
    },
    "isotonic-ovr": {
        "x_thresholds": ("x_thresholds_", "knot_counts_", 0),
        "y_thresholds": ("y_thresholds_", "knot_counts_", 0),
    },
    "bbq": {
        "cut_points": ("cut_points_", "table_sizes_", 0),
        "bin_values": ("bin_values_", "table_sizes_", 1),
    },
}
"""Binning and isotonic calibrators: module buffer -> (the fitted attribute it holds, the
attribute with its per-class lengths if the classes' tables are concatenated, extra entries
per class)."""

CASES = [
    (name, c) for name in groupless_names() for c in (2, 4) if name not in BINARY_ONLY or c == 2
]


def data_for(name: str, c: int = 4) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    c = 2 if name in BINARY_ONLY else c
    z, y = make_logits(31, 300, c)
    zt, _ = make_logits(32, 80, c, scale=5.0)  # beyond the validation range too
    return torch.from_numpy(z), torch.from_numpy(y), torch.from_numpy(zt)


@pytest.mark.parametrize(("name", "c"), CASES)
def test_softmax_of_the_module_is_predict_proba(name, c):
    z, y, zt = data_for(name, c)
    cal = build_calibrator(name, kind="logits").fit(z, y)
    module = cal.to_module()
    with torch.no_grad():
        out = module(zt)
    assert out.shape == zt.shape and out.dtype == torch.float64
    torch.testing.assert_close(
        torch.softmax(out, 1), cal.predict_proba(logits=zt), rtol=0, atol=1e-12
    )
    assert not list(module.parameters()) and not module.training


@pytest.mark.parametrize("name", groupless_names())
def test_probability_modules(name):
    """``kind="probs"``: the module takes probabilities, as ``predict_proba(probs=)`` does;
    a calibrator fitted on probabilities gives a logits module on request."""
    z, y, zt = data_for(name)
    p, pt = torch.softmax(z, 1), torch.softmax(zt, 1)
    cal = build_calibrator(name, kind="probs").fit(p, y)
    with torch.no_grad():
        from_probs = torch.softmax(cal.to_module()(pt), 1)
        from_logits = torch.softmax(cal.to_module(kind="logits")(zt), 1)
    torch.testing.assert_close(from_probs, cal.predict_proba(probs=pt), rtol=0, atol=1e-12)
    torch.testing.assert_close(from_logits, cal.predict_proba(logits=zt), rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_tables_are_buffers(name):
    """The fitted tables are buffers of the module; with the default ``mix`` it is a
    :class:`MixtureModule` holding ``eps`` (a buffer) around the un-mixed map's module, and
    with ``mix=0`` it is that module itself."""
    z, y, _ = data_for(name)
    cal = build_calibrator(name, kind="logits").fit(z, y)
    module = cal.to_module()
    assert isinstance(module, MixtureModule) and not isinstance(module.inner, MixtureModule)
    buffers = dict(module.named_buffers())
    assert buffers.pop("weight").item() == cal.mix_ > 0
    buffers = {key.removeprefix("inner."): value for key, value in buffers.items()}
    plain = build_calibrator(name, mix=0, kind="logits").fit(z, y).to_module()
    assert type(plain) is type(module.inner)
    for buffer, (attribute, lengths, extra) in TABLES[name].items():
        fitted = np.asarray(getattr(cal, attribute))
        held = buffers[buffer].numpy()
        if lengths is None:
            np.testing.assert_array_equal(held.reshape(fitted.shape), fitted)
            continue
        sizes = np.asarray(getattr(cal, lengths)) + extra
        assert held.shape == (len(sizes), sizes.max())
        segments = np.split(fitted, np.cumsum(sizes)[:-1])
        for row, segment in zip(held, segments):
            np.testing.assert_array_equal(row[: len(segment)], segment)


@pytest.mark.parametrize("name", groupless_names())
def test_module_exports_and_scripts(name):
    z, y, zt = data_for(name)
    cal = build_calibrator(name, kind="logits").fit(z, y)
    module = cal.to_module()
    with torch.no_grad():
        expected = module(zt)
        exported = torch.export.export(module, (zt,))
        torch.testing.assert_close(exported.module()(zt), expected, rtol=0, atol=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit is deprecated
            scripted = torch.jit.script(module)
        torch.testing.assert_close(scripted(zt), expected, rtol=0, atol=0)


@pytest.mark.parametrize("name", [n for n in groupless_names() if n not in TABLES])
def test_float32_module(name):
    """``module.float()`` computes in float32 (for the step and isotonic maps, float32
    rounding can move a score across a cut or onto a steep segment, so they are left out)."""
    z, y, zt = data_for(name)
    cal = build_calibrator(name, kind="logits").fit(z, y)
    module = cal.to_module().float()
    with torch.no_grad():
        out = torch.softmax(module(zt.float()), 1)
    assert out.dtype == torch.float32
    np.testing.assert_allclose(out.numpy(), cal.predict_proba(logits=zt.numpy()), atol=2e-4)


def test_mixture_module_in_float32():
    """``MixtureModule.float()`` computes in float32 (its ``eps`` buffer too) and matches
    ``log((1 - eps) softmax(inner) + eps / C)`` computed in float64 (the step maps are left
    out of the float32 test above, so a smooth inner map is mixed here)."""
    z, y, zt = data_for("ts")
    cal = build_calibrator("ts").fit(logits=z, labels=y)
    module = MixtureModule(cal.to_module(), 0.05).float()
    with torch.no_grad():
        out = module(zt.float())
        expected = torch.log(0.95 * torch.softmax(cal.to_module()(zt), 1) + 0.05 / 4)
    assert out.dtype == torch.float32 and module.weight.dtype == torch.float32
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=0, atol=1e-5)


def test_module_before_fit_fails():
    from selfcal.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        build_calibrator("ts").to_module()
    z, y, _ = data_for("ts")
    with pytest.raises(ValueError, match="kind must be one of"):
        build_calibrator("ts", kind="logits").fit(z, y).to_module(kind="log_probs")


def test_one_hot_probabilities_through_the_isotonic_module():
    """Exact zeros (``log 0 = -inf`` in the output) still give the right softmax."""
    z, y, _ = data_for("isotonic-ovr")
    cal = build_calibrator("isotonic-ovr", kind="probs").fit(softmax(z.numpy()), y.numpy())
    one_hot = torch.eye(4, dtype=torch.float64)
    with torch.no_grad():
        out = torch.softmax(cal.to_module()(one_hot), 1)
    torch.testing.assert_close(out, cal.predict_proba(probs=one_hot), rtol=0, atol=1e-12)
