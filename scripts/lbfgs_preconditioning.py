"""Gradient evaluations of the L-BFGS fits of matrix scaling, structured matrix scaling (SMS)
and Dirichlet calibration under three preconditioners of ``selfcal.posthoc._lbfgs.lbfgs``:
none, the Hessian's diagonal, and the diagonal plus each class's weighted-mean outer product
(the default, :meth:`selfcal.posthoc._lbfgs.Preconditioner.from_moments`).

Usage: ``python scripts/lbfgs_preconditioning.py [--sets DIR]`` (about a minute on two
cores): ``benchmarks/bench_calibrators.py``'s synthetic 10^4 x 100 logits in float64, and with
``--sets`` the CIFAR-100 sets of that folder (float32 logits, validation split).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_calibrators import synthetic

from selfcal.posthoc import _likelihoods, build_calibrator
from selfcal.posthoc._lbfgs import Preconditioner

DEFAULT = _likelihoods.AffineLikelihood.preconditioner


def preconditioner(mode: str):
    """The objective's preconditioner under ``mode``."""

    def build(self: _likelihoods.AffineLikelihood, theta: torch.Tensor) -> Preconditioner:
        full = DEFAULT(self, theta)
        if mode == "rank-one":
            return full
        ones = torch.ones_like(full.root)
        root = ones if mode == "none" else full.root  # drop the rank-one part
        return Preconditioner(root, torch.zeros_like(root), torch.ones_like(full.stretch))

    return build


def gradients(name: str, mode: str, z: np.ndarray, y: np.ndarray) -> int:
    count = [0]
    evaluate = _likelihoods.AffineLikelihood.value_and_gradient

    def counted(self: _likelihoods.AffineLikelihood, theta: torch.Tensor):
        count[0] += 1
        return evaluate(self, theta)

    _likelihoods.AffineLikelihood.value_and_gradient = counted  # type: ignore[method-assign]
    _likelihoods.AffineLikelihood.preconditioner = preconditioner(mode)  # type: ignore[method-assign]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            build_calibrator(name).fit(logits=z, labels=y)
    finally:
        _likelihoods.AffineLikelihood.value_and_gradient = evaluate  # type: ignore[method-assign]
        _likelihoods.AffineLikelihood.preconditioner = DEFAULT  # type: ignore[method-assign]
    return count[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(2)
    data = {"synthetic 10^4 x 100 (float64)": synthetic(0, 10_000, 100)}
    if args.sets is not None:
        for folder in sorted(args.sets.glob("*cifar100")):
            with np.load(folder / "val.npz") as val:
                data[f"`{folder.name}` (float32)"] = (val["logits"], val["labels"])
    modes = ("none", "diagonal", "rank-one")
    print("| logits | calibrator | " + " | ".join(modes) + " |")
    print("|---|---|" + "---:|" * len(modes))
    for label, (z, y) in data.items():
        for name in ("matrix", "sms", "dirichlet"):
            counts = [gradients(name, mode, z, y) for mode in modes]
            print(f"| {label} | `{name}` | " + " | ".join(map(str, counts)) + " |")


if __name__ == "__main__":
    main()
