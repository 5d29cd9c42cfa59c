"""The package's own namespace (``selfcal/__init__.py``): ``import selfcal`` imports no torch,
and every public name still imports the way it did, as the same object as in its module."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import selfcal
import selfcal.predictions


@pytest.mark.parametrize("name", [n for n in selfcal.__all__ if n != "__version__"])
def test_public_names_are_those_of_their_module(name):
    module = importlib.import_module(selfcal._LAZY[name])
    assert getattr(selfcal, name) is getattr(module, name)
    namespace: dict[str, object] = {}
    exec(f"from selfcal import {name}", namespace)
    assert namespace[name] is getattr(module, name)


def test_star_import_and_dir_give_every_public_name():
    namespace: dict[str, object] = {}
    exec("from selfcal import *", namespace)
    assert set(selfcal.__all__) <= set(namespace)
    assert set(selfcal.__all__) <= set(dir(selfcal))


def test_unknown_names_are_attribute_errors():
    with pytest.raises(AttributeError, match="no attribute 'Prediction'"):
        selfcal.Prediction  # noqa: B018
    with pytest.raises(ImportError):
        exec("from selfcal import Prediction", {})


def test_import_selfcal_imports_no_torch_until_a_public_name_is_used():
    code = (
        "import sys, selfcal\n"
        "print(selfcal.__version__, 'torch' in sys.modules, 'numpy' in sys.modules)\n"
        "from selfcal import Predictions\n"
        "print(Predictions.__module__, 'torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"{selfcal.__version__} False False",
        "selfcal.predictions True",
    ]


def test_the_everyday_api_is_one_import_away():
    """``import selfcal`` offers the metrics, every registered calibrator class and the
    conformal predictor; each public name is loaded lazily from the module ``_LAZY`` names."""
    assert set(selfcal.__all__) == {*selfcal._LAZY, "__version__"}
    for name in ("ece", "adaece", "classwise_ece", "nll", "brier", "bootstrap_ci", "evaluate"):
        assert name in selfcal.__all__
    from selfcal.posthoc import CALIBRATORS

    classes = {type(factory()).__name__ for factory in CALIBRATORS.values()}
    assert classes <= set(selfcal.__all__)
