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
TAKES_GROUPS = {
    "group_ece",
    "worst_group_ece",
    "debiased_group_ece",
    "worst_group_debiased_ece",
    "multicalibration_error",
    "multicalibration_sigma",
}


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
        *TAKES_GROUPS,
    }


@pytest.mark.parametrize("f", ALL, ids=lambda f: f.__name__)
def test_declared_properties(f: Metric) -> None:
    """``takes_bins`` is declared where the metric is defined; it agrees with the core."""
    assert f.takes_bins == ("n_bins" in inspect.signature(f.core).parameters)
    assert f.higher_is_better == (f.__name__ in HIGHER_IS_BETTER)
    assert f.differentiable == (f.__name__ in DIFFERENTIABLE)
    assert f.takes_groups == (f.__name__ in TAKES_GROUPS)


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
    assert repr(f) == f"<metric {core.__module__}.{core.__name__}>"


@pytest.mark.parametrize("f", ALL, ids=lambda f: f.__name__)
def test_the_signature_is_the_public_face(f: Metric) -> None:
    """How the metric is called -- the scores by name, then the core's options -- not the
    core's ``(pred, weights=None, ...)``, which stays ``f.core``'s."""
    public = list(inspect.signature(f).parameters.values())
    options = list(inspect.signature(f.core).parameters.values())[2:]  # after pred, weights
    given = ["labels", "logits", "probs"] + (["groups"] if f.takes_groups else [])
    assert [p.name for p in public] == ["predictions", *given] + [p.name for p in options]
    assert public[0].kind is inspect.Parameter.POSITIONAL_ONLY
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in public[1:])
    assert [p.default for p in public[1 + len(given) :]] == [p.default for p in options]
    assert inspect.signature(f).return_annotation == "float | torch.Tensor"


def test_help_shows_how_it_is_called() -> None:
    text = pydoc.render_doc(M.ece, renderer=pydoc.plaintext)
    assert (
        "ece(predictions=None, /, *, labels=None, logits=None, probs=None, n_bins: 'int' = 15, "
        "norm: 'str' = 'l1') -> 'float | torch.Tensor'"
    ) in text
    assert "Expected calibration error with equal-width bins." in text


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"y_true": [0, 1]}, "'y_true' (did you mean labels=?)"),
        ({"labels": [0, 1], "nbins": 3}, "'nbins' (did you mean n_bins=?)"),
        ({"labels": [0, 1], "bins": 3}, "'bins' (did you mean n_bins=?)"),
        ({"labels": [0, 1], "weights": None}, "'weights';"),  # the core's, not an option
    ],
)
def test_an_unknown_keyword_is_named_with_the_accepted_ones(given, message) -> None:
    """Named before the input is read: ``ece(logits=z, y_true=y)`` is not "labels are
    required"."""
    z = np.array([[2.0, 0.0], [0.0, 1.0]])
    with pytest.raises(TypeError) as raised:
        M.ece(logits=z, **given)
    assert str(raised.value) == (
        f"ece() got an unexpected keyword argument {message.rstrip(';')}; it takes a "
        "Predictions object or logits=, probs=, labels=, n_bins=, norm="
    )
    with pytest.raises(TypeError, match="nll\\(\\) got an unexpected keyword argument 'n_bins'"):
        M.nll(logits=z, labels=[0, 1], n_bins=3)  # nll has no options at all


def test_bootstrap_ci_names_an_unknown_keyword_with_its_own() -> None:
    z, y = np.array([[2.0, 0.0], [0.0, 1.0]]), [0, 1]
    with pytest.raises(TypeError) as raised:
        M.bootstrap_ci(M.nll, logits=z, y_true=y)
    assert str(raised.value) == (
        "bootstrap_ci(nll, ...) got an unexpected keyword argument 'y_true' (did you mean "
        "labels=?); it takes a Predictions object or logits=, probs=, labels=, n_resamples=, "
        "confidence=, seed=, method=, resamples="
    )
    with pytest.raises(TypeError, match="'n_resample' \\(did you mean n_resamples=\\?\\)"):
        M.bootstrap_ci(M.ece, logits=z, labels=y, n_resample=10)
    interval = M.bootstrap_ci(M.ece, logits=z, labels=y, n_bins=5, n_resamples=10)
    assert interval.value == pytest.approx(M.ece(logits=z, labels=y, n_bins=5))


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
        M.ece(logits=z, labels=y, bins=3)  # an option the core does not take


def test_a_metric_is_never_bound_as_a_method() -> None:
    class Holder:
        score = M.accuracy

    z, y = np.array([[2.0, 0.0], [0.0, 1.0]]), np.array([0, 0])
    assert Holder().score(logits=z, labels=y) == 0.5
