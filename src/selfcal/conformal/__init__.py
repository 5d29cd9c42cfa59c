"""Split-conformal classification: prediction sets that hold the true label with probability
at least ``1 - alpha`` (methods §10).

:func:`conformity_scores` computes the non-conformity scores (:data:`SCORES`: LAC, APS, RAPS,
SAPS), :func:`conformal_quantile` the finite-sample threshold, and :class:`SplitConformal`
fits it on a calibration split (marginal or Mondrian, i.e. per class) and predicts sets as
an estimator with the post-hoc calibrators' contract; :class:`ConditionalConformal` covers at
``1 - alpha`` within each of possibly overlapping groups of rows (Gibbs, Cherian & Candès).
The metrics of sets (coverage, size, per-class coverage, bootstrap intervals) are in
:mod:`selfcal.metrics.conformal`.
"""

from selfcal.conformal.conditional import ConditionalConformal
from selfcal.conformal.scores import SCORES, conformal_quantile, conformity_scores
from selfcal.conformal.split import ConformalSetModule, SplitConformal

__all__ = [
    "SCORES",
    "ConditionalConformal",
    "ConformalSetModule",
    "SplitConformal",
    "conformal_quantile",
    "conformity_scores",
]
