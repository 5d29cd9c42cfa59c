"""The evidence for the Venn-Abers predictors (issue 51, item 5) on the shared third-party
prediction sets: how wide their intervals are, where, and what their merged probabilities are
worth against temperature scaling and ``auto``.

Every set is fitted on its validation split and judged on its test split. Per family (sets
with the same number of classes):

1. **Width against calibration size.** ``venn-abers-top`` (the interval ``[p0, p1]`` for the
   top-label confidence) fitted on seeded random subsets of the validation rows (250, 500,
   1,000, 2,000 and all), the mean test width ``p1 - p0``; the family's mean over sets with a
   95% percentile interval from 1,000 bootstrap draws of the sets.
2. **Width against correctness.** On the test rows of the fit on all validation rows: the mean
   width of the wrong and of the right rows, their ratio, and the AUROC of the width for
   telling a wrong row from a right one (0.5: no signal) -- family means with intervals over
   sets as above.
3. **Merged probabilities.** ``venn-abers`` (one-vs-rest, normalised) and ``venn-abers-top``
   against ``ts`` and ``auto``: the test NLL and 15-bin ECE difference with a paired 95%
   bootstrap interval over each set's test rows (1,000 resamples shared by every calibrator;
   centred interval, as ``selfcal compare``), each set counted better / tied / worse, and the
   family's mean difference with an interval over sets.

Deterministic: one seed, one thread (numpy and torch), so a rerun writes the same bytes. A few
minutes on one thread; run it with the other heavy jobs' lock::

    flock /tmp/selfcal-heavy.lock python scripts/venn_abers_evidence.py \\
        ../shared/prediction-sets --out results/venn-abers-real

It writes ``venn-abers.json`` (every number per set) and ``README.md`` (the tables) to
``--out``, and prints the README. ``--show`` instead prints one set's intervals, a few right and
a few wrong test rows and the mean widths (seconds on one thread)::

    python scripts/venn_abers_evidence.py \\
        ../shared/prediction-sets/chenyaofo_resnet56_cifar10 --show
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.metrics import roc_auc_score
from threadpoolctl import threadpool_limits

from selfcal import ece, nll
from selfcal.io import find_prediction_sets, load_prediction_set
from selfcal.metrics.bootstrap import Resamples, interval_bounds, resampled_values
from selfcal.posthoc import build_calibrator
from selfcal.predictions import Predictions

SEED = 0
SIZES = (250, 500, 1000, 2000)
"""Validation subset sizes of the width-against-size table (and all rows)."""
MERGED = ("venn-abers", "venn-abers-top")
REFERENCES = ("ts", "auto")
RESAMPLES = 1000
COMMAND = (
    "flock /tmp/selfcal-heavy.lock python scripts/venn_abers_evidence.py "
    "../shared/prediction-sets --out results/venn-abers-real"
)


def _fit(name: str, val: Predictions) -> Any:
    return build_calibrator(name).fit(val)


def _width(val: Predictions, test: Predictions) -> np.ndarray:
    p0, p1 = build_calibrator("venn-abers-top").fit(val).predict_interval(test)
    return np.asarray(p1) - np.asarray(p0)


def widths_by_size(val: Predictions, test: Predictions) -> dict[str, float]:
    """Mean test width of ``venn-abers-top`` fitted on seeded subsets of ``val``."""
    rng = np.random.default_rng(SEED)
    out = {}
    for size in SIZES:
        if size < val.n_samples:
            rows = torch.from_numpy(np.sort(rng.choice(val.n_samples, size, replace=False)))
            out[str(size)] = float(_width(val.subset(rows), test).mean())
    out["all"] = float(_width(val, test).mean())
    return out


def width_and_errors(val: Predictions, test: Predictions) -> dict[str, float]:
    """Mean width of wrong and right test rows, and the width's AUROC for an error."""
    width = _width(val, test)
    wrong = test.correct.numpy() < 0.5
    return {
        "wrong": float(width[wrong].mean()),
        "right": float(width[~wrong].mean()),
        "auroc": float(roc_auc_score(wrong, width)) if 0 < wrong.sum() < len(wrong) else 0.5,
    }


def paired(test: Predictions, probs: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Each merged calibrator's NLL and ECE minus each reference's, with paired intervals."""
    resamples = Resamples(test.n_samples, RESAMPLES, SEED)
    labels = test.require_labels()
    scores: dict[tuple[str, str], tuple[torch.Tensor, float]] = {}
    for name, p in probs.items():
        pred = Predictions.from_probs(p, labels)
        for metric, options in ((nll, {}), (ece, {"n_bins": 15})):
            core = metric.core
            value = float(core(pred, **options))
            draws = resampled_values(
                lambda w, c=core, o=options, q=pred: c(q, weights=w, **o),
                test.n_samples,
                RESAMPLES,
                SEED,
                torch.device("cpu"),
                resamples,
            )
            scores[(name, metric.__name__)] = (draws, value)
    out: dict[str, Any] = {}
    for name in MERGED:
        for ref in REFERENCES:
            for metric in ("nll", "ece"):
                d_draws = scores[(name, metric)][0] - scores[(ref, metric)][0]
                d = scores[(name, metric)][1] - scores[(ref, metric)][1]
                lo, hi = interval_bounds(d_draws, torch.tensor(d), 0.95, "centred")
                out[f"{name} - {ref} {metric}"] = [d, float(lo), float(hi)]
    return out


def one_set(folder: Path) -> dict[str, Any]:
    data = load_prediction_set(folder)
    val, test = data.predictions("val"), data.predictions("test")
    probs = {n: torch.as_tensor(_fit(n, val).predict_proba(test)) for n in MERGED + REFERENCES}
    return {
        "name": folder.name,
        "classes": val.n_classes,
        "rows": [val.n_samples, test.n_samples],
        "width_by_size": widths_by_size(val, test),
        "width_and_errors": width_and_errors(val, test),
        "paired": paired(test, probs),
    }


FEW_SETS = 5
"""Below this many sets a family's mean is shown with each set's value, not an interval: the
percentile interval of bootstrap draws of two sets is just their range."""


def _over_sets(values: list[float]) -> str:
    """Mean over sets with a 95% percentile interval from bootstrap draws of the sets (with
    each set's value instead when there are fewer than :data:`FEW_SETS`)."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) == 1:
        return f"{v[0]:.4f}"
    if len(v) < FEW_SETS:
        return f"{v.mean():.4f} (sets: {', '.join(f'{x:.4f}' for x in v)})"
    rng = np.random.default_rng(SEED)
    draws = v[rng.integers(0, len(v), (RESAMPLES, len(v)))].mean(axis=1)
    lo, hi = np.quantile(draws, [0.025, 0.975])
    return f"{v.mean():.4f} [{lo:.4f}, {hi:.4f}]"


def family_tables(family: str, sets: list[dict[str, Any]]) -> list[str]:
    lines = [f"## {family}: {len(sets)} set(s)", ""]
    lines += ["| validation rows fitted | mean width of the top-label interval |", "|---|---|"]
    for size in [str(s) for s in SIZES] + ["all"]:
        got = [s["width_by_size"][size] for s in sets if size in s["width_by_size"]]
        if got:
            lines.append(f"| {size} | {_over_sets(got)} |")
    lines += ["", "| width on | mean |", "|---|---|"]
    for key, words in (
        ("wrong", "wrong test rows"),
        ("right", "right test rows"),
        ("auroc", "AUROC of the width for an error"),
    ):
        lines.append(f"| {words} | {_over_sets([s['width_and_errors'][key] for s in sets])} |")
    ratio = [s["width_and_errors"]["wrong"] / s["width_and_errors"]["right"] for s in sets]
    lines.append(f"| wrong / right | {_over_sets(ratio)} |")
    lines += [
        "",
        "| difference | sets better / tied / worse | mean over sets |",
        "|---|---|---|",
    ]
    for key in sets[0]["paired"]:
        triples = [s["paired"][key] for s in sets]
        better = sum(hi < 0 for _, _, hi in triples)
        worse = sum(lo > 0 for _, lo, _ in triples)
        tied = len(triples) - better - worse
        mean = _over_sets([d for d, _, _ in triples])
        lines.append(f"| {key} | {better} / {tied} / {worse} | {mean} |")
    return lines + [""]


def report(sets: list[dict[str, Any]], root: str) -> str:
    families: dict[int, list[dict[str, Any]]] = {}
    for s in sets:
        families.setdefault(s["classes"], []).append(s)
    lines = [
        "# Venn-Abers on the shared prediction sets: interval widths and merged probabilities",
        "",
        "Written by `scripts/venn_abers_evidence.py` (its docstring says what it does); rerun with",
        "",
        f"    {COMMAND}",
        "",
        f"Seed {SEED}; one thread; {RESAMPLES} bootstrap resamples. Sets: the {len(sets)} "
        f"folders of `{root}`, each fitted on its validation split and judged on its test "
        "split. Intervals over sets are percentile intervals of bootstrap draws of the sets "
        f"(a family of fewer than {FEW_SETS} sets shows each set's value instead); a set is "
        "better / worse when its paired interval over test rows excludes 0.",
        "",
    ]
    for c in sorted(families, reverse=True):
        lines += family_tables(f"{c} classes", families[c])
    return "\n".join(lines)


def show(folder: Path, rows: int = 3) -> str:
    """One set's ``venn-abers-top`` fitted on its validation split: the first ``rows`` right
    and the first ``rows`` wrong test rows (the raw confidence, ``[p0, p1]``, its width and the
    merged probability ``p1 / (1 - p0 + p1)``), then :func:`width_and_errors`' and
    :func:`widths_by_size`' numbers (the set's row of the report's tables)."""
    data = load_prediction_set(folder)
    val, test = data.predictions("val"), data.predictions("test")
    fitted = build_calibrator("venn-abers-top").fit(val)
    p0, p1 = (np.asarray(end) for end in fitted.predict_interval(test))
    merged = np.asarray(fitted.predict_confidence(test))
    confidence = test.probs.max(dim=1).values.numpy()
    right = test.correct.numpy() > 0.5
    picked = [*np.flatnonzero(right)[:rows], *np.flatnonzero(~right)[:rows]]
    lines = [
        f"{folder.name}: venn-abers-top fitted on {val.n_samples} validation rows, "
        f"{test.n_samples} test rows",
        "test row  right  confidence  [p0, p1]            width   merged",
    ]
    for i in picked:
        lines.append(
            f"{i:8d}  {'yes' if right[i] else 'no':5}  {confidence[i]:10.4f}  "
            f"[{p0[i]:.4f}, {p1[i]:.4f}]  {p1[i] - p0[i]:.4f}  {merged[i]:.4f}"
        )
    got = width_and_errors(val, test)
    by_size = widths_by_size(val, test)
    lines += [
        f"mean width: all rows {by_size['all']:.4f}, wrong rows {got['wrong']:.4f} "
        f"({int((~right).sum())} rows), right rows {got['right']:.4f} ({int(right.sum())}); "
        f"AUROC of the width for an error {got['auroc']:.3f}",
        "mean width by validation rows fitted: "
        + ", ".join(f"{size} {width:.4f}" for size, width in by_size.items()),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sets", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--show", action="store_true", help="print one set's intervals")
    args = parser.parse_args()
    if args.show == (args.out is not None):
        parser.error("give exactly one of --out and --show")
    torch.set_num_threads(1)
    if args.show:
        with threadpool_limits(1):
            print(show(args.sets))
        return
    with threadpool_limits(1):
        sets = [one_set(folder) for folder in find_prediction_sets(args.sets)]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "venn-abers.json").write_text(json.dumps(sets, indent=1) + "\n")
    text = report(sets, str(args.sets))
    (args.out / "README.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
