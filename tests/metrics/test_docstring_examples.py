"""The runnable examples in the docstrings (``ece``, ``CalibrationAccumulator``) pass.

A :class:`~selfcal.metrics.Metric` is an object, not a function, so its ``__doc__`` is parsed
and run explicitly rather than left to a module-level doctest finder."""

from __future__ import annotations

import doctest

import pytest

from selfcal.metrics import CalibrationAccumulator, Metric, ece


def run_examples(name: str, docstring: str) -> doctest.TestResults:
    test = doctest.DocTestParser().get_doctest(docstring, {}, name, None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    return runner.summarize(verbose=False)


@pytest.mark.parametrize(
    "obj", [ece, CalibrationAccumulator], ids=["ece", "CalibrationAccumulator"]
)
def test_docstring_examples_pass(obj: Metric | type) -> None:
    assert obj.__doc__ is not None and "# doctest: +SKIP" not in obj.__doc__
    results = run_examples(obj.__name__, obj.__doc__)
    assert results.attempted >= 4
    assert results.failed == 0


def test_a_wrong_expected_value_fails() -> None:
    """The runner really checks the printed values (a wrong one is a failure)."""
    assert ece.__doc__ is not None
    wrong = ece.__doc__.replace("    0.4\n", "    0.5\n")
    assert wrong != ece.__doc__
    assert run_examples("ece", wrong).failed == 1
