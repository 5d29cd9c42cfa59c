"""Where one run of ``selfcal reproduce benchmark`` spends its time: a cProfile of one
(dataset, method, seed) of the full protocol -- training with the per-epoch checkpoint (the
validation NLL and refinement loss), then the three regimes' evaluations -- in a process that
has already run one seed of the same pair, so imports and first-call costs are excluded, as
in a benchmark worker that runs many groups. One torch thread, as the benchmark's workers.

Usage: ``python scripts/profile_benchmark_run.py spiral-3.5 ce`` (about 20 s for a tabular
set; a minute or two for MNIST-1D). Prints the wall time, the training time, and the
functions with the largest cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import torch

from selfcal.studies.benchmark import Benchmark
from selfcal.studies.benchmark.execute import train_and_evaluate
from selfcal.studies.benchmark.protocol import PROTOCOLS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("method")
    parser.add_argument("--seed", type=int, default=1, help="the seed profiled (seed 0 warms up)")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    protocol = PROTOCOLS["full"]
    specs = [
        s
        for s in Benchmark().specs(protocol)
        if s.dataset == args.dataset and s.method == args.method
    ]
    if not specs:
        raise SystemExit(f"no full-protocol run of {args.method!r} on {args.dataset!r}")
    train_and_evaluate(protocol, next(s for s in specs if s.seed == 0))
    spec = next(s for s in specs if s.seed == args.seed)
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.enable()
    out = train_and_evaluate(protocol, spec)
    profile.disable()
    wall = time.perf_counter() - start
    train = out["memorise"].metrics["train_seconds"]
    name = f"{args.dataset} / {args.method} / seed {args.seed}"
    print(f"{name}: {wall:.2f} s, of which training {train:.2f} s")
    pstats.Stats(profile).sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
