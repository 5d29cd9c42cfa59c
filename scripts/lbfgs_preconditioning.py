"""Iterations of the L-BFGS fit of structured matrix scaling (SMS) and Dirichlet calibration at
10^4 x 100, with and without the diagonal preconditioning of ``selfcal.posthoc._solvers.lbfgs``.

Usage: ``python scripts/lbfgs_preconditioning.py`` (about a minute on two cores). The logits
are ``benchmarks/bench_calibrators.py``'s synthetic 10^4 x 100 set; the preconditioning is
switched off by hiding the objective's ``diagonal_hessian``.
"""

from __future__ import annotations

import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_calibrators import synthetic

import selfcal.posthoc.linear as linear
from selfcal.posthoc import build_calibrator
from selfcal.posthoc._solvers import Solution, lbfgs


@dataclass(frozen=True)
class Plain:
    """The objective without its ``diagonal_hessian``: L-BFGS unpreconditioned."""

    objective: object

    def value_and_gradient(self, theta: torch.Tensor) -> tuple[float, torch.Tensor]:
        return self.objective.value_and_gradient(theta)  # type: ignore[attr-defined]


def fit(name: str, precondition: bool) -> tuple[Solution, float]:
    z, y = synthetic(0, 10_000, 100)
    seen: list[Solution] = []

    def recorded(objective: object, theta: torch.Tensor, max_iter: int) -> Solution:
        solution = lbfgs(objective if precondition else Plain(objective), theta, max_iter)
        seen.append(solution)
        return solution

    linear.lbfgs = recorded  # type: ignore[assignment]
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build_calibrator(name).fit(logits=z, labels=y)
    linear.lbfgs = lbfgs  # type: ignore[assignment]
    return seen[0], time.perf_counter() - start


def main() -> None:
    torch.set_num_threads(1)
    print("| calibrator | preconditioned | L-BFGS iterations | objective | fit s |")
    print("|---|---|---:|---:|---:|")
    for name in ("sms", "dirichlet"):
        for precondition in (False, True):
            solution, seconds = fit(name, precondition)
            print(
                f"| `{name}` | {'yes' if precondition else 'no'} | {solution.iterations} | "
                f"{solution.loss:.12f} | {seconds:.2f} |"
            )


if __name__ == "__main__":
    main()
