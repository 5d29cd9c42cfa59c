"""Venn-Abers predictors: selfcal's beside the ``venn-abers`` package (1.5.4), MAPIE (1.6) and
probmetrics (1.3) -- time, peak memory and agreement of the merged probabilities.

Shapes 5,000 x 10, 5,000 x 100 and 50,000 x 1,000: half the rows calibrate, half are predicted.
Synthetic logits ``N(0, 1)`` with a margin ``log(C) + 2`` on one class per row, labels drawn
from ``softmax(z / 1.5)`` (an over-confident model); every row gets the softmax probabilities.

Rows: ``selfcal venn-abers`` (one-vs-rest, normalised), ``selfcal venn-abers-top`` (the
top-label interval; a different predictor, no peer has it) and ``selfcal ts`` (the reference of
the time ratios); ``venn-abers ovr`` (``predict_proba_prefitted_va(..., va_tpe="one_vs_rest")``)
and ``venn-abers ovo`` (its default, one-vs-one: ``C (C - 1) / 2`` binary predictors),
``mapie ovr`` (``mapie._venn_abers.predict_proba_prefitted_va(..., va_tpe="one_vs_all")``, what
its ``VennAbersCalibrator`` runs) and ``probmetrics ovr`` (``VennAbersCalibrator()``, which
wraps ``venn-abers``' one-vs-all). Each row runs in a fresh process on two threads: one timed
fit plus prediction of the test rows (the peers compute everything at prediction) after a small
warm-up, under a limit of :data:`LIMIT` seconds ("did not finish" is a result; a row that did
not finish at one shape is not run at the larger ones). Peak memory: the process's peak
resident set during the timed call minus its resident set before it (``/proc/self/clear_refs``).
Agreement: the largest absolute difference of a peer's merged probabilities from ``selfcal
venn-abers``'.

Run: ``python benchmarks/bench_venn_abers.py`` (about 15 minutes on two cores); writes
``benchmarks/results/venn_abers.md``.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

import selfcal

RESULTS = Path(__file__).parent / "results" / "venn_abers.md"
SHAPES = ((5_000, 10), (5_000, 100), (50_000, 1_000))
ROWS = (
    "selfcal ts",
    "selfcal venn-abers",
    "selfcal venn-abers-top",
    "venn-abers ovr",
    "mapie ovr",
    "probmetrics ovr",
    "venn-abers ovo",
)
LIMIT = 300
"""Seconds a row may take at one shape."""
THREADS = 2


def data(n: int, c: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Calibration and test probabilities and labels (module doc), ``n / 2`` rows each."""
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(n, c, generator=gen, dtype=torch.float64)
    z[torch.arange(n), torch.randint(0, c, (n,), generator=gen)] += float(np.log(c) + 2)
    y = torch.multinomial(torch.softmax(z / 1.5, 1), 1, generator=gen).squeeze(1)
    p = torch.softmax(z, 1).numpy()
    h = n // 2
    return p[:h], y[:h].numpy(), p[h:], y[h:].numpy()


def run_row(row: str, p: np.ndarray, y: np.ndarray, pt: np.ndarray) -> np.ndarray:
    """``row``'s merged probabilities of ``pt`` after fitting on ``(p, y)``."""
    if row.startswith("selfcal"):
        from selfcal.posthoc import build_calibrator

        cal = build_calibrator(row.split()[1]).fit(probs=p, labels=y)
        return np.asarray(cal.predict_proba(probs=pt))
    if row.startswith("venn-abers"):
        from venn_abers.venn_abers import predict_proba_prefitted_va

        kind = "one_vs_rest" if row.endswith("ovr") else "one_vs_one"
        return np.asarray(predict_proba_prefitted_va(p, y, pt, va_tpe=kind)[0])
    if row == "mapie ovr":
        from mapie._venn_abers import predict_proba_prefitted_va as mapie_va

        return np.asarray(mapie_va(p, y, pt, va_tpe="one_vs_all")[0])
    from probmetrics.calibrators import VennAbersCalibrator

    return np.asarray(VennAbersCalibrator().fit(p, y).predict_proba(pt))


def status(field: str) -> float:
    """``VmRSS`` / ``VmHWM`` of this process, MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")  # pragma: no cover


def one_row(row: str, n: int, c: int, out: str) -> None:
    """In this (fresh) process: time ``row`` at ``n x c``, save its probabilities to ``out``."""
    torch.set_num_threads(THREADS)
    warnings.simplefilter("ignore")
    p, y, pt, _ = data(n, c)
    small = data(400, min(c, 10), seed=1)
    run_row(row, small[0], small[1], small[2])  # imports, first-call costs (numba's cache)
    Path("/proc/self/clear_refs").write_text("5")
    before = status("VmRSS")
    start = time.perf_counter()
    probs = run_row(row, p, y, pt)
    seconds = time.perf_counter() - start
    peak = status("VmHWM") - before
    np.save(out, probs)
    print(json.dumps({"seconds": seconds, "peak_mib": peak}))


def measure(row: str, n: int, c: int, folder: str) -> dict[str, object]:
    out = f"{folder}/{row.replace(' ', '_')}_{n}_{c}.npy"
    command = [sys.executable, __file__, "--row", row, "--n", str(n), "--c", str(c), "--out", out]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=LIMIT)
    except subprocess.TimeoutExpired:
        return {"status": f"did not finish in {LIMIT} s"}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return {"status": f"failed: {last[:120]}"}
    return {"status": "ok", "path": out, **json.loads(done.stdout.strip().splitlines()[-1])}


def table(n: int, c: int, skip: set[str], folder: str) -> list[str]:
    found = {row: measure(row, n, c, folder) if row not in skip else None for row in ROWS}
    ours = np.load(str(found["selfcal venn-abers"]["path"]))  # type: ignore[index]
    ts = float(found["selfcal ts"]["seconds"])  # type: ignore[index,arg-type]
    lines = [
        f"### {n // 2:,} calibration + {n // 2:,} test rows x {c:,} classes, {THREADS} threads",
        "",
        "| row | fit + predict (s) | x TS's time | peak memory (MiB) | max abs difference "
        "from selfcal venn-abers |",
        "|---|---|---|---|---|",
    ]
    for row, got in found.items():
        if got is None:
            lines.append(f"| {row} | not run (did not finish at a smaller shape) | | | |")
            continue
        if got["status"] != "ok":
            skip.add(row)
            lines.append(f"| {row} | {got['status']} | | | |")
            continue
        probs = np.load(str(got["path"]))
        diff = "" if row == "selfcal venn-abers-top" else f"{np.abs(probs - ours).max():.2e}"
        seconds = float(got["seconds"])  # type: ignore[arg-type]
        lines.append(
            f"| {row} | {seconds:.3f} | {seconds / ts:.1f} | {float(got['peak_mib']):,.0f} | "  # type: ignore[arg-type]
            f"{diff} |"
        )
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--row")
    parser.add_argument("--n", type=int)
    parser.add_argument("--c", type=int)
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.row:
        one_row(args.row, args.n, args.c, args.out)
        return
    skip: set[str] = set()
    lines = [
        "# Venn-Abers: selfcal beside venn-abers, MAPIE and probmetrics",
        "",
        f"`python benchmarks/bench_venn_abers.py` (its docstring says what it measures); "
        f"selfcal {selfcal.__version__}, torch {torch.__version__}, python "
        f"{platform.python_version()}, {platform.machine()}; limit {LIMIT} s a row.",
        "",
    ]
    with tempfile.TemporaryDirectory() as folder:
        for n, c in SHAPES:
            lines += table(n, c, skip, folder)
    text = "\n".join(lines)
    RESULTS.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
