"""The ``>>>`` examples in the post-hoc calibrators' docstrings run and print exactly what they
show (doctest)."""

from __future__ import annotations

import doctest

import pytest

from selfcal.posthoc import TemperatureScaling


@pytest.mark.parametrize("documented", [TemperatureScaling], ids=lambda obj: obj.__name__)
def test_docstring_examples_pass(documented):
    tests = doctest.DocTestFinder(recurse=False).find(documented)
    examples = [example for test in tests for example in test.examples]
    assert examples, f"{documented.__name__}'s docstring has no >>> example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted == len(examples)
    assert result.failed == 0
