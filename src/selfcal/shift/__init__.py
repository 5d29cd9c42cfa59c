"""Distribution shift between the splits a calibrator is fitted and judged on.

:func:`check_splits` tests whether a validation and a test split look exchangeable -- the
assumption behind every verdict that fits on one and judges on the other -- as far as labeled
predictions can show it: equal label frequencies (an exact permutation test of the total
variation distance) and equal distributions of the top-label confidence (two-sample
Kolmogorov--Smirnov), Bonferroni-combined at an overall ``level`` (default 0.01). It returns a
:class:`SplitCheck` whose ``exchangeable`` and ``message`` a report prints and whose
``to_dict()`` it stores. The tests are stated in :mod:`selfcal.shift.two_sample`, the level
and what the check cannot see in :mod:`selfcal.shift.splits`.

This package sits low (it imports :mod:`selfcal.predictions`, numpy and scipy only), so that
the command line, the comparison of calibrators and -- later -- label-shift adaptation can all
use it.
"""

from selfcal.shift.splits import LEVEL, RESAMPLES, SplitCheck, check_splits
from selfcal.shift.two_sample import ClassDifference, ConfidenceTest, LabelTest

__all__ = [
    "LEVEL",
    "RESAMPLES",
    "ClassDifference",
    "ConfidenceTest",
    "LabelTest",
    "SplitCheck",
    "check_splits",
]
