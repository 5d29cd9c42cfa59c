"""The runnable examples in the docstrings of the public faces run and print what they say.

Each object's ``__doc__`` is parsed and run with :mod:`doctest` explicitly (a metric is an
object, which ``doctest.testmod``'s finder would skip), so an example that drifts from the code
fails here: ``ece``, ``TemperatureScaling``, ``BO4SC``, ``uncertainty_weighted_ce``,
``fit_meta`` and ``run_sweep`` (the faces a newcomer reads first), ``CalibrationAccumulator`` and
the streaming ``ECE`` of :mod:`selfcal.integrations.torchmetrics`, and the conformal
``conformity_scores``, ``conformal_quantile`` and ``conformal_summary``.
"""

from __future__ import annotations

import doctest

import pytest

from selfcal.bilevel import BO4SC, fit_meta
from selfcal.conformal import conformal_quantile, conformity_scores
from selfcal.experiments import run_sweep
from selfcal.integrations.torchmetrics import ECE
from selfcal.losses import uncertainty_weighted_ce
from selfcal.metrics import CalibrationAccumulator, conformal_summary, ece
from selfcal.posthoc import TemperatureScaling

EXAMPLES = {
    "ece": ece,
    "CalibrationAccumulator": CalibrationAccumulator,
    "TemperatureScaling": TemperatureScaling,
    "BO4SC": BO4SC,
    "uncertainty_weighted_ce": uncertainty_weighted_ce,
    "fit_meta": fit_meta,
    "run_sweep": run_sweep,
    "integrations.torchmetrics.ECE": ECE,
    "conformity_scores": conformity_scores,
    "conformal_quantile": conformal_quantile,
    "conformal_summary": conformal_summary,
}


def run_examples(name: str, docstring: str) -> doctest.TestResults:
    examples = doctest.DocTestParser().get_doctest(docstring, {}, name, None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    return runner.run(examples, out=lambda text: None)


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_docstring_example_runs(name: str) -> None:
    docstring = EXAMPLES[name].__doc__ or ""
    assert "doctest: +SKIP" not in docstring
    result = run_examples(name, docstring)
    assert result.attempted >= 2, f"{name} has no runnable example"
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {name} failed"


def test_a_wrong_expected_value_fails() -> None:
    """The runner really compares the printed values: a wrong one is a failure."""
    docstring = ece.__doc__ or ""
    wrong = docstring.replace("    0.4\n", "    0.5\n")
    assert wrong != docstring
    assert run_examples("ece", wrong).failed == 1
