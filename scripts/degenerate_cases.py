"""Every registered calibrator on every degenerate validation set of issue 22
(``tests/helpers/degenerate.py``): what it raised or warned, and its held-out test NLL next to
the uncalibrated model's and temperature scaling's.

    python scripts/degenerate_cases.py                   # the table (Markdown)
    python scripts/degenerate_cases.py --json            # one JSON object
    python scripts/degenerate_cases.py --regularisation  # structured scaling vs TS

To see an older revision's behaviour, run it with that revision's ``src`` first on the path::

    git worktree add /tmp/before REV
    PYTHONPATH=/tmp/before/src python scripts/degenerate_cases.py

The table is the "before / after" evidence of the closing note of issue 22; the matrix test
``tests/posthoc/test_degenerate.py`` asserts the rules it shows. ``--regularisation`` prints
what ``tests/posthoc/test_regularisation.py`` asserts: for every generated problem and
validation size, the held-out NLL of vector / matrix / Dirichlet scaling minus temperature
scaling's (mean and paired 95% interval over the draws) and the worst ratio of one draw.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers.degenerate import STRUCTURED, Case, cases, structured_vs_temperature

from selfcal.metrics import nll
from selfcal.posthoc import build_calibrator, calibrator_names


class TimeLimit(Exception):
    """A fit ran past ``--time-limit`` seconds."""


def _alarm(signum: int, frame: object) -> None:
    raise TimeLimit


def _outcome(name: str, case: Case, limit: int) -> dict[str, object]:
    """Fit ``name`` on the case's validation split (at most ``limit`` seconds); its test NLL
    and what it said."""
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(limit)
    try:
        return _fit_and_score(name, case)
    except TimeLimit:
        return {"status": "timeout", "message": f"no result within {limit} s"}
    finally:
        signal.alarm(0)


def _fit_and_score(name: str, case: Case) -> dict[str, object]:
    kind = case.kind
    (sv, yv), (st, yt) = case.val, case.test
    n_classes = sv.shape[1]
    if name in ("platt",) and n_classes != 2:
        return {"status": "n/a"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            cal = build_calibrator(name).fit(**{kind: sv}, labels=yv)
            p = cal.predict_proba(**{kind: st})
        except ValueError as error:
            return {"status": "error", "message": str(error).splitlines()[0]}
        except Exception as error:  # an internal failure: what the user would meet
            return {"status": "crash", "message": f"{type(error).__name__}: {error}"}
    said = [f"{type(w.message).__name__}: {w.message}" for w in caught]
    value = float(nll(probs=np.asarray(p, dtype=np.float64), labels=yt))
    zeros = int((np.asarray(p)[np.arange(len(yt)), yt] == 0).sum())
    return {"status": "warn" if said else "fit", "nll": value, "zero_true": zeros, "said": said}


def table(limit: int) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for case in cases():
        st, yt = case.test
        raw = float(nll(**{case.kind: st}, labels=yt))
        row: dict[str, object] = {"what": case.what, "raw_test_nll": raw}
        for name in calibrator_names():
            row[name] = _outcome(name, case, limit)
        out[case.name] = row
    return out


def _cell(result: dict[str, object]) -> str:
    if result["status"] in ("n/a", "error", "timeout", "crash"):
        return str(result["status"])
    value = float(result["nll"])  # type: ignore[arg-type]
    text = f"{value:.3g}" if math.isfinite(value) else str(value)
    return text + (" (w)" if result["status"] == "warn" else "")


def markdown(results: dict[str, dict[str, object]]) -> str:
    names = calibrator_names()
    lines = [
        "| case | raw | " + " | ".join(names) + " |",
        "|---" * (len(names) + 2) + "|",
    ]
    for case, row in results.items():
        cells = [_cell(row[n]) for n in names]  # type: ignore[arg-type]
        lines.append(f"| {case} | {row['raw_test_nll']:.3g} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Test NLL after calibration; (w) = warned; error = ValueError. Messages:")
    for case, row in results.items():
        for name in names:
            result = row[name]
            if isinstance(result, dict) and result.get("status") in ("error", "timeout", "crash"):
                lines.append(f"- {case} / {name}: {result['message']}")
            elif isinstance(result, dict):
                for said in result.get("said", []):  # type: ignore[attr-defined]
                    lines.append(f"- {case} / {name}: {said}")
    return "\n".join(lines)


def regularisation() -> str:
    """The regularisation table (Markdown): one row per problem and validation size."""
    lines = [
        "| problem | val rows | TS NLL | " + " | ".join(STRUCTURED) + " |",
        "|---" * (len(STRUCTURED) + 3) + "|",
    ]
    worst = 0.0
    for row in structured_vs_temperature():
        ts = np.asarray(row["ts"])
        cells = []
        for method in STRUCTURED:
            values = np.asarray(row[method])
            d = values - ts
            half = 1.96 * d.std(ddof=1) / np.sqrt(len(d))
            ratio = float((values / ts).max())
            worst = max(worst, ratio)
            cells.append(f"{d.mean():+.4f} ± {half:.4f} (max x{ratio:.3f})")
        lines.append(
            f"| {row['family']} | {row['n_val']} | {ts.mean():.3f} | " + " | ".join(cells) + " |"
        )
    lines.append("")
    lines.append(
        f"Mean test-NLL difference from temperature scaling ± paired 95% half-width over "
        f"{len(ts)} draws, and the largest ratio of one draw; worst ratio overall x{worst:.3f}."
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--regularisation", action="store_true", help="structured scaling vs temperature scaling"
    )
    parser.add_argument(
        "--time-limit", type=int, default=120, help="seconds one fit may take (default 120)"
    )
    args = parser.parse_args()
    if args.regularisation:
        print(regularisation())
        return
    results = table(args.time_limit)
    print(json.dumps(results) if args.json else markdown(results))


if __name__ == "__main__":
    main()
