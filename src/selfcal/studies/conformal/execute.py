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
from selfcal.conformal import SplitConformal
from selfcal.experiments import RunResult, RunSpec
from selfcal.posthoc import build_calibrator
from selfcal.studies.conformal.protocol import ConformalProtocol
from selfcal.studies.posthoc.sources import PredictionSet, benchmark_set, sklearn_model

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
        return torch.softmax(torch.as_tensor(data.test), 1).numpy()
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
    for posthoc in protocol.posthoc:
        probs = test_probs(data, posthoc)
        for name in protocol.score_names:
            for alpha in protocol.alphas:
                found = conformalise(probs, y, splits, name, alpha)
                metrics.update({key(m, posthoc, name, alpha): v for m, v in found.items()})
    return RunResult(metrics=metrics)


def conformalise(
    probs: np.ndarray,
    labels: np.ndarray,
    splits: list[tuple[np.ndarray, np.ndarray]],
    name: str,
    alpha: float,
) -> dict[str, float]:
    """Mean over ``splits`` of each of :data:`METRICS` for score ``name`` (``<score>-mondrian``:
    class-conditional) at ``alpha``; empty when the calibration halves are too small."""
    score, _, mondrian = name.partition("-")
    if len(splits[0][0]) < 1 / alpha - 1:
        return {}
    totals = dict.fromkeys(METRICS, 0.0)
    for r, (cal, scored) in enumerate(splits):
        predictor = SplitConformal(alpha=alpha, score=score, mondrian=bool(mondrian), seed=r)
        predictor.fit(probs=probs[cal], labels=labels[cal])
        sets = predictor.predict_set(probs=probs[scored])
        truth = labels[scored]
        totals["coverage"] += float(M.set_coverage(sets, truth))
        totals["size"] += float(M.average_set_size(sets))
        totals["worst_class_coverage"] += float(M.worst_class_coverage(sets, truth))
        totals["singleton"] += float(M.singleton_rate(sets))
    return {m: v / len(splits) for m, v in totals.items()}
