"""Metrics are :class:`~selfcal.metrics.Metric` objects (:mod:`selfcal.metrics._api`): the
public face, the core, the declared properties and the core's identity."""

from __future__ import annotations

import inspect
import pydoc

import numpy as np
import pytest
import torch

import selfcal.metrics as M
import selfcal.recalibration as R
from selfcal.metrics._api import Metric, metric
from selfcal.predictions import Predictions

ALL = [getattr(M, name) for name in M.__all__ if isinstance(getattr(M, name), Metric)] + [
    R.refinement_loss,
    R.calibration_loss,
]
"""The metrics of :mod:`selfcal.metrics` and the two of :mod:`selfcal.recalibration`."""
HIGHER_IS_BETTER = {"accuracy", "accuracy_at_coverage", "coverage_at_accuracy"}
DIFFERENTIABLE = {"nll", "brier", "sece", "dece", "kde_ece", "smooth_ece"}


def test_every_public_metric_is_a_metric() -> None:
    names = {f.__name__ for f in ALL}
    assert names == {
        "accuracy",
        "error",
        "nll",
        "brier",
        "ece",
        "mce",
        "adaece",
        "classwise_ece",
        "debiased_ece",
        "aurc",
        "accuracy_at_coverage",
        "coverage_at_accuracy",
        "sece",
        "dece",
        "kde_ece",
        "smooth_ece",
        "refinement_loss",
        "calibration_loss",
    }


@pytest.mark.parametrize("f", ALL, ids=lambda f: f.__name__)
def test_declared_properties(f: Metric) -> None:
    """``takes_bins`` is declared where the metric is defined; it agrees with the core."""
    assert f.takes_bins == ("n_bins" in inspect.signature(f.core).parameters)
    assert f.higher_is_better == (f.__name__ in HIGHER_IS_BETTER)
    assert f.differentiable == (f.__name__ in DIFFERENTIABLE)


@pytest.mark.parametrize("f", ALL, ids=lambda f: f.__name__)
def test_the_metric_carries_its_core_identity(f: Metric) -> None:
    core = f.core
    assert f.__wrapped__ is core
    assert (f.__name__, f.__qualname__, f.__module__) == (
        core.__name__,
        core.__qualname__,
        core.__module__,
    )
    assert f.__doc__ == core.__doc__ and f.__doc__
    assert inspect.signature(f) == inspect.signature(core)
    assert repr(f) == f"<metric {core.__module__}.{core.__name__}>"


def test_help_reads_the_core() -> None:
    text = pydoc.render_doc(M.ece, renderer=pydoc.plaintext)
    assert "ece(pred: 'Predictions', weights: 'Weights' = None, *, n_bins: 'int' = 15" in text
    assert "Expected calibration error with equal-width bins." in text


def test_public_face_validates_once_and_returns_the_callers_form() -> None:
    calls: list[tuple[Predictions, object, dict[str, object]]] = []

    @metric(takes_bins=True)
    def fake(
        pred: Predictions, weights: torch.Tensor | None = None, **options: object
    ) -> torch.Tensor:
        """A fake core."""
        calls.append((pred, weights, options))
        return pred.correct.mean()

    z, y = np.array([[2.0, 0.0], [0.0, 1.0], [1.0, 0.0]]), np.array([0, 0, 0])
    value = fake(logits=z, labels=y, n_bins=4)
    assert isinstance(value, float) and value == pytest.approx(2 / 3)
    ((pred, weights, options),) = calls
    assert isinstance(pred, Predictions) and weights is None and options == {"n_bins": 4}
    tensor = fake(Predictions.from_logits(torch.from_numpy(z), torch.from_numpy(y)))
    assert isinstance(tensor, torch.Tensor) and tensor.dtype == torch.float64
    assert fake.takes_bins and not fake.differentiable and not fake.higher_is_better
    with pytest.raises(TypeError, match="bins"):
        M.ece(logits=z, labels=y, bins=3)  # options go to the core as they are


def test_a_metric_is_never_bound_as_a_method() -> None:
    class Holder:
        score = M.accuracy

    z, y = np.array([[2.0, 0.0], [0.0, 1.0]]), np.array([0, 0])
    assert Holder().score(logits=z, labels=y) == 0.5
