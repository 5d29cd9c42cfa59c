"""SECE's two algorithms above 2,048 samples -- exact kernel sums in blocks of sorted
confidences, and the FFT grid -- and which one ``method="auto"`` picks.

Each case is 201 bootstrap rows (a point estimate and 200 resamples, as ``selfcal evaluate``
computes) of top-label confidences either spread over ``[0.15, 1]`` or crowded near 1 (``1 -
0.05 u^3``), with seeded soft accuracies. The table gives each path's median seconds, the
number of kernel pairs within ``12 h`` (the blocked path's cost), the grid's ``n log2 n`` (its
cost), the largest difference between the two paths' sums ratio ``SACC_i``, and ``auto``'s
choice; ``auto`` should pick the faster path (``SECE_GRID_COST_IN_PAIRS`` sets the exchange
rate between the two costs).

    python benchmarks/bench_sece.py --repeats 3 --threads 2
"""

from __future__ import annotations

import argparse
import platform
from functools import partial
from pathlib import Path

import torch
from _timing import interleaved_medians, write_report

from selfcal.metrics.smooth.kernel import (
    SECE_GRID_COST_IN_PAIRS,
    _sums_blocked,
    _sums_grid,
    path_costs,
    sece_method,
)

RESULTS = Path(__file__).parent / "results" / "sece.md"
BANDWIDTH = 0.01
CASES = [
    (5_000, "spread"),
    (10_000, "spread"),
    (20_000, "spread"),
    (5_000, "crowded"),
    (10_000, "crowded"),
]


def confidences(n: int, kind: str, gen: torch.Generator) -> torch.Tensor:
    u = torch.rand(n, generator=gen, dtype=torch.float64)
    return 0.15 + 0.85 * u if kind == "spread" else 1 - 0.05 * u**3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    lines = [
        "# SECE above 2,048 samples: blocked exact sums against the FFT grid",
        "",
        f"torch {torch.__version__}, {args.threads} thread(s), {platform.machine()}; median of "
        f"{args.repeats} interleaved rounds after a warm-up; 201 bootstrap rows. Command: "
        f"`python benchmarks/bench_sece.py --repeats {args.repeats} --threads {args.threads}`",
        "",
        "| N | confidences | blocked s | grid s | pairs | grid n log2 n | pairs / (n log2 n) "
        "| max abs SACC difference | `auto` picks |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for n, kind in CASES:
        z = confidences(n, kind, gen)
        mass = torch.randint(0, 3, (201, n), generator=gen).double()
        mass_acc = mass * torch.rand(n, generator=gen, dtype=torch.float64)
        args_ = (z, mass_acc, mass, BANDWIDTH)
        rows = {"blocked": partial(_sums_blocked, *args_), "grid": partial(_sums_grid, *args_)}
        times = interleaved_medians(rows, args.repeats)
        (num_b, den_b), (num_g, den_g) = rows["blocked"](), rows["grid"]()
        gap = float((num_b / den_b - num_g / den_g).abs().max())
        pairs, grid_cost = path_costs(z.sort().values, BANDWIDTH)
        lines.append(
            f"| {n:,} | {kind} | {times['blocked']:.3f} | {times['grid']:.3f} | {pairs:.2e} | "
            f"{grid_cost:.2e} | {pairs / grid_cost:.1f} | {gap:.1e} | "
            f"{sece_method(z, BANDWIDTH)} |"
        )
    lines += [
        "",
        f"`auto` takes the blocked exact path when pairs <= {SECE_GRID_COST_IN_PAIRS:g} x the "
        "grid's n log2 n.",
    ]
    write_report("\n".join(lines) + "\n", RESULTS)


if __name__ == "__main__":
    main()
