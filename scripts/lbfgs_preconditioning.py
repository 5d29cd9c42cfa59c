"""Gradient evaluations of the L-BFGS fit of matrix scaling, structured matrix scaling (SMS)
and Dirichlet calibration at 10^4 x 100 under three preconditioners of
``selfcal.posthoc._solvers.lbfgs``: none, the Hessian's diagonal, and its per-class diagonal
blocks (the default).

Usage: ``python scripts/lbfgs_preconditioning.py`` (about a minute on two cores). The logits
are ``benchmarks/bench_calibrators.py``'s synthetic 10^4 x 100 set. "none" hides the
objective's ``hessian_blocks``; "diagonal" keeps only the diagonals of its blocks.
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

import selfcal.posthoc._structured_scaling as structured_scaling
from selfcal.posthoc import build_calibrator
from selfcal.posthoc._solvers import Solution, lbfgs


@dataclass
class Counted:
    """The objective, counting its gradient evaluations, with the preconditioner ``mode``."""

    objective: object
    mode: str
    evaluations: int = 0

    def value_and_gradient(self, theta: torch.Tensor) -> tuple[float, torch.Tensor]:
        self.evaluations += 1
        return self.objective.value_and_gradient(theta)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        if name != "hessian_blocks" or self.mode == "none":
            raise AttributeError(name)
        blocks = self.objective.hessian_blocks  # type: ignore[attr-defined]
        if self.mode == "blocks":
            return blocks
        return lambda theta: torch.diag_embed(blocks(theta).diagonal(dim1=1, dim2=2))


def fit(name: str, mode: str) -> tuple[Solution, int, float]:
    z, y = synthetic(0, 10_000, 100)
    seen: list[tuple[Solution, int]] = []

    def recorded(objective: object, theta: torch.Tensor, max_iter: int) -> Solution:
        counted = Counted(objective, mode)
        solution = lbfgs(counted, theta, max_iter)  # type: ignore[arg-type]
        seen.append((solution, counted.evaluations))
        return solution

    structured_scaling.lbfgs = recorded  # type: ignore[assignment]
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build_calibrator(name).fit(logits=z, labels=y)
    structured_scaling.lbfgs = lbfgs  # type: ignore[assignment]
    return seen[0][0], seen[0][1], time.perf_counter() - start


def main() -> None:
    torch.set_num_threads(2)
    build_calibrator("ts").fit(logits=torch.randn(50, 3), labels=torch.arange(50) % 3)
    print("| calibrator | preconditioner | gradients | objective | fit s |")
    print("|---|---|---:|---:|---:|")
    for name in ("matrix", "sms", "dirichlet"):
        for mode in ("none", "diagonal", "blocks"):
            solution, evaluations, seconds = fit(name, mode)
            print(f"| `{name}` | {mode} | {evaluations} | {solution.loss:.12f} | {seconds:.2f} |")


if __name__ == "__main__":
    main()
