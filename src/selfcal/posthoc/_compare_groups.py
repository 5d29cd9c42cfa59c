"""Calibration per group in a comparison of calibrators (:func:`selfcal.posthoc.compare.comparison`
on a set with groups, e.g. the MMLU subject of each question).

Each calibrator is fitted on the validation split (on its groups too where it uses them:
:attr:`~selfcal.posthoc.Calibrator.uses_groups`) and its test probabilities are judged per
test group by :func:`selfcal.metrics.group_summary.group_evaluation` -- the function
``selfcal evaluate`` reports per group with, so the numbers of a row equal
:func:`selfcal.evaluation.evaluate_groups` on its calibrated probabilities with
``n_resamples`` :data:`GROUP_RESAMPLES` and ``n_draws`` :data:`GROUP_DRAWS` (the worst
group's ECE interval: with ``n_resamples`` the comparison's resamples). Per calibrator:

* each group's size, accuracy, NLL, ECE, the ECE a perfectly calibrated model shows at that
  size (``R =`` :data:`GROUP_DRAWS` seeded Bernoulli draws of correctness from the
  calibrated confidences: :mod:`selfcal.metrics.groups`), the excess over it and its p-value;
* the worst group by ECE, ``max_g ECE_g``, with a 95% bootstrap interval over the comparison's
  resamples of the test rows (:data:`selfcal.posthoc.compare.RESAMPLES`, the ones its scores
  use) and -- the same resamples for every calibrator -- a paired interval of its difference
  from temperature scaling's, ``max_g ECE_g(cal) - max_g ECE_g(TS)`` on each resample;
* the worst group by excess ECE, ``max_g (ECE_g - null_g)``, and the multicalibration error
  (:func:`~selfcal.metrics.multicalibration_error`), each with an interval over
  :data:`GROUP_RESAMPLES` resamples.

Cost: the excess's interval rescores every calibrated draw on every resample (``B R N``
work), so it and the multicalibration error get :data:`GROUP_RESAMPLES` resamples rather
than the comparison's 1,000; the worst ECE's interval costs ``B N`` and gets all of them. On
7,021 rows with 57 groups this is about 1 s of CPU (0.5 s on two cores) per calibrator:
``selfcal compare`` on the MMLU set with its 9 default calibrators went from about 4 s to 9 s.

What is not promised: a calibrator is fitted on all validation rows, so a group's numbers
say how the calibrated model does on that group's test rows, nothing about a fit per group
(that is what group-aware calibrators do); the maximum over many small groups is biased
upward by noise alone (read it beside the calibrated yardstick and the excess).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from selfcal.io import PredictionSet
from selfcal.metrics.bootstrap import Resamples, interval_bounds
from selfcal.metrics.group_summary import GroupEvaluation, group_evaluation
from selfcal.metrics.groups import N_DRAWS
from selfcal.predictions import Predictions

GROUP_RESAMPLES = 200
"""Bootstrap resamples of the test rows for the intervals of the worst excess ECE and the
multicalibration error (module docstring: their cost)."""
GROUP_DRAWS = N_DRAWS
"""Calibrated draws ``R`` of the per-group yardstick (as ``selfcal evaluate``)."""
WORST_PRINTED = (100.0, 1)
"""The worst group's ECE difference is printed in points to 1 decimal (a group's ECE on tens of
rows moves by points); its verdict is judged at that precision."""


def group_resamples(data: PredictionSet) -> Resamples | None:
    """The resamples of :data:`GROUP_RESAMPLES` shared by every calibrator of a set with groups
    (seed 0, as :func:`selfcal.evaluation.evaluate_groups`); ``None`` without groups."""
    if data.test_groups is None:
        return None
    return Resamples(len(data.test_labels), GROUP_RESAMPLES, 0)


def evaluate_row(
    probs: torch.Tensor,
    data: PredictionSet,
    resamples: Resamples,
    worst_resamples: Resamples,
    n_bins: int,
) -> GroupEvaluation:
    """One calibrator's test probabilities ``probs`` judged per test group of ``data``
    (module docstring)."""
    labels = torch.as_tensor(data.test_labels)
    pred = Predictions.from_probs(probs.double(), labels, data.test_groups)
    return group_evaluation(
        pred,
        resamples,
        n_bins=n_bins,
        n_draws=GROUP_DRAWS,
        draw_seed=0,
        worst_resamples=worst_resamples,
    )


@dataclass(frozen=True)
class Paired:
    """A difference from temperature scaling's with its paired 95% interval."""

    value: float
    low: float
    high: float

    @property
    def verdict(self) -> str:
        """``"better"`` / ``"worse"`` where the interval excludes 0 as printed
        (:data:`WORST_PRINTED`), else ``""``."""
        scale, digits = WORST_PRINTED
        low, high = (round(scale * bound, digits) for bound in (self.low, self.high))
        return "better" if high < 0 else "worse" if low > 0 else ""

    def text(self) -> str:
        """``+1.2 [+0.4, +2.1]`` in points."""
        scale, digits = WORST_PRINTED
        point, low, high = (scale * x for x in (self.value, self.low, self.high))
        return f"{point:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]"

    def to_dict(self) -> dict[str, object]:
        return {
            "value": self.value,
            "ci": [self.low, self.high],
            "verdict": self.verdict or "tied",
        }


@dataclass(frozen=True)
class GroupComparison:
    """Calibration per group of every calibrator fitted on a set with groups (module
    docstring): ``names`` and ``sizes`` of the test groups, ``evaluations`` (calibrator ->
    its :class:`~selfcal.metrics.group_summary.GroupEvaluation`, in the comparison's order),
    ``worst_minus_ts`` (calibrator -> its worst group's ECE minus TS's, paired; none without
    a TS row), the draws and resamples used."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    evaluations: dict[str, GroupEvaluation]
    worst_minus_ts: dict[str, Paired]
    n_draws: int = GROUP_DRAWS
    n_resamples: int = GROUP_RESAMPLES
    n_worst_resamples: int = 0

    def to_dict(self) -> dict[str, object]:
        """``groups`` of :meth:`selfcal.posthoc.compare.Comparison.to_dict`: the groups, the
        draws and resamples, and per calibrator every group's numbers
        (:meth:`~selfcal.metrics.group_summary.GroupEvaluation.to_dict`) with the worst
        group's ECE minus TS's."""
        calibrators: dict[str, object] = {}
        for name, found in self.evaluations.items():
            entry = found.to_dict()
            del entry["n_groups"], entry["n_draws"]
            if name in self.worst_minus_ts:
                entry["worst_group_ece"]["minus_ts"] = self.worst_minus_ts[name].to_dict()
            calibrators[name] = entry
        return {
            "n_groups": len(self.names),
            "groups": [{"name": n, "size": s} for n, s in zip(self.names, self.sizes)],
            "n_draws": self.n_draws,
            "n_resamples": self.n_resamples,
            "worst_group_ece_resamples": self.n_worst_resamples,
            "calibrators": calibrators,
        }


def compare_groups(
    evaluations: dict[str, GroupEvaluation], baseline: str = "ts"
) -> GroupComparison | None:
    """The calibrators' per-group evaluations with each worst-group ECE's paired difference
    from ``baseline``'s (centred 95% interval over the shared resamples); ``None`` where no
    calibrator was judged per group."""
    if not evaluations:
        return None
    first = next(iter(evaluations.values()))
    report = first.report
    base = evaluations.get(baseline)
    paired: dict[str, Paired] = {}
    if base is not None and base.worst_resampled is not None:
        for name, found in evaluations.items():
            if found.worst_resampled is None:
                continue
            point = found.worst_ece.value - base.worst_ece.value
            low, high = interval_bounds(
                found.worst_resampled - base.worst_resampled, torch.tensor(point), 0.95
            )
            paired[name] = Paired(point, float(low), float(high))
    return GroupComparison(
        report.names,
        tuple(int(s) for s in report.size),
        evaluations,
        paired,
        first.n_draws,
        first.multicalibration.n_resamples,
        first.worst_ece.n_resamples,
    )
