"""The fixtures every test shares (the one conftest): one intra-op torch thread, and randomized
prediction sets covering the cases that break calibration code (binary, C = 100, ties,
confidences of exactly 0 and 1, empty bins, a single sample). Helpers shared by the tests of an
area live in ``tests/helpers/``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from helpers import training
from helpers.cases import N_CASES, make_case

import selfcal.studies
from selfcal.experiments import study as engine

selfcal.studies.import_all()  # the suite is a composition root: every study registered


@pytest.fixture(autouse=True, scope="session")
def single_thread():
    """One intra-op thread for the whole session, set before any fixture of any scope: the suite
    runs on two cores under ``pytest -n 2``, and two threads per worker on a loaded two-core
    machine made a small fit 4-10x slower. A computation compared with another is thus made
    with the same thread count (FFT-based metrics round differently with more threads); tests
    that compare thread counts set them themselves."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(params=range(N_CASES), ids=lambda s: f"case{s}")
def case(request) -> dict:
    return make_case(request.param)


@pytest.fixture(autouse=True)
def close_figures():
    """Close every matplotlib figure a test left open (only where pyplot was imported)."""
    yield
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close("all")


# ----------------------------------------------------------------------------- training
@pytest.fixture
def make_blobs():
    return training.blobs


@pytest.fixture
def make_xor():
    return training.xor_data


@pytest.fixture
def same_params():
    """``same_params(a, b)``: bit-identical parameters (modules or lists of tensors)."""
    return training.identical


# ----------------------------------------------------------------------------- studies
FIXTURES = Path(__file__).parent / "studies" / "fixtures"


@pytest.fixture
def tiny_study(monkeypatch):
    """``selfcal.studies`` with the fixtures folder on its path, its packages imported again
    (so the fixture study registers); undone after."""
    monkeypatch.setattr(selfcal.studies, "__path__", [*selfcal.studies.__path__, str(FIXTURES)])
    selfcal.studies.import_all()
    yield engine.get_study("tiny")
    engine._STUDIES._entries.pop("tiny", None)
    sys.modules.pop("selfcal.studies.tiny", None)
