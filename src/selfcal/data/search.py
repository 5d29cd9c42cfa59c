"""Rerun the dev-time searches that fixed the synthetic generators' constants.

``python -m selfcal.data.search blobs``
    scores centre draws 0..999 for Blobs (:func:`selfcal.data.blobs.search_centres`, ~1-2 min)
    and prints the draws closest to the target Bayes accuracies; the best one is
    :data:`selfcal.data.blobs.BLOB_CENTRES`.
``python -m selfcal.data.search spirals [--arm-scales 2.6 2.65 2.7]``
    prints the Bayes and 51-NN accuracy of each arm scale at both noise levels
    (:func:`selfcal.data.spirals.calibration_table`, a few minutes), from which
    :data:`selfcal.data.spirals.ARM_SCALE` was chosen.

These are not run by the tests; they exist so anyone can check how the constants were chosen.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from selfcal.data.blobs import search_centres
from selfcal.data.spirals import calibration_table


def print_blob_search(top: int) -> None:
    """Print the ``top`` best centre draws."""
    print("distance  seed  bayes@1.3  bayes@1.7")
    for dist, seed, a13, a17 in search_centres()[:top]:
        print(f"{dist:8.4f}  {seed:4d}  {a13:9.4f}  {a17:9.4f}")


def print_spiral_table(arm_scales: Sequence[float]) -> None:
    """Print Bayes and 51-NN accuracy for each arm scale and noise level."""
    print("    a  sigma   bayes   51-NN")
    for a, s, bayes, knn in calibration_table(arm_scales):
        print(f"{a:5.2f}  {s:5.1f}  {bayes:.4f}  {knn:.4f}")


def main(argv: Sequence[str] | None = None) -> None:
    """Command-line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m selfcal.data.search", description=__doc__)
    sub = parser.add_subparsers(dest="which", required=True)
    blobs = sub.add_parser("blobs", help="rerun the Blobs centre search")
    blobs.add_argument("--top", type=int, default=10, help="how many draws to print")
    spirals = sub.add_parser("spirals", help="recompute the spiral arm-scale table")
    spirals.add_argument("--arm-scales", type=float, nargs="+", default=[2.6, 2.65, 2.7])
    args = parser.parse_args(argv)
    if args.which == "blobs":
        print_blob_search(args.top)
    else:
        print_spiral_table(args.arm_scales)


if __name__ == "__main__":
    main()
