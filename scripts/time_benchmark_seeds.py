"""The wall time of ``selfcal reproduce benchmark``'s full protocol restricted to some seeds,
in a fresh store, with the CLI's sweep (``run_study``: worker processes, one torch thread
each): every dataset, method, candidate and regime of those seeds. The full protocol runs ten
seeds whose groups cost alike, so ``10 / len(seeds)`` times this is a projection of the full
run's wall time (not a measurement of it: the last groups of a sweep may leave a worker idle).

Usage: ``python scripts/time_benchmark_seeds.py --seeds 0 --workers 2`` (about a tenth of the
full benchmark; run it on otherwise quiet cores). The store and report go to a temporary
folder and are deleted; only the timing is printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

from selfcal.experiments.store import ResultsStore
from selfcal.experiments.study import run_study
from selfcal.studies.benchmark import Benchmark
from selfcal.studies.benchmark.protocol import PROTOCOLS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    full = PROTOCOLS["full"]
    protocol = dataclasses.replace(full, seeds=tuple(args.seeds))
    study = Benchmark()
    n_specs = len(study.specs(protocol))
    with tempfile.TemporaryDirectory() as folder:
        with ResultsStore(Path(folder) / "benchmark.sqlite") as store:
            start = time.perf_counter()
            summary = run_study(study, protocol, store, workers=args.workers)
            wall = time.perf_counter() - start
    scale = len(full.seeds) / len(args.seeds)
    print(
        f"seeds {args.seeds}: {n_specs} specs ({summary.done} done, {summary.failed} failed) in "
        f"{wall:.0f} s of wall time on {args.workers} worker(s); x {scale:g} seeds = "
        f"{wall * scale / 3600:.2f} h projected for the full protocol's {len(full.seeds)} seeds"
    )


if __name__ == "__main__":
    main()
