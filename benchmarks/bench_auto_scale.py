"""Benchmark: ``auto`` (:class:`selfcal.posthoc.AutoCalibration`) at 1,000 classes -- its time,
peak memory and choice on 50,000 validation rows, and its test NLL beside every candidate's.

Four synthetic problems of float32 logits over 1,000 classes (:func:`problem`), each drawn
twice -- 50,000 validation rows (seed 0) and 50,000 test rows (seed 1) -- under one fixed map
from the model's logits to the true probabilities:

* ``ts-exact``: temperature scaling is the true map (``benchmarks/bench_calibrators_scale.py``'s
  ImageNet-shaped logits: ``N(0, 1)`` noise plus a margin of 12.3 on one class per row, labels
  drawn from ``softmax(z / 1.5)``).
* ``class-wise``: vector scaling is the true map: labels drawn from ``softmax(w * z + b)`` with
  a scale and a bias per class, ``log(1.5 w) ~ N(0, 0.136^2)`` and ``b ~ N(0, 0.64^2)``.
* ``matrix``: an affine map with off-diagonal weights: ``softmax(w * z + O z + b)``, the same
  ``w`` and ``b`` and ``O_jk ~ N(0, 0.0029^2)`` off the diagonal.
* ``label-noise``: ``ts-exact`` with 10% of the labels drawn uniformly instead: a mixture
  with the uniform distribution, which ensemble temperature scaling fits and no other
  candidate can.

**How the maps are sized.** Like real networks' at 100 classes: on each of the 20 CIFAR-100
sets of ``--sets`` (third-party networks), unpenalised vector scaling and (nearly unpenalised,
``*_l2 = 0.01``) matrix scaling of the logits are fitted on the validation and the test split
separately; the covariance of the two splits' estimates of the same class's parameter
estimates the spread of the true per-class parameters, free of the fits' noise (which is
independent between the splits). Their medians over the sets size ``w``, ``b`` and ``O``; the
off-diagonal spread is scaled by ``sqrt(99 / 999)`` so that the off-diagonal part moves a logit
as much at 1,000 classes as at 100 (:func:`sizing`, printed in the report; without
``--sets`` the report keeps the committed constants and says so).

Each fit runs in a fresh process at ``--threads`` threads (torch and BLAS), timed once after a
small warm-up fit; its peak memory is the process's peak resident set during the fit minus
its resident set before it (the data made; ``/proc/self/clear_refs``), also as a multiple of one
float64 copy of the validation logits. ``auto`` runs with its defaults; "before" is ``auto`` as
it was before this benchmark (SMS left out where ``C (C - 1) / N > 10``, no vector scaling,
two folds past 40,000 rows), emulated by stating those candidates and folds. Every default
candidate, and ensemble temperature scaling (``ets``, left out of them at this size), is
fitted on every validation row and scored on the test rows. The shared machine is noisy:
read the times as what they are, one run.

Run: ``python benchmarks/bench_auto_scale.py [--sets DIR] [--threads 2]`` (about 15 minutes);
writes ``benchmarks/results/auto_scale.md``. ``--problems ts-exact`` runs one problem.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from _timing import write_report

import selfcal
import selfcal.metrics as M
from selfcal.posthoc import AutoCalibration, Calibrator, build_calibrator

RESULTS = Path(__file__).parent / "results" / "auto_scale.md"
ROWS, CLASSES = 50_000, 1_000
PROBLEMS = ("ts-exact", "class-wise", "matrix", "label-noise")
CANDIDATES = ("sms", "svs", "vector", "ts-mix", "ts", "ets", "isotonic", "none")
BEFORE = {"candidates": "svs,ts-mix,ts,isotonic,none", "n_folds": 2}
"""``auto`` before this benchmark, at 50,000 x 1,000: SMS and ETS left out by size, vector
scaling not a candidate, two random folds."""
LOG_SCALE_SD, BIAS_SD, OFF_DIAGONAL_SD = 0.136, 0.64, 0.0029
"""The spreads of the maps' per-class log-scales, biases and off-diagonal weights
(:func:`sizing` on the 20 CIFAR-100 shared sets: medians 0.136, 0.64 and 0.0092 at 100 classes,
the last times ``sqrt(99 / 999)``)."""
MAP_SEED = 12345
"""The seed of each problem's map (the same for its validation and test rows)."""
NOISE = 0.1
"""``label-noise``: the fraction of labels drawn uniformly."""


def problem(name: str, seed: int, n: int = ROWS, c: int = CLASSES) -> tuple[np.ndarray, ...]:
    """``n`` float32 logits ``z`` over ``c`` classes (``N(0, 1)`` plus 12.3 on one class a
    row) and labels drawn from problem ``name``'s true probabilities (module docstring)."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, c, generator=g)
    z[torch.arange(n), torch.randint(0, c, (n,), generator=g)] += 12.3
    m = torch.Generator().manual_seed(MAP_SEED)
    w = torch.exp(LOG_SCALE_SD * torch.randn(c, generator=m)) / 1.5
    b = BIAS_SD * torch.randn(c, generator=m)
    if name in ("ts-exact", "label-noise"):
        true = z / 1.5
    elif name == "class-wise":
        true = z * w + b
    else:
        off = OFF_DIAGONAL_SD * torch.randn(c, c, generator=m)
        true = z * w + z @ off.fill_diagonal_(0.0).T + b
    y = torch.multinomial(torch.softmax(true, 1), 1, generator=g).squeeze(1)
    if name == "label-noise":
        flip = torch.rand(n, generator=g) < NOISE
        y[flip] = torch.randint(0, c, (int(flip.sum()),), generator=g)
    return z.numpy(), y.numpy()


def fitted(row: str, z: np.ndarray, y: np.ndarray) -> Calibrator:
    """``row``'s calibrator fitted on ``z``, ``y`` (warnings not shown)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if row == "auto":
            return AutoCalibration().fit(logits=z, labels=y)
        if row == "auto before":
            return AutoCalibration(**BEFORE).fit(logits=z, labels=y)  # type: ignore[arg-type]
        return build_calibrator(row).fit(logits=z, labels=y)


def status(field: str) -> float:
    """``VmRSS`` / ``VmHWM`` of this process, MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")  # pragma: no cover


def one_fit(row: str, name: str, threads: int) -> dict[str, object]:
    """In this (fresh) process: ``row`` fitted on problem ``name``'s validation rows, timed,
    its peak memory above the data, its test NLL (and for ``auto`` its choice and scores)."""
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    with threadpool_limits(threads):
        zv, yv = problem(name, 0)
        zt, yt = problem(name, 1)
        fitted(row, zv[:2000, :50], yv[:2000] % 50)  # imports, first-call costs
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak resident set
        before = status("VmRSS")
        start = time.perf_counter()
        cal = fitted(row, zv, yv)
        seconds = time.perf_counter() - start
        peak = status("VmHWM") - before
        nll = float(M.nll(probs=np.asarray(cal.predict_proba(logits=zt)), labels=yt))
    out: dict[str, object] = {"seconds": seconds, "peak_mib": peak, "nll": nll}
    if isinstance(cal, AutoCalibration):
        r = cal.cv_results_
        out |= {"chosen": cal.chosen_, "cv": {k: r[k] for k in ("candidate", "score", "low")}}
    return out


def run_problem(name: str, threads: int) -> dict[str, dict]:
    """Every row of problem ``name``, each in a fresh process."""
    found = {}
    for row in ("auto", "auto before", *CANDIDATES):
        command = [sys.executable, __file__, "--row", row, "--problem", name]
        command += ["--threads", str(threads)]
        out = subprocess.run(command, capture_output=True, text=True, check=True)
        found[row] = json.loads(out.stdout.strip().splitlines()[-1])
    return found


def best_candidate(found: dict[str, dict]) -> str:
    """The default candidate with the lowest test NLL (``ets`` is left out at this size)."""
    return min((n for n in CANDIDATES if n != "ets"), key=lambda n: found[n]["nll"])


def summary(problems: dict[str, dict[str, dict]]) -> list[str]:
    """One line per problem: ``auto``'s choice, time, peak memory and test NLL, before and
    now."""
    copy = ROWS * CLASSES * 8 / 2**20
    lines = [
        "| problem | `auto`'s choice | s | peak MiB above the data (float64 copies) | "
        "test NLL − best candidate's | before: choice, s, test NLL − best's |",
        "|---|---|---:|---:|---:|---|",
    ]
    for name, found in problems.items():
        auto, before, best = found["auto"], found["auto before"], best_candidate(found)
        lines.append(
            f"| `{name}` | `{auto['chosen']}` | {auto['seconds']:.1f} | {auto['peak_mib']:.0f} "
            f"({auto['peak_mib'] / copy:.2f}) | {auto['nll'] - found[best]['nll']:+.4f} "
            f"(best: `{best}`) | `{before['chosen']}`, {before['seconds']:.1f} s, "
            f"{before['nll'] - found[best]['nll']:+.4f} |"
        )
    return [*lines, ""]


def section(name: str, found: dict[str, dict]) -> list[str]:
    """Problem ``name``: every row's time, peak memory and test NLL, and ``auto``'s
    cross-validation of each candidate."""
    auto, best = found["auto"], best_candidate(found)
    cv = dict(zip(auto["cv"]["candidate"], zip(auto["cv"]["score"], auto["cv"]["low"])))
    lines = [
        f"### `{name}`",
        "",
        "| fit | s | peak MiB | test NLL | − best candidate's | `auto`'s CV NLL | "
        "low end of its 95% interval from the lowest CV NLL |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row, r in found.items():
        score, low = cv.get(row, (float("inf"), 0.0))
        scored = f"{score:.4f} | {low:+.4f}" if score < float("inf") else "— | —"
        label = f"`{row}`" + (" (chosen)" if row == auto["chosen"] else "")
        label += " (left out by size)" if row in cv and score == float("inf") else ""
        lines.append(
            f"| {label} | {r['seconds']:.1f} | {r['peak_mib']:.0f} | {r['nll']:.4f} | "
            f"{r['nll'] - found[best]['nll']:+.4f} | {scored} |"
        )
    return [*lines, ""]


def sizing(sets: Path) -> list[str]:
    """The per-class spreads of the maps, from the CIFAR-100 sets (module docstring)."""
    from selfcal.io import find_prediction_sets, load_prediction_set

    def estimates(z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
        beta = 1.0 / build_calibrator("ts").fit(logits=z, labels=y).temperature_
        vs = build_calibrator("vector", diagonal_l2=0.0, bias_l2=0.0).fit(logits=z, labels=y)
        small = {"off_diagonal_l2": 0.01, "diagonal_l2": 0.01, "bias_l2": 0.01}
        ms = build_calibrator("matrix", **small).fit(logits=z, labels=y)
        off = ms.weight_[~np.eye(z.shape[1], dtype=bool)] / beta
        return np.log(vs.weight_ / beta), vs.bias_ - vs.bias_.mean(), off - off.mean()

    spreads = []
    for path in find_prediction_sets(sets):
        if path.name.endswith("cifar100"):
            data = load_prediction_set(path)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                val = estimates(data.val, data.val_labels)
                test = estimates(data.test, data.test_labels)
            spreads.append([max(np.cov(a, b)[0, 1], 0.0) ** 0.5 for a, b in zip(val, test)])
    log_scale, bias, off = (statistics.median(s) for s in zip(*spreads))
    return [
        f"Sizing (`--sets {sets}`, {len(spreads)} CIFAR-100 sets): the spread of the true "
        f"per-class parameters, median over the sets: log-scale {log_scale:.3f}, bias "
        f"{bias:.2f}, off-diagonal weight {off:.4f} (at 1,000 classes "
        f"{off * (99 / 999) ** 0.5:.4f}); used: {LOG_SCALE_SD}, {BIAS_SD}, {OFF_DIAGONAL_SD}.",
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", type=Path, default=os.environ.get("SELFCAL_PREDICTIONS"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--problems", nargs="*", default=list(PROBLEMS))
    parser.add_argument("--row", help=argparse.SUPPRESS)
    parser.add_argument("--problem", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row:
        print(json.dumps(one_fit(args.row, args.problem, args.threads)))
        return
    command = "python benchmarks/bench_auto_scale.py" + (
        f" --sets {args.sets}" if args.sets else ""
    )
    lines = [
        "# `auto` at 1,000 classes: 50,000 validation rows, 50,000 test rows",
        "",
        f"selfcal {selfcal.__version__}, torch {torch.__version__}, {args.threads} threads, "
        f"{platform.processor() or platform.machine()}. Command: `{command}`",
        "",
    ]
    if args.sets:
        torch.set_num_threads(args.threads)
        lines += sizing(Path(args.sets))
    else:
        lines += ["Sizing: not rerun (no `--sets`); the committed constants were used.", ""]
    problems = {name: run_problem(name, args.threads) for name in args.problems}
    lines += summary(problems)
    for name, found in problems.items():
        lines += section(name, found)
    write_report("\n".join(lines), RESULTS)


if __name__ == "__main__":
    main()
