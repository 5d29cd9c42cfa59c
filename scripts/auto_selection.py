"""``auto``'s two selection rules against each other and against the single calibrator that
is best in hindsight, on the post-hoc leaderboard's scikit-learn prediction sets (four models x
nine tabular sets x five seeds, ``selfcal reproduce posthoc``'s sources).

For each set: ``AutoCalibration(selection="first")`` (the default: the first candidate not
significantly worse than the lowest cross-validated NLL), ``selection="best"`` (the lowest
itself), and every candidate alone, fitted on the validation split; test NLL. Per task type
(binary / multiclass x validation < / >= 1,000 rows): the mean test-NLL difference of each
rule from the best single candidate (the lowest mean test NLL over the group, chosen in
hindsight) and of ``best`` from ``first``, with 95% cluster-bootstrap intervals over
(dataset, seed), 2,000 resamples; and what each rule chose.

Usage: ``python scripts/auto_selection.py`` (about eight minutes on two cores).
"""

from __future__ import annotations

import warnings
from collections import Counter

import numpy as np
import torch

from selfcal.posthoc import build_calibrator
from selfcal.studies.posthoc.protocol import FULL
from selfcal.studies.posthoc.sources import sklearn_set

RULES = ("first", "best")
TINY = float(np.finfo(np.float64).tiny)


def test_nll(p: np.ndarray, y: np.ndarray) -> float:
    return float(-np.log(np.clip(p[np.arange(len(y)), y], TINY, 1.0)).mean())


def scores(s) -> tuple[dict[str, float], dict[str, str]]:
    """Test NLL of each rule and each candidate on one prediction set; each rule's choice."""
    out, chosen = {}, {}
    for rule in RULES:
        auto = build_calibrator("auto", selection=rule).fit(probs=s.val, labels=s.val_labels)
        out[rule] = test_nll(auto.predict_proba(probs=s.test), s.test_labels)
        chosen[rule] = auto.chosen_
    for name in auto.cv_results_["candidate"]:
        cal = build_calibrator(name).fit(probs=s.val, labels=s.val_labels)
        out[name] = test_nll(cal.predict_proba(probs=s.test), s.test_labels)
    return out, chosen


def interval(diffs: np.ndarray, clusters: list[tuple[str, int]]) -> str:
    rng = np.random.default_rng(0)
    keys = sorted(set(clusters))
    members = [np.array([i for i, c in enumerate(clusters) if c == k]) for k in keys]
    means = [
        diffs[np.concatenate([members[j] for j in rng.integers(0, len(keys), len(keys))])].mean()
        for _ in range(2000)
    ]
    low, high = np.percentile(means, [2.5, 97.5])
    return f"{diffs.mean():+.4f} [{low:+.4f}, {high:+.4f}]"


def main() -> None:
    torch.set_num_threads(2)
    warnings.simplefilter("ignore")
    groups: dict[str, list[tuple[tuple[str, int], dict[str, float], dict[str, str]]]] = {}
    for dataset in FULL.datasets:
        for model in FULL.models:
            for seed in FULL.seeds:
                s = sklearn_set(FULL, dataset, model, seed)
                task = "binary" if s.n_classes == 2 else "multiclass"
                size = "small" if len(s.val_labels) < 1000 else "large"
                out, chosen = scores(s)
                groups.setdefault(f"{task}, {size}", []).append(((dataset, seed), out, chosen))
    print(
        "| task type | sets | best single (hindsight) | first - it | best - it "
        "| best - first | first chose | best chose |"
    )
    print("|---|---:|---|---|---|---|---|---|")
    for group, sets in sorted(groups.items()):
        clusters = [c for c, _, _ in sets]
        shared = set.intersection(*(set(out) - set(RULES) for _, out, _ in sets))
        top = min(sorted(shared), key=lambda n: np.mean([out[n] for _, out, _ in sets]))
        diffs = {
            (a, b): interval(np.array([out[a] - out[b] for _, out, _ in sets]), clusters)
            for a, b in (("first", top), ("best", top), ("best", "first"))
        }
        chose = {
            rule: ", ".join(
                f"{n} {k}" for n, k in Counter(c[rule] for _, _, c in sets).most_common(3)
            )
            for rule in RULES
        }
        print(
            f"| {group} | {len(sets)} | `{top}` | {diffs['first', top]} | {diffs['best', top]} "
            f"| {diffs['best', 'first']} | {chose['first']} | {chose['best']} |"
        )


if __name__ == "__main__":
    main()
