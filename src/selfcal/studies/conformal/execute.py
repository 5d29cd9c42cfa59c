"""One prediction set, every post-hoc step, score and level: the post-hoc step is fitted on the
set's validation predictions (with its default hyperparameters) and applied to its test
predictions; then, for each of ``halvings`` seeded random halvings of the test rows (the same
halvings for every method of a dataset and seed, so comparisons are paired), a
:class:`selfcal.conformal.SplitConformal` fitted on one half at each level and score gives sets
for the other half, scored by coverage, average size, worst-class coverage and singleton rate
(:mod:`selfcal.metrics`). Each metric is the mean over the halvings; a level the calibration
half is too small for (fewer than ``1/alpha - 1`` rows) is left out."""

from __future__ import annotations

import warnings

import numpy as np
import torch

import selfcal.metrics as M
from selfcal.conformal import conformal_quantile, conformity_scores
from selfcal.conformal.scores import class_quantiles
from selfcal.exceptions import DegenerateCalibration
from selfcal.experiments import RunResult, RunSpec
from selfcal.io import PredictionSet
from selfcal.posthoc import build_calibrator
from selfcal.studies.conformal.protocol import ConformalProtocol
from selfcal.studies.posthoc.sources import benchmark_set, sklearn_model

METRICS = ("coverage", "size", "worst_class_coverage", "singleton")
"""The per-halving metrics, stored as ``<metric>.<posthoc>.<score>.<alpha>``."""
HALVING_SALT = 0xC0F0
"""Mixed into each halving's seed so it does not track the benchmark's own draws."""


def execute(protocol: ConformalProtocol, group: list[RunSpec]) -> list[RunResult]:
    return [evaluate(protocol, spec) for spec in group]


def key(metric: str, posthoc: str, score: str, alpha: float) -> str:
    """The stored metric name, e.g. ``size.ts.aps.0.1``."""
    return f"{metric}.{posthoc}.{score}.{alpha:g}"


def prediction_set(protocol: ConformalProtocol, spec: RunSpec) -> PredictionSet:
    """The benchmark record ``hp.record`` names, or a scikit-learn model (``sk:<name>``)
    fitted on the dataset's training split of the seed."""
    record = spec.hparams.get("hp.record")
    if record is not None:
        return benchmark_set(protocol.benchmark_store, str(record))
    from selfcal.data import load_dataset

    data = load_dataset(spec.dataset, spec.seed)
    x, xv, xt = (
        s.x.reshape(len(s.x), -1).double().numpy() for s in (data.train, data.val, data.test)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = sklearn_model(spec.method.removeprefix("sk:"), spec.seed).fit(
            x, data.train.y.numpy()
        )
    return PredictionSet(
        "probs",
        model.predict_proba(xv),
        data.val.y.numpy(),
        model.predict_proba(xt),
        data.test.y.numpy(),
    )


def test_probs(data: PredictionSet, posthoc: str) -> np.ndarray:
    """The test split's probabilities after ``posthoc`` fitted on the validation split."""
    if posthoc == "none":
        if data.kind == "probs":
            return data.test
        scores = torch.as_tensor(data.test)
        if not scores.is_floating_point():  # integer logits (a softmax takes none)
            scores = scores.double()
        return torch.softmax(scores, 1).numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate fits warn; they are still a step
        cal = build_calibrator(posthoc, kind=data.kind).fit(data.val, data.val_labels)
        return np.asarray(cal.predict_proba(data.test), dtype=np.float64)


def halvings(n: int, count: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``count`` seeded random halvings ``(calibration rows, scored rows)`` of ``n`` rows."""
    out = []
    for r in range(count):
        order = np.random.default_rng([seed, r, HALVING_SALT]).permutation(n)
        out.append((order[: n // 2], order[n // 2 :]))
    return out


def evaluate(protocol: ConformalProtocol, spec: RunSpec) -> RunResult:
    data = prediction_set(protocol, spec)
    y = np.asarray(data.test_labels, dtype=np.int64)
    splits = halvings(len(y), protocol.halvings, spec.seed)
    metrics: dict[str, float] = {
        "n_val": float(len(data.val_labels)),
        "n_test": float(len(y)),
        "n_classes": float(data.n_classes),
        "error": float(np.mean(np.argmax(data.test, 1) != y)),
    }
    labels = torch.from_numpy(y)
    for posthoc in protocol.posthoc:
        probs = torch.from_numpy(test_probs(data, posthoc))
        for name in protocol.score_names:
            found = conformalise(probs, labels, splits, name, protocol.alphas)
            metrics.update({key(m, posthoc, name, a): v for (m, a), v in found.items()})
    return RunResult(metrics=metrics)


def usable_levels(n_calibration: int, alphas: tuple[float, ...]) -> tuple[float, ...]:
    """The levels ``alpha`` whose threshold ``n_calibration`` rows can give: the
    ``ceil((n + 1)(1 - alpha))``-th smallest of ``n`` scores exists where
    ``n >= 1 / alpha - 1`` (9 rows at 0.1, 99 at 0.01); below, every set would be every label."""
    return tuple(a for a in alphas if n_calibration >= 1 / a - 1)


def conformalise(
    probs: torch.Tensor,
    labels: torch.Tensor,
    splits: list[tuple[np.ndarray, np.ndarray]],
    name: str,
    alphas: tuple[float, ...],
) -> dict[tuple[str, float], float]:
    """Mean over ``splits`` of each of :data:`METRICS` for score ``name`` (``<score>-mondrian``:
    class-conditional) at each level; a level the calibration halves are too small for is
    left out.

    It is :class:`~selfcal.conformal.SplitConformal` taken apart so that one score matrix
    serves every level: per halving ``r`` the ``(N, C)`` scores of every test row and label
    (:func:`selfcal.conformal.conformity_scores`, ``u`` drawn per row and label from a
    generator seeded ``r``), the calibration half's scores of their true labels, the threshold
    (:func:`~selfcal.conformal.conformal_quantile`, or per class
    :func:`~selfcal.conformal.scores.class_quantiles`), and the sets ``score <= threshold`` of
    the other half -- ``SplitConformal``'s rule, with independent draws of ``u`` for the two
    halves as it makes them (``tests/studies/test_conformal.py`` checks the sets equal its
    own where the scores have no ``u``)."""
    score, _, mondrian = name.partition("-")
    usable = usable_levels(len(splits[0][0]), alphas)
    totals = {(m, a): 0.0 for m in METRICS for a in usable}
    n_classes = probs.shape[1]
    for r, (cal, scored) in enumerate(splits):
        generator = torch.Generator().manual_seed(r)
        every = conformity_scores(probs, score=score, generator=generator)
        cal_t, scored_t = torch.from_numpy(cal), torch.from_numpy(scored)
        truth = labels[scored_t]
        cal_scores = every[cal_t].gather(1, labels[cal_t].unsqueeze(1)).squeeze(1)
        for alpha in usable:
            with warnings.catch_warnings():  # too few rows: +inf, every label (counted)
                warnings.simplefilter("ignore", DegenerateCalibration)
                if mondrian:
                    threshold = class_quantiles(cal_scores, labels[cal_t], n_classes, alpha)[0]
                else:
                    q = conformal_quantile(cal_scores, alpha)
                    threshold = torch.tensor([q], dtype=torch.float64)  # never rounded
            sets = every[scored_t] <= threshold
            totals[("coverage", alpha)] += float(M.set_coverage(sets, truth))
            totals[("size", alpha)] += float(M.average_set_size(sets))
            totals[("worst_class_coverage", alpha)] += float(M.worst_class_coverage(sets, truth))
            totals[("singleton", alpha)] += float(M.singleton_rate(sets))
    return {k: v / len(splits) for k, v in totals.items()}
