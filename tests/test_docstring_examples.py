"""The runnable examples in the docstrings of the public faces run and print what they say.

Each object's ``__doc__`` is run with :mod:`doctest` explicitly (a metric is an object, which
``doctest.testmod``'s finder would skip), so an example that drifts from the code fails here.
"""

from __future__ import annotations

import doctest

import pytest

from selfcal.bilevel import BO4SC, fit_meta
from selfcal.experiments import run_sweep
from selfcal.losses import uncertainty_weighted_ce

EXAMPLES = {
    "BO4SC": BO4SC,
    "fit_meta": fit_meta,
    "run_sweep": run_sweep,
    "uncertainty_weighted_ce": uncertainty_weighted_ce,
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_docstring_example_runs(name: str) -> None:
    obj = EXAMPLES[name]
    examples = doctest.DocTestParser().get_doctest(obj.__doc__ or "", {}, name, None, 0)
    assert examples.examples, f"{name} has no runnable example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    result = runner.run(examples)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {name} failed"
