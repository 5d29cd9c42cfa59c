"""Check that a refactor moves no number: record every study's numbers at one revision, record
them again at another, and compare.

``record OUT`` writes, into the folder ``OUT``:

* ``<study>.json``: ``selfcal reproduce <study> --quick --json`` of every registered study (each
  in a fresh store, two workers);
* ``full-sample.json``: the metrics (and the first values of every artefact) of a fixed sample of
  every study's *full* protocol -- the first seed, one run per (dataset, method, regime) on the
  smaller datasets -- executed through the study engine exactly as ``selfcal reproduce`` executes
  them (the protocol's fixed thread count), so the long protocols are checked too, not only the
  quick ones. A study whose full protocol reads another's store that is not there (``posthoc``
  and ``conformal`` read ``results/benchmark.sqlite``) is recorded as skipped, with the reason.

``compare A B`` compares two such folders and exits non-zero when any number differs. Wall-clock
fields (``seconds``, ``*_seconds``, ``time*``, ``seconds.*``) are ignored: they are measurements,
not results.

To compare a revision with the working tree (the selfcal of ``PYTHONPATH`` is the one recorded)::

    git worktree add /tmp/before REV
    PYTHONPATH=/tmp/before/src python scripts/same_numbers.py record /tmp/numbers-before
    python scripts/same_numbers.py record /tmp/numbers-after
    python scripts/same_numbers.py compare /tmp/numbers-before /tmp/numbers-after
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

SAMPLE = "full-sample.json"
SMALL_DATASETS = {
    "bo4sc": ("blobs-1.7", "breast-cancer"),
    "benchmark": ("digits-images", "blobs-1.7"),
    "bsce-gra": ("digits-images",),
    "meta-reg": ("digits-images",),
    "bo4sc-images": ("digits-images",),
}
"""The datasets of each study's full-protocol sample (every dataset of a study not listed)."""
IMAGE_REGIME = "short"


def record(out: Path) -> None:
    from selfcal.experiments.study import study_names
    from selfcal.studies import import_all

    import_all()
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for name in study_names():
        store = out / f"{name}.sqlite"
        for stale in out.glob(f"{name}.sqlite*"):
            stale.unlink()
        command = [
            sys.executable,
            "-m",
            "selfcal.cli",
            "reproduce",
            name,
            "--quick",
            "--json",
            "--workers",
            "2",
            "--store",
            str(store),
            "--out",
            str(out / f"report-{name}"),
        ]
        payload = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
        (out / f"{name}.json").write_text(payload.stdout)
        print(f"{name}: quick protocol recorded", flush=True)
    (out / SAMPLE).write_text(json.dumps(full_sample(), sort_keys=True, indent=0))


def full_sample() -> dict[str, Any]:
    """The sample's results by run key (module doc)."""
    import numpy as np

    from selfcal.experiments.study import fixed_threads, get_study, study_names
    from selfcal.studies import import_all

    import_all()
    results: dict[str, Any] = {}
    for name in study_names():
        study = get_study(name)
        protocol = study.protocol("full")
        groups: dict[Any, list[Any]] = {}
        try:
            for spec in sample(name, study.specs(protocol)):
                groups.setdefault(study.batch_by(spec), []).append(spec)
            for group in groups.values():
                with fixed_threads(protocol.threads):
                    outcome = study.execute(protocol, group)
                for spec, result in zip(group, outcome, strict=True):
                    artefacts = {
                        k: np.asarray(v, dtype=float).ravel()[:50].tolist()
                        for k, v in sorted(result.artefacts.items())
                    }
                    results[spec.key] = {"metrics": dict(result.metrics), "artefacts": artefacts}
        except FileNotFoundError as missing:  # a study that reads another's store (posthoc)
            results[f"skipped {name}"] = str(missing).splitlines()[0]
            print(f"{name}: full protocol skipped: {missing}", flush=True)
            continue
        print(f"{name}: {len(groups)} groups of the full protocol recorded", flush=True)
    return results


def sample(name: str, specs: list[Any]) -> list[Any]:
    """The first seed's first run per (dataset, method, regime) on the study's small datasets
    (none when the protocol has no run here: ``conformal`` builds its runs from the benchmark's
    store)."""
    if not specs:
        return []
    first = min(spec.seed for spec in specs)
    chosen, seen = [], set()
    for spec in specs:
        regime = spec.hparams.get("regime", "")
        if spec.seed != first or spec.dataset not in SMALL_DATASETS.get(name, (spec.dataset,)):
            continue
        if name in ("bsce-gra", "meta-reg", "bo4sc-images") and regime != IMAGE_REGIME:
            continue
        if (spec.dataset, spec.method, regime) not in seen:
            seen.add((spec.dataset, spec.method, regime))
            chosen.append(spec)
    return chosen


def timing(key: str) -> bool:
    """Whether ``key`` names a wall-clock field (``seconds``, ``*_seconds``, ``time*``, or a
    per-calibrator fit time of the post-hoc study, ``seconds.<calibrator>``)."""
    return (
        key in ("seconds", "train_seconds")
        or key.endswith("_seconds")
        or key.startswith(("time", "seconds."))
    )


def without_timings(value: Any) -> Any:
    """``value`` without wall-clock fields (and aggregates of them)."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if not timing(k)}
    if isinstance(value, list):
        return [
            without_timings(v)
            for v in value
            if not (isinstance(v, dict) and timing(str(v.get("metric", ""))))
        ]
    return value


def compare(a: Path, b: Path) -> int:
    differing = 0
    for path in sorted(a.glob("*.json")):
        left = without_timings(json.loads(path.read_text()))
        right = without_timings(json.loads((b / path.name).read_text()))
        keys = [k for k in left if left[k] != right.get(k)] if isinstance(left, dict) else []
        same = left == right
        differing += not same
        count = len(left.get("runs", left)) if isinstance(left, dict) else 0
        print(
            f"{path.name}: {'identical' if same else 'DIFFERENT'} ({count} runs)"
            + ("" if same else f"; differing keys: {keys[:5]}")
        )
    return 1 if differing else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("record").add_argument("out", type=Path)
    both = commands.add_parser("compare")
    both.add_argument("a", type=Path)
    both.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.command == "record":
        record(args.out)
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
