"""The tiny study of ``fixtures/tiny`` joins the registry only inside the tests that ask for it
(:func:`tiny_study`), so the contract test's parametrisation sees the real studies only."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import selfcal.studies
from selfcal.experiments import study as engine

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def tiny_study(monkeypatch):
    """``selfcal.studies`` with the fixtures folder on its path, rediscovered; undone after."""
    monkeypatch.setattr(selfcal.studies, "__path__", [*selfcal.studies.__path__, str(FIXTURES)])
    monkeypatch.setattr(engine, "_discovered", False)
    yield engine.get_study("tiny")
    engine._STUDIES._entries.pop("tiny", None)
    sys.modules.pop("selfcal.studies.tiny", None)
