"""What each criterion of `selfcal compare` costs on the other scores: for every prediction
set under a folder, the recommendation by test NLL, by Brier score and by ECE
(:func:`selfcal.posthoc.compare.recommend`, `auto` choosing by the same criterion), and on
how many sets each is significantly better or worse than temperature scaling on each score
(paired 95% bootstrap intervals over the test rows, 1,000 resamples; a verdict only where the
interval excludes 0 at the printed precision). The evidence behind `--criterion`'s default.

Usage: `python scripts/criterion_costs.py --sets ../shared/prediction-sets --out
results/criterion-costs` (about 15 minutes for the 42 shared sets on two cores; one thread,
so reruns are bit-identical).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import torch

from selfcal.io import find_prediction_sets, load_prediction_set
from selfcal.posthoc.compare import CRITERIA, LABELS, SCORES, compare, recommend, verdict

FAMILIES = {4: "MMLU (4 classes)", 10: "CIFAR-10 (10 classes)", 100: "CIFAR-100 (100 classes)"}


def judge(path: Path) -> dict[str, object]:
    """One set: per criterion, the recommendation and its verdict on every score."""
    data = load_prediction_set(path)
    out: dict[str, object] = {"n_classes": data.n_classes}
    for criterion in CRITERIA:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rows = compare(data, criterion=criterion)
        rec = recommend(rows, criterion)
        assert rec is not None, f"{path}: temperature scaling could not be fitted"
        out[criterion] = {
            "use": rec.name,
            "verdicts": {s: verdict(rec.row, s) if rec.name != "ts" else "" for s in SCORES},
            "differences": {s: rec.row.difference.get(s, 0.0) for s in SCORES},
        }
    return out


def tables(found: dict[str, dict[str, object]]) -> list[str]:
    """Per family and overall, per criterion: sets whose recommendation is better / worse
    than TS on each score, and what was recommended."""
    lines = []
    groups = {
        label: [k for k, v in found.items() if v["n_classes"] == c] for c, label in FAMILIES.items()
    }
    groups = {k: v for k, v in groups.items() if v}
    groups["all sets"] = list(found)
    for label, names in groups.items():
        lines += [
            f"### {label}: {len(names)} sets",
            "",
            "| criterion | recommended | "
            + " | ".join(f"{LABELS[s]} better / worse than TS" for s in SCORES)
            + " |",
            "|---|---|" + "---:|" * len(SCORES),
        ]
        for criterion in CRITERIA:
            picks: dict[str, int] = {}
            cells = []
            for s in SCORES:
                said = [found[n][criterion]["verdicts"][s] for n in names]  # type: ignore[index]
                cells.append(f"{said.count('better')} / {said.count('worse')}")
            for n in names:
                use = found[n][criterion]["use"]  # type: ignore[index]
                picks[use] = picks.get(use, 0) + 1
            shown = ", ".join(f"{k} {v}" for k, v in sorted(picks.items(), key=lambda kv: -kv[1]))
            lines.append(f"| {LABELS[criterion]} | {shown} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path("results/criterion-costs"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    found = {
        path.name.removesuffix(".npz"): judge(path) for path in find_prediction_sets(args.sets)
    }
    seconds = time.perf_counter() - start
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sets.json").write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    worse = {
        c: [n for n, v in found.items() if any(x == "worse" for x in v[c]["verdicts"].values())]  # type: ignore[index]
        for c in CRITERIA
    }
    head = [
        "# What each criterion of `selfcal compare` costs on the other scores",
        "",
        f"Command: `python scripts/criterion_costs.py --sets {args.sets} --out {args.out}` "
        f"({len(found)} sets, one thread; this run {seconds:.0f} s).",
        "",
        " ".join(__doc__.split("\n\n")[0].split()),
        "",
        "A set counts as *better* (*worse*) on a score where the recommended calibrator's test "
        "score minus temperature scaling's has a paired 95% interval below (above) 0 at the "
        "printed precision (NLL 4 decimals, ECE and Brier ×100 to 2). Where the recommendation "
        "is temperature scaling itself, it is neither.",
        "",
    ]
    for c in CRITERIA:
        shown = ", ".join(worse[c]) or "none"
        head.append(
            f"- By {LABELS[c]}: the recommendation is significantly worse than TS on another "
            f"score on {len(worse[c])} of {len(found)} sets ({shown})."
        )
    (args.out / "README.md").write_text("\n".join(head + [""] + tables(found)))
    print((args.out / "README.md").read_text())


if __name__ == "__main__":
    main()
