"""One re-split of one set: every method fitted on one half of the rows and measured on the
other, per group.

**The split.** A set's validation and test rows are pooled and split at random in halves by
the conformal study's convention (:func:`~selfcal.studies.conformal.execute.halvings`, seeded
by the run's seed: re-split ``r`` is seed ``r``, the same for every method, so the comparisons
are paired split by split). The first half fits each method (with its groups, for a method
that uses them); the second half measures it:

* marginal NLL, ECE (``n_bins`` equal-width bins, top label) and accuracy;
* per group ``g`` its ECE, ``ECE_g``, and beside it ``null_g``, the mean ECE that a perfectly
  calibrated model shows at that group's size (:func:`selfcal.metrics.groups.
  group_calibration`: ``n_draws`` draws of correctness from the calibrated confidences); the
  worst group's ``max_g ECE_g`` beside the mean over draws of ``max_g`` of the draws' ECEs
  (``worst_null``: the worst of that many groups of those sizes, calibrated), the mean over
  groups of ``ECE_g`` beside the mean of ``null_g``, and the largest excess ``max_g (ECE_g -
  null_g)``;
* split-conformal LAC sets at ``alpha``: the measuring half is halved again (its first half
  calibrates, the second is scored); the marginal :class:`~selfcal.conformal.SplitConformal`
  and the Mondrian-by-group one (``mondrian="group"``; for overlapping groups, by the cells of
  their membership patterns: :func:`mondrian_cells`), each group's coverage
  on the scored rows, the worst group's, and beside it ``worst_coverage_null``: the mean over
  ``n_draws`` draws of the worst group's coverage when every row is covered with probability
  exactly ``1 - alpha`` (what the smallest groups show by chance alone), and for the Mondrian
  sets ``worst_coverage_null_mondrian``, which adds each group threshold's own noise
  (:func:`mondrian_coverage_null`).

A method that cannot be fitted (not registered, refused, or a ``ValueError`` of its fit)
loses its own numbers on the split, with its reason, not the set's."""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

import selfcal.metrics as M
from selfcal._inputs import Groups, as_groups
from selfcal.conformal import SplitConformal
from selfcal.experiments import RunResult, RunSpec
from selfcal.metrics.groups import group_calibration
from selfcal.predictions import Predictions
from selfcal.studies._sets import REASONS, fit_method
from selfcal.studies.conformal.execute import halvings
from selfcal.studies.groups.data import FAMILIES, SYNTHETIC_GROUPS, synthetic_set
from selfcal.studies.groups.protocol import GroupsProtocol

GROUP_ROWS = ("ece", "null_ece", "coverage_marginal", "coverage_mondrian")
"""The rows of each method's per-group artefact ``groups.<method>``, ``(4, G)``."""
COVERAGE_SALT = 0xC0DE
"""Mixed into the seed of the coverage yardstick's draws."""


@dataclass
class Measured:
    """What one split gives: scalar metrics, per-group arrays, and why methods failed."""

    metrics: dict[str, float] = field(default_factory=dict)
    artefacts: dict[str, np.ndarray] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)


def split_rows(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(fit, calibrate, scored)`` rows of re-split ``seed`` of ``n`` pooled rows: the
    halving of :func:`~selfcal.studies.conformal.execute.halvings` (seeded ``seed``), its
    second half cut in two in its (random) order."""
    fit, measure = halvings(n, 1, seed)[0]
    return fit, measure[: len(measure) // 2], measure[len(measure) // 2 :]


def evaluate_split(
    protocol: GroupsProtocol,
    scores: np.ndarray,
    kind: str,
    labels: np.ndarray,
    groups: Groups,
    seed: int,
    keep: np.ndarray | None = None,
    prefix: str = "",
) -> Measured:
    """Every method of ``protocol`` on re-split ``seed`` of the pooled rows (module docstring);
    ``keep``: a row mask applied after the split (the same split, fewer rows: e.g. without
    MMLU-Redux's flagged subjects), ``prefix`` put before every name it stores."""
    parts = split_rows(len(labels), seed)
    if keep is not None:
        parts = tuple(rows[keep[rows]] for rows in parts)
    fit, cal, scored = parts
    measure = np.concatenate([cal, scored])
    out = Measured()
    y = torch.from_numpy(labels[measure])
    g_measure = groups[torch.from_numpy(measure)]
    sizes = g_measure.sizes().double().numpy()
    scored_groups = groups[torch.from_numpy(scored)]
    out.artefacts[f"{prefix}group_sizes"] = np.stack(
        [sizes, scored_groups.sizes().double().numpy()]
    )
    out.metrics[f"{prefix}worst_coverage_null"] = coverage_null(
        scored_groups, protocol.alpha, protocol.n_draws, seed
    )
    out.metrics[f"{prefix}worst_coverage_null_mondrian"] = mondrian_coverage_null(
        groups[torch.from_numpy(cal)], scored_groups, protocol.alpha, protocol.n_draws, seed
    )
    out.metrics[f"{prefix}n_fit"] = float(len(fit))
    for name in protocol.methods:
        probs, why = fit_method(
            name,
            kind,
            (scores[fit], labels[fit], groups[torch.from_numpy(fit)]),
            (scores[measure], g_measure),
        )
        if probs is None:
            out.reasons[f"{prefix}{name}"] = why
            out.metrics[f"{prefix}failed.{name}"] = 1.0
            continue
        found, per_group = measure_method(protocol, probs, y, g_measure, len(cal), seed)
        out.metrics.update({f"{prefix}{k}.{name}": v for k, v in found.items()})
        out.artefacts[f"{prefix}groups.{name}"] = per_group
    return out


def measure_method(
    protocol: GroupsProtocol,
    probs: np.ndarray,
    labels: torch.Tensor,
    groups: Groups,
    n_cal: int,
    seed: int,
) -> tuple[dict[str, float], np.ndarray]:
    """One method's metrics on the measuring half (its first ``n_cal`` rows calibrate the
    conformal predictors, the rest are scored) and its ``(4, G)`` per-group array
    (:data:`GROUP_ROWS`)."""
    pred = Predictions.from_probs(torch.from_numpy(probs), labels, groups=groups)
    found = group_calibration(
        pred, n_bins=protocol.n_bins, n_draws=protocol.n_draws, draw_seed=seed
    )
    has_rows = ~found.ece.isnan()
    ece = found.ece[has_rows]
    metrics = {
        "nll": float(M.nll.core(pred)),
        "ece": float(M.ece.core(pred, n_bins=protocol.n_bins)),
        "accuracy": float(M.accuracy.core(pred)),
        "worst_ece": float(ece.max()),
        "worst_null": float(found.worst_null.mean()),
        "mean_ece": float(ece.mean()),
        "mean_null": float(found.null_ece[has_rows].mean()),
        "worst_excess": float(found.excess_ece[has_rows].max()),
        "mean_excess": float(found.excess_ece[has_rows].mean()),
    }
    cal, scored = np.arange(n_cal), np.arange(n_cal, len(probs))
    coverage = []
    for mode in ("marginal", "mondrian"):
        per_group, size, overall = group_coverage(
            probs, labels.numpy(), groups, cal, scored, protocol.alpha, mode
        )
        coverage.append(per_group)
        if not np.isnan(per_group).all():
            metrics[f"worst_coverage.{mode}"] = float(np.nanmin(per_group))
            metrics[f"size.{mode}"] = size
            metrics[f"coverage.{mode}"] = overall
    per = np.stack([found.ece.numpy(), found.null_ece.numpy(), *coverage])
    return metrics, per


def group_coverage(
    probs: np.ndarray,
    labels: np.ndarray,
    groups: Groups,
    cal: np.ndarray,
    scored: np.ndarray,
    alpha: float,
    mode: str,
) -> tuple[np.ndarray, float, float]:
    """Each group's coverage of the ``scored`` rows by split-conformal LAC sets calibrated on
    the ``cal`` rows (``mode``: ``"marginal"``, one threshold; ``"mondrian"``, one per group),
    NaN for a group without scored rows, the mean set size and the coverage of every scored
    row. Mondrian needs one group a row: on overlapping groups it conditions on the cells of
    :func:`mondrian_cells` (each group is a union of cells, so a guarantee per cell is one per
    group). A group with too few calibration rows gets every label
    (:class:`~selfcal.conformal.SplitConformal`'s rule)."""
    c, s = torch.from_numpy(cal), torch.from_numpy(scored)
    cells = mondrian_cells(groups)
    options = {"groups": cells[c]} if mode == "mondrian" else {}
    predictor = SplitConformal(
        alpha=alpha, nonconformity="lac", mondrian=mode == "mondrian" and "group"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        predictor.fit(probs=probs[cal], labels=labels[cal], **options)
        extra = {"groups": cells[s]} if mode == "mondrian" else {}
        sets = np.asarray(predictor.predict_set(probs=probs[scored], **extra))
    hit = sets[np.arange(len(scored)), labels[scored]].astype(np.float64)
    per_group = np.array(
        [hit[rows.numpy()].mean() if len(rows) else math.nan for rows in groups[s].rows()]
    )
    return per_group, float(sets.sum(1).mean()), float(hit.mean())


def mondrian_cells(groups: Groups) -> Groups:
    """The partition Mondrian sets condition on: the groups themselves, or, for overlapping
    groups, each row's pattern of membership (``"A+C"``; ``"none"`` for a row in no group)."""
    if not groups.overlapping:
        return groups
    assert groups.membership is not None
    member = groups.membership.numpy()
    names = np.array(groups.names)
    labels = ["+".join(names[row]) or "none" for row in member]
    return as_groups(labels, len(labels))


def coverage_null(groups: Groups, alpha: float, n_draws: int, seed: int) -> float:
    """The mean over ``n_draws`` seeded draws of ``min_g`` (the fraction of group ``g``'s rows
    covered) when each row is covered independently with probability ``1 - alpha``: the worst
    group's coverage under exact coverage in every group, at these groups' sizes."""
    rng = np.random.default_rng([seed, COVERAGE_SALT])
    covered = rng.random((n_draws, len(groups))) < 1 - alpha
    rows = [r.numpy() for r in groups.rows() if len(r)]
    return float(np.mean(np.min(np.stack([covered[:, r].mean(1) for r in rows], 1), 1)))


def mondrian_coverage_null(
    cal: Groups, scored: Groups, alpha: float, n_draws: int, seed: int
) -> float:
    """The mean over ``n_draws`` seeded draws of the worst group's coverage of the scored rows
    by an exact Mondrian predictor at these sizes: each cell ``c`` of :func:`mondrian_cells`
    with ``n_c`` calibration rows covers with probability ``pi_c ~ Beta(k_c, n_c + 1 - k_c)``,
    ``k_c = ceil((n_c + 1)(1 - alpha))`` (the coverage of a split-conformal threshold given its
    calibration rows, for continuous scores), or 1 where ``k_c > n_c`` (every label); each
    scored row is covered with its cell's ``pi_c``; each group's coverage is the mean over its
    rows. Beside :func:`coverage_null` it adds the threshold's own noise, which a few dozen
    calibration rows make large."""
    rng = np.random.default_rng([seed, COVERAGE_SALT, 1])
    cal_cells, scored_cells = mondrian_cells(cal), mondrian_cells(scored)
    n = dict(zip(cal_cells.names, cal_cells.sizes().tolist(), strict=True))
    assert scored_cells.codes is not None
    pi = np.ones((n_draws, scored_cells.n_groups))
    for j, name in enumerate(scored_cells.names):
        count = n.get(name, 0)
        k = math.ceil((count + 1) * (1 - alpha))
        if k <= count:
            pi[:, j] = rng.beta(k, count + 1 - k, size=n_draws)
    covered = rng.random((n_draws, len(scored))) < pi[:, scored_cells.codes.numpy()]
    rows = [r.numpy() for r in scored.rows() if len(r)]
    return float(np.mean(np.min(np.stack([covered[:, r].mean(1) for r in rows], 1), 1)))


def names_artefact(names: tuple[str, ...]) -> np.ndarray:
    """The group names as UTF-8 JSON bytes (a run's artefacts are arrays)."""
    return np.frombuffer(json.dumps(list(names)).encode("utf-8"), dtype=np.uint8).copy()


def result(measured: Measured, metrics: dict[str, float], names: tuple[str, ...]) -> RunResult:
    """A run's result: ``metrics`` with the split's, its per-group arrays, the group names
    (``group_names``) and why methods failed (:data:`~selfcal.studies._sets.REASONS`)."""
    artefacts = {**measured.artefacts, "group_names": names_artefact(names)}
    if measured.reasons:
        text = json.dumps(measured.reasons, sort_keys=True, ensure_ascii=False)
        artefacts[REASONS] = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy()
    return RunResult(metrics={**metrics, **measured.metrics}, artefacts=artefacts)


def evaluate_synthetic(protocol: GroupsProtocol, spec: RunSpec) -> RunResult:
    """Re-split ``spec.seed`` of the synthetic set (one set, drawn with seed 0 at the
    protocol's size: :func:`~selfcal.studies.groups.data.synthetic_set`)."""
    logits, labels, member = synthetic_set(protocol.synthetic_rows, protocol.synthetic_classes, 0)
    groups = as_groups(member, len(labels), names=SYNTHETIC_GROUPS)
    measured = evaluate_split(protocol, logits, "logits", labels, groups, spec.seed)
    metrics = {
        "family": float(FAMILIES.index("synthetic")),
        "n_rows": float(len(labels)),
        "n_classes": float(logits.shape[1]),
        "n_groups": float(groups.n_groups),
    }
    return result(measured, metrics, groups.names)


def execute(protocol: GroupsProtocol, group: list[RunSpec]) -> list[RunResult]:
    """The runs of the synthetic set (the ``full`` and ``quick`` protocols)."""
    return [evaluate_synthetic(protocol, spec) for spec in group]
