"""What exact zero probabilities do to the likelihood-fitted calibrators, read as
``log(tiny) = -708`` (selfcal before the floor; ``fit(logits=log(max(p, tiny)))``) against
selfcal's floor (``fit(probs=p)``: a zero read as half the smallest positive probability of the
fitting rows, rows renormalised; ``selfcal.posthoc._scores.zero_floor``).

The sets: the post-hoc leaderboard's random forests (``selfcal reproduce posthoc``'s
scikit-learn sources, seeds 0 and 1) whose validation probabilities hold an exact zero. Prints
the mean test NLL of each calibrator under both readings, over those sets.

Usage: ``python scripts/zero_probabilities.py`` (about three minutes on two cores).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from selfcal.posthoc import build_calibrator
from selfcal.studies.posthoc.protocol import FULL
from selfcal.studies.posthoc.sources import sklearn_set

CALIBRATORS = ("ts", "svs", "sms", "matrix", "dirichlet", "ets", "platt", "beta", "quadratic")
BINARY_ONLY = ("platt", "beta", "quadratic")
TINY = float(np.finfo(np.float64).tiny)


def test_nll(p: np.ndarray, y: np.ndarray) -> float:
    return float(-np.log(np.clip(p[np.arange(len(y)), y], TINY, 1.0)).mean())


def main() -> None:
    torch.set_num_threads(2)
    warnings.simplefilter("ignore")
    scores: dict[tuple[str, str], list[float]] = {}
    for dataset in FULL.datasets:
        for seed in (0, 1):
            s = sklearn_set(FULL, dataset, "random-forest", seed)
            if not (s.val == 0).any():
                continue
            for name in CALIBRATORS:
                if name in BINARY_ONLY and s.n_classes != 2:
                    continue
                old = build_calibrator(name).fit(
                    logits=np.log(np.maximum(s.val, TINY)), labels=s.val_labels
                )
                new = build_calibrator(name).fit(probs=s.val, labels=s.val_labels)
                p_old = old.predict_proba(logits=np.log(np.maximum(s.test, TINY)))
                scores.setdefault((name, "log(tiny)"), []).append(test_nll(p_old, s.test_labels))
                scores.setdefault((name, "floor"), []).append(
                    test_nll(new.predict_proba(probs=s.test), s.test_labels)
                )
    print("| calibrator | sets | test NLL, zeros read as log(tiny) | test NLL, floor |")
    print("|---|---:|---:|---:|")
    for name in CALIBRATORS:
        old, new = scores[(name, "log(tiny)")], scores[(name, "floor")]
        print(f"| `{name}` | {len(old)} | {np.mean(old):.3f} | {np.mean(new):.3f} |")


if __name__ == "__main__":
    main()
