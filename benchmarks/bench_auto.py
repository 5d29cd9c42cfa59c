"""Benchmark: ``auto`` (:class:`selfcal.posthoc.AutoCalibration`) on 10^4 x 100 logits, and
the floor its cross-validation sets.

``auto`` fits every candidate on ``K - 1`` folds ``K`` times, then refits the chosen one on
every row. Structured matrix scaling (SMS, the first candidate) is the costly one: its
``K`` fold fits on ``(K - 1) / K`` of the rows plus its refit cost about ``K`` fits on all
rows. So ``auto`` with ``K`` folds cannot take less than ``K`` times one SMS fit on all rows,
whatever the other candidates cost; this benchmark times that fit beside ``auto`` with 5
(the default), 3 and 2 folds, and each candidate's share of the default's cross-validation.

Data: ``benchmarks/bench_calibrators.py``'s synthetic 10^4 x 100 float64 logits (seed 1).
Medians of ``--repeats`` interleaved rounds after a warm-up call, at ``--threads`` torch
threads (default 2: these machines' two cores).

Run: ``python benchmarks/bench_auto.py [--repeats 3] [--threads 2]``; writes
``benchmarks/results/auto.md``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import warnings
from pathlib import Path

import numpy as np
import torch
from _timing import interleaved_times, write_report
from bench_calibrators import synthetic

import selfcal
from selfcal.posthoc import AutoCalibration, build_calibrator

RESULTS = Path(__file__).parent / "results" / "auto.md"
FOLDS = (5, 3, 2)
SINGLE = ("sms", "svs", "ets", "ts")


def fitted_auto(z: np.ndarray, y: np.ndarray, folds: int) -> AutoCalibration:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoCalibration(n_folds=folds, kind="logits").fit(z, y)


def run(args: argparse.Namespace, command: str) -> str:
    torch.set_num_threads(args.threads)
    z, y = synthetic(1, 10_000, 100)
    rows = {f"`auto`, {k} folds": (lambda k=k: fitted_auto(z, y, k)) for k in FOLDS}
    for name in SINGLE:
        rows[f"one `{name}` fit on all rows"] = lambda n=name: build_calibrator(
            n, kind="logits"
        ).fit(z, y)
    times = {n: statistics.median(t) for n, t in interleaved_times(rows, args.repeats).items()}
    sms = times["one `sms` fit on all rows"]
    lines = [
        "# `auto` on 10^4 x 100 logits, and the floor of its cross-validation",
        "",
        f"selfcal {selfcal.__version__}, torch {torch.__version__}, {args.threads} thread(s), "
        f"{platform.machine()}; median of {args.repeats} interleaved rounds after a warm-up.",
        f"Command: `{command}`",
        "",
        "| fit | median s | / one `sms` fit |",
        "|---|---:|---:|",
    ]
    lines += [f"| {n} | {t:.2f} | {t / sms:.2f}x |" for n, t in times.items()]
    lines += ["", "Floor: `auto` with K folds costs at least about K `sms` fits on all rows "]
    lines[-1] += "(its K fold fits on (K - 1)/K of the rows, then the refit): " + ", ".join(
        f"K = {k}: {k * sms:.2f} s" for k in FOLDS
    )
    lines[-1] += "."
    lines += ["", "### The default (5 folds): each candidate's cross-validation", ""]
    lines += ["| candidate | CV seconds (5 fold fits) | CV NLL | chosen |", "|---|---:|---:|---|"]
    chosen = {k: fitted_auto(z, y, k) for k in FOLDS}
    cv = chosen[5].cv_results_
    for name, sec, score in zip(cv["candidate"], cv["fit_seconds"], cv["score"], strict=True):
        mark = "yes" if name == chosen[5].chosen_ else ""
        lines.append(f"| `{name}` | {sec:.2f} | {score:.4f} | {mark} |")
    picks = ", ".join(f"{k} folds: `{a.chosen_}`" for k, a in chosen.items())
    lines += ["", f"Chosen with {picks}."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    command = f"python benchmarks/bench_auto.py --repeats {args.repeats} --threads {args.threads}"
    write_report(run(args, command), RESULTS)


if __name__ == "__main__":
    main()
