"""Stratified or random folds for ``auto``'s cross-validation: which one predicts the test
split.

Stratified folds give every fold the validation set's class frequencies, so per-class
parameters fitted on the other folds are rewarded for matching frequencies a new sample does
not share. On labels drawn independently (the synthetic 50,000 x 1,000 ImageNet-shaped set of
``benchmarks/bench_calibrators_scale.py``, halved into validation and test) this prints each
scheme's cross-validated difference of structured vector scaling (SVS) from temperature scaling
(TS) on the validation half, and the test half's; with ``--sets DIR``, for every prediction set
there, what ``auto`` chooses under each scheme and whether that beats TS on the set's test split
(paired 95% bootstrap over its test rows, 1,000 resamples). The shared sets' test splits were
split from their validation splits stratified by label, so their class frequencies are the
validation's exactly: the case stratified folds assume.

Usage: ``python scripts/auto_folds.py [--sets DIR] [--rows 50000]`` (about ten minutes with
the 42 shared sets, on two cores).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_calibrators_scale import imagenet_shaped

from selfcal import Predictions
from selfcal.metrics.scores import nll_terms
from selfcal.posthoc import AutoCalibration, auto, build_calibrator
from selfcal.posthoc.crossfit import random_folds, stratified_folds

SCHEMES = {
    "random": lambda labels, k, seed: random_folds(labels.shape[0], k, seed),
    "stratified": stratified_folds,
}
FOLDS_FOR = auto.folds_for


def fitted(scheme: str, z: torch.Tensor, y: torch.Tensor, **options: object) -> AutoCalibration:
    """``auto`` fitted with the folds of ``scheme`` (whatever the number of rows)."""
    deal = SCHEMES[scheme]

    def folds(labels: torch.Tensor, n_folds: int | str, seed: int) -> list[np.ndarray]:
        return deal(labels, auto.fold_count(n_folds, labels.shape[0]), seed)

    auto.folds_for = folds
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return AutoCalibration(**options).fit(logits=z, labels=y)  # type: ignore[arg-type]
    finally:
        auto.folds_for = FOLDS_FOR


def test_difference(a: np.ndarray, b: np.ndarray, labels: np.ndarray) -> tuple[float, ...]:
    """Test NLL of probabilities ``a`` minus ``b``: point and centred 95% interval."""
    terms = [nll_terms(Predictions.from_probs(torch.as_tensor(p), labels)) for p in (a, b)]
    d = (terms[0] - terms[1]).numpy()
    rng = np.random.default_rng(0)
    reps = d[rng.integers(0, len(d), (1000, len(d)))].mean(1)
    point = float(d.mean())
    return (
        point,
        2 * point - float(np.quantile(reps, 0.975)),
        2 * point - float(np.quantile(reps, 0.025)),
    )


def synthetic(rows: int) -> list[str]:
    z, y = imagenet_shaped(0, 2 * rows)
    zv, yv, zt, yt = z[:rows], y[:rows], z[rows:], y[rows:]
    lines = [
        f"Synthetic ImageNet-shaped, {rows:,} validation and {rows:,} test rows of 1,000 "
        "classes (TS is the true map):",
        "",
        "| folds | SVS − TS, cross-validated | `auto` chose |",
        "|---|---|---|",
    ]
    for scheme in SCHEMES:
        a = fitted(scheme, zv, yv, candidates=["ts", "svs"])
        r = a.cv_results_
        i = r["candidate"].index("svs")
        lines.append(
            f"| {scheme} | {r['ts_difference'][i]:+.5f} [{r['ts_low'][i]:+.5f}, "
            f"{r['ts_high'][i]:+.5f}] | {a.chosen_} |"
        )
    probs = {
        n: build_calibrator(n).fit(logits=zv, labels=yv).predict_proba(logits=zt)
        for n in ("ts", "svs")
    }
    point, low, high = test_difference(probs["svs"], probs["ts"], yt.numpy())
    return lines + ["", f"SVS − TS on the test rows: {point:+.5f} [{low:+.5f}, {high:+.5f}]."]


def on_sets(root: Path) -> list[str]:
    from selfcal.io import find_prediction_sets, load_prediction_set

    counts = {scheme: {"better": 0, "worse": 0, "ts": 0} for scheme in SCHEMES}
    for path in find_prediction_sets(root):
        data = load_prediction_set(path)
        z, y = torch.as_tensor(data.val), torch.as_tensor(data.val_labels)
        ts = build_calibrator("ts").fit(logits=z, labels=y).predict_proba(logits=data.test)
        for scheme in SCHEMES:
            a = fitted(scheme, z, y)
            if a.chosen_ == "ts":
                counts[scheme]["ts"] += 1
                continue
            _, low, high = test_difference(a.predict_proba(logits=data.test), ts, data.test_labels)
            counts[scheme]["better"] += high < 0
            counts[scheme]["worse"] += low > 0
    lines = [
        f"The prediction sets of `{root}`: `auto` against TS on each set's test split.",
        "",
        "| folds | chose TS | better than TS | worse than TS |",
        "|---|---|---|---|",
    ]
    for scheme, c in counts.items():
        lines.append(f"| {scheme} | {c['ts']} | {c['better']} | {c['worse']} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", type=Path, default=None)
    parser.add_argument("--rows", type=int, default=50_000)
    args = parser.parse_args()
    torch.set_num_threads(2)
    lines = synthetic(args.rows)
    if args.sets is not None:
        lines += ["", *on_sets(args.sets)]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
