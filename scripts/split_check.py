"""The evidence for :func:`selfcal.shift.check_splits` on the shared third-party prediction sets
(issue 48): how often it flags splits that *are* exchangeable, and whether it flags label-shifted
ones.

1. **False flags.** Each set's validation and test rows are pooled and redrawn ``--resplits``
   times into a validation and a test split of the original sizes (a uniform random partition:
   exchangeable by construction), and each redraw is checked. The flag rate, with its exact
   (Clopper--Pearson) 95% interval, per family (sets with the same number of classes) and
   overall, beside the level -- at the default level 0.01 and, from the same p-values, at 0.05
   and 0.10 (where the excess of a liberal test would show sooner); and the two tests' rejection
   rates at ``level / 2``. Each set's original split is checked too.
2. **Label-shifted splits**, from one CIFAR-10 set (``--shifted``): the test split resampled to
   97% one class with seven classes absent (the example of issue 48), and a mild shift -- one
   class's share doubled, from 10% to 2/11 -- checked at the full size and, redrawn
   ``--draws`` times, at test sizes from 100 to 2,000 rows (the power), beside the same draws
   without a shift. The label p-values of further 500-row draws with the doubled class are
   cross-checked against ``scipy.stats.permutation_test`` with the same statistic.

Deterministic: one seed, one thread (numpy, scipy and torch), so a rerun writes the same bytes.
About two minutes of CPU on one thread; run it with the other heavy jobs' lock::

    flock /tmp/selfcal-heavy.lock python scripts/split_check.py ../shared/prediction-sets \\
        --out results/split-check

It writes ``split-check.json`` (every p-value) and ``README.md`` (the tables) to ``--out``, and
prints the README.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import stats
from threadpoolctl import threadpool_limits

from selfcal.io import PredictionSet, find_prediction_sets, load_prediction_set
from selfcal.predictions import Predictions
from selfcal.shift import LEVEL, RESAMPLES, check_splits

SEED = 0
LEVELS = (0.01, 0.05, 0.10)
"""The levels the false-flag rate is reported at (from the same p-values)."""
SHIFTED_CLASS = 3
"""The class the shifts favour (CIFAR-10's "cat", the least confidently predicted)."""
POWER_SIZES = (100, 200, 500, 1000, 2000)
CROSS_CHECKS = 5
"""Draws whose label p-value is recomputed by scipy."""
COMMAND = (
    "flock /tmp/selfcal-heavy.lock python scripts/split_check.py ../shared/prediction-sets "
    "--out results/split-check"
)


# ----------------------------------------------------------------------------- helpers
def pooled(data: PredictionSet) -> Predictions:
    """A set's validation and test rows as one :class:`Predictions` (validation first)."""
    scores = np.concatenate([data.val, data.test])
    labels = np.concatenate([data.val_labels, data.test_labels])
    build = Predictions.from_logits if data.kind == "logits" else Predictions.from_probs
    return build(scores, labels)


def rows(index: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.sort(index))


def interval(flags: int, n: int) -> dict[str, float]:
    """The rate ``flags / n`` with its exact (Clopper--Pearson) 95% interval."""
    ci = stats.binomtest(flags, n).proportion_ci(0.95, method="exact")
    return {"flags": flags, "n": n, "rate": flags / n, "low": ci.low, "high": ci.high}


def rng_for(*key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([SEED, *key]))


# ----------------------------------------------------------------------------- false flags
def resplit_p_values(data: PredictionSet, set_index: int, resplits: int) -> dict[str, Any]:
    """The original split's check and both p-values of ``resplits`` random re-splits."""
    everything, n_val = pooled(data), len(data.val_labels)
    original = check_splits(
        everything.subset(slice(0, n_val)), everything.subset(slice(n_val, None))
    )
    rng, label_p, confidence_p = rng_for(1, set_index), [], []
    for r in range(resplits):
        order = rng.permutation(everything.n_samples)
        check = check_splits(
            everything.subset(rows(order[:n_val])), everything.subset(rows(order[n_val:])), seed=r
        )
        label_p.append(check.label_test.p_value)
        confidence_p.append(check.confidence_test.p_value)
    return {
        "n_classes": data.n_classes,
        "n_val": n_val,
        "n_test": len(data.test_labels),
        "original": original.to_dict(),
        "label_p": label_p,
        "confidence_p": confidence_p,
    }


def rates(sets: list[dict[str, Any]]) -> dict[str, Any]:
    """Flag rates with intervals at each level of :data:`LEVELS`, and each test's rejection
    rate at ``level / 2``, over the re-splits of ``sets``."""
    label_p = np.concatenate([s["label_p"] for s in sets])
    confidence_p = np.concatenate([s["confidence_p"] for s in sets])
    out: dict[str, Any] = {"sets": len(sets)}
    for level in LEVELS:
        label, confidence = label_p <= level / 2, confidence_p <= level / 2
        out[f"{level:g}"] = {
            "flag": interval(int((label | confidence).sum()), len(label_p)),
            "labels": interval(int(label.sum()), len(label_p)),
            "confidence": interval(int(confidence.sum()), len(label_p)),
        }
    return out


def false_flags(roots: list[Path], resplits: int) -> dict[str, Any]:
    per_set = {}
    for index, path in enumerate(roots):
        data = load_prediction_set(path)
        per_set[data.name] = resplit_p_values(data, index, resplits)
    families = sorted({s["n_classes"] for s in per_set.values()})
    summary = {
        f"{c} classes": rates([s for s in per_set.values() if s["n_classes"] == c])
        for c in families
    }
    summary["all"] = rates(list(per_set.values()))
    return {"resplits": resplits, "sets": per_set, "summary": summary}


# ----------------------------------------------------------------------------- shifted splits
def class_rows(labels: np.ndarray, n_classes: int) -> list[np.ndarray]:
    return [np.flatnonzero(labels == c) for c in range(n_classes)]


def draw_rows(by_class: list[np.ndarray], counts: np.ndarray, rng: np.random.Generator):
    """``counts[c]`` rows of each class ``c``, without replacement."""
    picked = [rng.choice(r, size=int(k), replace=False) for r, k in zip(by_class, counts)]
    return np.concatenate(picked)


def issue_shift(by_class: list[np.ndarray]) -> np.ndarray:
    """Every test row of :data:`SHIFTED_CLASS` and 1.5% as many of each of two other classes
    (97% one class, seven classes absent), the first rows of each."""
    main = by_class[SHIFTED_CLASS]
    few = round(len(main) * 0.015 / 0.97)
    others = [c for c in range(len(by_class)) if c != SHIFTED_CLASS][:2]
    return np.concatenate([main, *(by_class[c][:few] for c in others)])


def doubled_shares(n_classes: int) -> np.ndarray:
    """Class shares with :data:`SHIFTED_CLASS`'s doubled against the others: 2 / (C + 1)."""
    weights = np.ones(n_classes)
    weights[SHIFTED_CLASS] = 2
    return weights / weights.sum()


def mild_shift(by_class: list[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """Every test row of :data:`SHIFTED_CLASS` and half of every other class's, at random."""
    counts = np.array(
        [len(r) if c == SHIFTED_CLASS else len(r) // 2 for c, r in enumerate(by_class)]
    )
    return draw_rows(by_class, counts, rng)


def power(
    val: Predictions, test: Predictions, draws: int
) -> dict[str, dict[str, dict[str, float]]]:
    """Flag rates of ``draws`` test splits of each size in :data:`POWER_SIZES` (class counts
    multinomial with the doubled shares, or the test split's own shares, rows without
    replacement) checked against the whole validation split."""
    labels = test.require_labels().numpy()
    by_class, n_classes = class_rows(labels, test.n_classes), test.n_classes
    own = np.bincount(labels, minlength=n_classes) / len(labels)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for index, (shift, shares) in enumerate(
        (("doubled", doubled_shares(n_classes)), ("none", own))
    ):
        rng = rng_for(3, index)
        out[shift] = {}
        for size in POWER_SIZES:
            checks = [
                check_splits(
                    val,
                    test.subset(rows(draw_rows(by_class, rng.multinomial(size, shares), rng))),
                    seed=d,
                )
                for d in range(draws)
            ]
            out[shift][str(size)] = {
                "flag": interval(sum(not c.exchangeable for c in checks), draws),
                "labels": interval(sum(c.labels_differ for c in checks), draws),
                "confidence": interval(sum(c.confidence_differs for c in checks), draws),
            }
    return out


def scipy_label_p(
    val_y: np.ndarray, test_y: np.ndarray, n_classes: int, rng: np.random.Generator
) -> float:
    """``scipy.stats.permutation_test``'s p-value of the same TV statistic (9,999 resamples)."""

    def tv(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
        def shares(a: np.ndarray) -> np.ndarray:
            a = np.moveaxis(a, axis, -1)
            return np.stack([(a == c).mean(-1) for c in range(n_classes)], -1)

        return 0.5 * np.abs(shares(x) - shares(y)).sum(-1)

    result = stats.permutation_test(
        (val_y, test_y),
        tv,
        permutation_type="independent",
        alternative="greater",
        n_resamples=9999,
        vectorized=True,
        batch=200,
        rng=rng_for(4),
    )
    return float(result.pvalue)


def cross_checks(val: Predictions, test: Predictions) -> list[dict[str, float]]:
    """Our label p-value and scipy's on :data:`CROSS_CHECKS` test splits of 500 rows with the
    doubled class, and the bound on their difference: four standard errors of the difference of
    two Monte Carlo estimates from 9,999 permutations, ``4 sqrt(2 p (1 - p) / 9999)``."""
    labels = test.require_labels().numpy()
    by_class, rng = class_rows(labels, test.n_classes), rng_for(4)
    out = []
    for draw in range(CROSS_CHECKS):
        index = np.sort(
            draw_rows(by_class, rng.multinomial(500, doubled_shares(test.n_classes)), rng)
        )
        ours = check_splits(val, test.subset(rows(index)), seed=draw).label_test.p_value
        theirs = scipy_label_p(val.require_labels().numpy(), labels[index], test.n_classes, rng)
        bound = 4 * np.sqrt(2 * theirs * (1 - theirs) / 9999) + 1 / 10_000
        out.append({"ours": ours, "scipy": theirs, "bound": float(bound)})
    return out


def shifted(path: Path, draws: int) -> dict[str, Any]:
    data = load_prediction_set(path)
    val, test = data.predictions("val"), data.predictions("test")
    by_class = class_rows(data.test_labels, data.n_classes)
    strong = check_splits(val, test.subset(rows(issue_shift(by_class))))
    mild_rows = mild_shift(by_class, rng_for(2))
    mild = check_splits(val, test.subset(rows(mild_rows)))
    return {
        "set": data.name,
        "class": SHIFTED_CLASS,
        "issue_shift": strong.to_dict(),
        "mild_shift": mild.to_dict(),
        "cross_checks": cross_checks(val, test),
        "power": power(val, test, draws),
    }


def write_shifted(path: Path, out: Path) -> None:
    """``out/val.npz`` (the set's validation split) and ``out/test.npz`` (its test rows of
    :func:`issue_shift`), with the set's arrays as stored."""
    data = load_prediction_set(path)
    keep = issue_shift(class_rows(data.test_labels, data.n_classes))
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / "val.npz", **{data.kind: data.val, "labels": data.val_labels})
    np.savez(out / "test.npz", **{data.kind: data.test[keep], "labels": data.test_labels[keep]})
    print(f"wrote {out}: {len(data.val_labels)} validation rows, {len(keep)} test rows")


# ----------------------------------------------------------------------------- report
def pct(cell: dict[str, float]) -> str:
    return (
        f"{cell['flags']}/{cell['n']} = {cell['rate']:.2%} [{cell['low']:.2%}, {cell['high']:.2%}]"
    )


def false_flag_table(summary: dict[str, Any]) -> list[str]:
    lines = [
        "| family | sets | level | flagged [95% CI] | label test at level/2 "
        "| confidence test at level/2 |",
        "|---|---|---|---|---|---|",
    ]
    for family, cells in summary.items():
        for level in LEVELS:
            c = cells[f"{level:g}"]
            lines.append(
                f"| {family} | {cells['sets']} | {level:g} | {pct(c['flag'])} | "
                f"{pct(c['labels'])} | {pct(c['confidence'])} |"
            )
    return lines


def original_lines(sets: dict[str, Any]) -> list[str]:
    flagged = [name for name, s in sets.items() if not s["original"]["exchangeable"]]
    lines = [f"Original splits flagged at level {LEVEL:g}: {len(flagged)} of {len(sets)}."]
    lines += [f"- `{name}`: {sets[name]['original']['message']}" for name in flagged]
    return lines


def check_lines(title: str, check: dict[str, Any]) -> list[str]:
    labels, conf = check["labels"], check["confidence"]
    return [
        f"**{title}** ({check['n_val']:,} validation / {check['n_test']:,} test rows): "
        f"label total variation {labels['total_variation']:.4f}, p = {labels['p_value']:.4g} "
        f"({labels['exceedances']} of {labels['resamples']:,} permutations as large); "
        f"top-confidence KS {conf['ks']:.4f}, p = {conf['p_value']:.4g} ({conf['method']}); "
        f"exchangeable: {check['exchangeable']}.",
        "",
        f"> {check['message']}",
    ]


def cross_check_lines(checks: list[dict[str, float]]) -> list[str]:
    lines = [
        "Cross-check: the label p-value of further 500-row test splits with the doubled class, "
        "ours and `scipy.stats.permutation_test`'s (the same total-variation statistic, 9,999 "
        "resamples each); they differ by Monte Carlo error only, bounded by "
        "`4 sqrt(2 p (1 - p) / 9999)`:",
        "",
        "| draw | ours | scipy | difference | bound |",
        "|---|---|---|---|---|",
    ]
    for i, c in enumerate(checks):
        difference = c["ours"] - c["scipy"]
        lines.append(
            f"| {i} | {c['ours']:.4f} | {c['scipy']:.4f} | {difference:+.4f} | {c['bound']:.4f} |"
        )
    within = sum(abs(c["ours"] - c["scipy"]) <= c["bound"] for c in checks)
    return [*lines, "", f"Within the bound: {within} of {len(checks)}."]


def power_table(table: dict[str, Any]) -> list[str]:
    lines = [
        "| test rows | shift | flagged [95% CI] | label test at level/2 "
        "| confidence test at level/2 |",
        "|---|---|---|---|---|",
    ]
    for size in POWER_SIZES:
        for shift in ("doubled", "none"):
            c = table[shift][str(size)]
            cells = (pct(c["flag"]), pct(c["labels"]), pct(c["confidence"]))
            lines.append(f"| {size:,} | {shift} | {' | '.join(cells)} |")
    return lines


def doubled(check: dict[str, Any]) -> str:
    """``10.0% to 18.2%``: the largest class share's change of a check."""
    c = check["labels"]["largest_differences"][0]
    return f"{c['val_share']:.1%} of validation, {c['test_share']:.1%} of test"


def readme(result: dict[str, Any]) -> str:
    flags, shift = result["false_flags"], result["shifted"]
    test_rows = shift["mild_shift"]
    lines = [
        "# Are validation and test exchangeable? `check_splits` on the shared prediction sets",
        "",
        "Written by `scripts/split_check.py` (its docstring says what it does); rerun with",
        "",
        f"    {COMMAND}",
        "",
        f"Level {LEVEL:g} overall (each test at level / 2, Bonferroni); {RESAMPLES:,} permutation "
        f"tables per label test; seed {SEED}; one thread. Sets: the 42 folders of "
        "`../shared/prediction-sets` (third-party CIFAR-10, CIFAR-100 and MMLU models).",
        "",
        "## False flags: random re-splits of each set",
        "",
        f"Each set's validation and test rows pooled and redrawn {flags['resplits']} times at the "
        "original sizes (exchangeable by construction). Flag rate with its exact 95% interval:",
        "",
        *false_flag_table(flags["summary"]),
        "",
        *original_lines(flags["sets"]),
        "",
        f"## Label-shifted test splits of `{shift['set']}`",
        "",
        *check_lines(
            f"Issue 48's shift: test 97% class {shift['class']}, seven classes absent",
            shift["issue_shift"],
        ),
        "",
        *check_lines(f"Class {shift['class']} doubled ({doubled(test_rows)})", test_rows),
        "",
        *cross_check_lines(shift["cross_checks"]),
        "",
        f"Power: test splits of each size drawn {result['draws']} times with class "
        f"{shift['class']}'s share doubled (`doubled`) or with the test split's own shares "
        "(`none`), each checked against the whole validation split:",
        "",
        *power_table(shift["power"]),
        "",
        "The `none` rows stay below the level: the validation split holds exactly 500 rows of "
        "each class (every shared set was split stratified by label, which is also why every "
        "original split's label p-value is 1), closer to the test shares than a random split "
        "would be.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets", type=Path, help="a folder of prediction sets")
    parser.add_argument("--out", type=Path, help="write split-check.json and README.md here")
    parser.add_argument("--resplits", type=int, default=50)
    parser.add_argument("--draws", type=int, default=100)
    parser.add_argument("--shifted", default="chenyaofo_resnet56_cifar10")
    parser.add_argument(
        "--write-shifted",
        type=Path,
        metavar="DIR",
        help="only write the --shifted set with issue 48's test split (97%% one class) as a "
        "prediction set, DIR/val.npz and DIR/test.npz, for `selfcal compare DIR`",
    )
    args = parser.parse_args(argv)
    if args.write_shifted:
        write_shifted(args.sets / args.shifted, args.write_shifted)
        return
    torch.set_num_threads(1)
    with threadpool_limits(1):
        result = {
            "level": LEVEL,
            "resamples": RESAMPLES,
            "seed": SEED,
            "draws": args.draws,
            "false_flags": false_flags(find_prediction_sets(args.sets), args.resplits),
            "shifted": shifted(args.sets / args.shifted, args.draws),
        }
    text = readme(result)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "split-check.json").write_text(json.dumps(result, indent=1) + "\n")
        (args.out / "README.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
