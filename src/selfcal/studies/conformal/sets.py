"""One prediction set of the conformal study's ``sets`` protocol: every post-hoc step (no step,
TS, SMS, ``auto``) fitted on the set's validation split, then the conformal predictors of
:func:`~selfcal.studies.conformal.execute.conformalise` on random halvings of its test split
(the same halvings for every step, and for every set of as many test rows) -- and, for a set
with ``groups`` (e.g. the subject of each MMLU question), the coverage of each group under
the marginal predictor and under a group-conditional (Mondrian-by-group) one, whose
thresholds come from each group's own calibration rows."""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from selfcal.conformal import conformal_quantile, conformity_scores
from selfcal.conformal.scores import class_quantiles
from selfcal.exceptions import DegenerateCalibration
from selfcal.experiments import RunResult, RunSpec
from selfcal.io import PredictionSet
from selfcal.posthoc._compare_fits import fit_predict
from selfcal.studies._sets import set_artefacts, spec_set
from selfcal.studies.conformal.execute import (
    conformalise,
    halvings,
    key,
    test_probs,
    usable_levels,
)
from selfcal.studies.conformal.protocol import ConformalSetsProtocol

GROUPED = ("marginal", "mondrian")
"""The two predictors whose per-group coverage a set with groups reports: one threshold for
every row, or one per group."""


def evaluate_set(protocol: ConformalSetsProtocol, spec: RunSpec) -> RunResult:
    data = spec_set(spec)
    y = np.asarray(data.test_labels, dtype=np.int64)
    splits = halvings(len(y), protocol.halvings, spec.seed)
    alphas, too_few = levels(len(y), len(splits[0][0]), protocol.alphas)
    labels = torch.from_numpy(y)
    metrics: dict[str, float] = {
        "n_val": float(len(data.val_labels)),
        "n_test": float(len(y)),
        "n_classes": float(data.n_classes),
        "error": float(np.mean(np.argmax(data.test, 1) != y)),
    }
    artefacts: dict[str, np.ndarray] = {}
    groups = None
    if data.test_groups is not None:
        names, codes = np.unique(data.test_groups, return_inverse=True)
        groups = torch.from_numpy(codes.astype(np.int64))
        metrics["n_groups"] = float(len(names))
    reasons = dict(too_few)
    for posthoc in protocol.posthoc:
        found_probs, reasons[posthoc] = step_probs(data, posthoc)
        if found_probs is None:
            metrics[f"failed.{posthoc}"] = 1.0
            continue
        probs = torch.from_numpy(found_probs)
        for name in protocol.score_names:
            found = conformalise(probs, labels, splits, name, protocol.alphas)
            metrics.update({key(m, posthoc, name, a): v for (m, a), v in found.items()})
        if groups is None:
            continue
        for alpha in alphas:
            coverage, size = group_coverage(probs, labels, groups, splits, protocol, alpha)
            artefacts[f"group_coverage.{posthoc}.{alpha:g}"] = coverage
            for i, predictor in enumerate(GROUPED):
                metrics[key("worst_group_coverage", posthoc, predictor, alpha)] = float(
                    np.nanmin(coverage[i])
                )
                metrics[key("group_size", posthoc, predictor, alpha)] = size[i]
    failed = {step: reason for step, reason in reasons.items() if reason}
    return RunResult(metrics=metrics, artefacts={**artefacts, **set_artefacts(data, failed)})


LEVEL = "alpha "
"""The key prefix, in a run's reasons, of a level its calibration halves are too small for."""


def levels(
    n_test: int, n_calibration: int, alphas: tuple[float, ...]
) -> tuple[tuple[float, ...], dict[str, str]]:
    """The levels the set's calibration halves can give (:func:`usable_levels`), and why each
    other is left out (its reason, keyed ``alpha A``); a set that gives none is refused."""
    usable = usable_levels(n_calibration, alphas)
    halves = f"its {n_test} test rows give calibration halves of {n_calibration} rows"
    if not usable:
        raise ValueError(
            f"{halves}, too few for any level the study reports ({', '.join(map(format, alphas))}"
            "; a level alpha needs at least 1/alpha - 1 rows)"
        )
    return usable, {
        f"{LEVEL}{a:g}": f"{halves}; alpha = {a:g} needs at least {math.ceil(1 / a - 1)}"
        for a in alphas
        if a not in usable
    }


def step_probs(data: PredictionSet, posthoc: str) -> tuple[np.ndarray | None, str]:
    """The test split's probabilities after ``posthoc`` fitted on the validation split, and
    ``""``; or ``None`` and why it could not be fitted, as ``selfcal compare`` records a
    calibrator it cannot fit (:func:`selfcal.posthoc._compare_fits.fit_predict`: its
    ``ValueError``, or the rule of memory). A step that cannot be fitted loses its own
    numbers on the set, not the set's."""
    if posthoc == "none":
        return test_probs(data, posthoc), ""
    fitted = fit_predict(posthoc, data)  # its warnings (degenerate data) kept, not shown
    if fitted.probs is None:
        return None, fitted.error
    return np.asarray(fitted.probs, dtype=np.float64), ""


def group_coverage(
    probs: torch.Tensor,
    labels: torch.Tensor,
    groups: torch.Tensor,
    splits: list[tuple[np.ndarray, np.ndarray]],
    protocol: ConformalSetsProtocol,
    alpha: float,
) -> tuple[np.ndarray, list[float]]:
    """``(2, G)`` coverage of each group's scored rows (mean over the halvings; NaN for a group
    no halving scores) and the two mean set sizes, under the marginal predictor of
    ``protocol.group_score`` and under its Mondrian-by-group one (``+inf`` -- every label --
    for a group with too few calibration rows at ``alpha``)."""
    n_groups = int(groups.max()) + 1
    covered = torch.zeros(2, n_groups, dtype=torch.float64)
    seen = torch.zeros(2, n_groups, dtype=torch.float64)
    sizes = [0.0, 0.0]
    for r, (cal, scored) in enumerate(splits):
        generator = torch.Generator().manual_seed(r)
        every = conformity_scores(probs, score=protocol.group_score, generator=generator)
        cal_t, scored_t = torch.from_numpy(cal), torch.from_numpy(scored)
        cal_scores = every[cal_t].gather(1, labels[cal_t].unsqueeze(1)).squeeze(1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateCalibration)
            marginal = torch.tensor([conformal_quantile(cal_scores, alpha)], dtype=torch.float64)
            by_group = class_quantiles(cal_scores, groups[cal_t], n_groups, alpha)[0]
        for i, threshold in enumerate((marginal, by_group[groups[scored_t]].unsqueeze(1))):
            sets = every[scored_t] <= threshold
            hit = sets.gather(1, labels[scored_t].unsqueeze(1)).squeeze(1).double()
            covered[i].index_add_(0, groups[scored_t], hit)
            seen[i].index_add_(0, groups[scored_t], torch.ones_like(hit))
            sizes[i] += float(sets.sum(1).double().mean()) / len(splits)
    coverage = (covered / seen).numpy()
    return coverage, sizes
