"""Group-aware calibration: :class:`~selfcal.posthoc.MulticlassMulticalibration` beside
temperature scaling and Meta's ``mcgrad`` (0.1.5, ``MCGrad`` with its defaults) -- time, peak
memory, and the held-out NLL and worst group's ECE each fit reaches.

* **7,021 x 4, 57 groups**: Llama-3.1-8B-Instruct on MMLU (``--sets`` or
  ``$SELFCAL_PREDICTIONS``: ``mmlu_llama31_8b_instruct``, subjects as groups; 7,021 validation
  rows fitted, 7,021 test rows scored), or where that set is missing an MMLU-shaped synthetic
  set (4 classes, 57 subjects, a per-subject temperature and answer shift).
* **50,000 x 1,000, 100 groups, two threads**: ImageNet-shaped synthetic logits
  (``bench_calibrators_scale.imagenet_shaped``'s shape: ``N(0, 1)`` noise plus a margin on
  one class) whose labels are drawn from ``softmax(z / T_g)``, a temperature per group
  (``T_g = 1.5 exp(N(0, 0.3^2))``): temperature scaling's one ``T`` cannot fit every group.

Rows: ``selfcal ts``; ``selfcal multicalibration`` (its defaults: every class's score at 4
classes, the top label at 1,000; ``n_threads=1`` for LightGBM, torch on the benchmark's
threads), also its ``top`` form at 4 classes; ``mcgrad``, which is binary: fitted on
"is TS's top answer right" with TS's confidence as its prediction and the group as its
categorical segment feature; its row's time includes that TS fit and prediction. Each fit
runs in a fresh process, one timed call after a small warm-up fit; its peak memory is the
process's peak resident set during the fit minus its resident set before it (the data made;
``/proc/self/clear_refs``), also as a multiple of one float64 copy of the validation logits.
Scored on the test rows: the multiclass NLL (``mcgrad`` changes only the top label's
probability: its other classes are rescaled as ours, ``(1 - c') / (1 - c)``, so its NLL is
comparable), and the worst group's top-label ECE (:func:`selfcal.metrics.worst_group_ece`).

Run: ``python benchmarks/bench_multicalibration.py [--sets DIR]`` (about five minutes on two
cores); writes ``benchmarks/results/multicalibration.md``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

import selfcal
from selfcal.metrics import nll, worst_group_ece
from selfcal.posthoc import MulticlassMulticalibration, TemperatureScaling

RESULTS = Path(__file__).parent / "results" / "multicalibration.md"
ROWS = ("selfcal ts", "selfcal multicalibration", "selfcal multicalibration top", "mcgrad")
Data = tuple[np.ndarray, ...]
Predict = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""A fitted map: test logits, test groups -> probabilities."""


def mmlu_shaped(seed: int = 0, n: int = 7021, n_groups: int = 57) -> Data:
    """2 x ``n`` rows of 4-class logits, labels from ``softmax(a_s z + b_s)`` per subject."""
    rng = np.random.default_rng(seed)
    g = rng.integers(0, n_groups, 2 * n)
    z = rng.normal(0, 2.5, (2 * n, 4))
    scale = np.exp(rng.normal(0, 0.4, n_groups))[g][:, None]
    true = z * scale + rng.normal(0, 0.6, (n_groups, 4))[g]
    p = np.exp(true - true.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = (rng.random(2 * n)[:, None] > np.cumsum(p, 1)).sum(1).clip(max=3)
    names = np.array([f"subject{k:02d}" for k in g], dtype=object)
    return z[:n], y[:n], names[:n], z[n:], y[n:], names[n:]


def imagenet_grouped(seed: int, n: int, c: int = 1000, n_groups: int = 100) -> Data:
    """2 x ``n`` float32 logits over ``c`` classes (noise plus a margin of 12.3 on one class),
    labels drawn from ``softmax(z / T_g)`` with ``T_g = 1.5 exp(N(0, 0.3^2))`` per group."""
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(2 * n, c, generator=gen)
    z[torch.arange(2 * n), torch.randint(0, c, (2 * n,), generator=gen)] += 12.3
    g = torch.randint(0, n_groups, (2 * n,), generator=gen)
    temperature = 1.5 * torch.exp(0.3 * torch.randn(n_groups, generator=gen))
    y = torch.cat(
        [
            torch.multinomial(
                torch.softmax(z[i : i + 5000] / temperature[g[i : i + 5000], None], 1),
                1,
                generator=gen,
            )
            for i in range(0, 2 * n, 5000)
        ]
    ).squeeze(1)
    names = np.array([f"g{k:03d}" for k in g.numpy()], dtype=object)
    z, y = z.numpy(), y.numpy()
    return z[:n], y[:n], names[:n], z[n:], y[n:], names[n:]


def load(case: str, sets: str | None) -> tuple[Data, str]:
    if case == "large":
        return imagenet_grouped(0, 50_000), "ImageNet-shaped synthetic, 100 groups"
    path = Path(sets or "") / "mmlu_llama31_8b_instruct"
    if sets and path.is_dir():
        from selfcal.io import load_prediction_set

        d = load_prediction_set(path)
        groups = (np.asarray(d.val_groups, dtype=object), np.asarray(d.test_groups, dtype=object))
        data = (d.val, d.val_labels, groups[0], d.test, d.test_labels, groups[1])
        return data, "mmlu_llama31_8b_instruct (subjects)"
    return mmlu_shaped(), "MMLU-shaped synthetic, 57 subjects"


def fit(row: str, z: np.ndarray, y: np.ndarray, g: np.ndarray) -> Predict:
    """``row``'s fit on validation logits, labels and groups."""
    if row == "selfcal ts":
        ts = TemperatureScaling().fit(logits=z, labels=y)
        return lambda zt, gt: np.asarray(ts.predict_proba(logits=zt))
    if row.startswith("selfcal multicalibration"):
        classes = "top" if row.endswith("top") else "auto"
        mc = MulticlassMulticalibration(classes=classes).fit(logits=z, labels=y, groups=g)
        return lambda zt, gt: np.asarray(mc.predict_proba(logits=zt, groups=gt))
    return fit_mcgrad(z, y, g)


def fit_mcgrad(z: np.ndarray, y: np.ndarray, g: np.ndarray) -> Predict:
    """TS, then ``MCGrad`` on its top label's correctness; the other classes rescaled."""
    import pandas as pd
    from mcgrad.methods import MCGrad

    ts = TemperatureScaling().fit(logits=z, labels=y)
    q = np.asarray(ts.predict_proba(logits=z))
    frame = pd.DataFrame({"p": q.max(1), "y": (q.argmax(1) == y).astype(np.int64), "s": g})
    peer = MCGrad(random_state=0).fit(frame, "p", "y", categorical_feature_column_names=["s"])

    def predict(zt: np.ndarray, gt: np.ndarray) -> np.ndarray:
        p = np.asarray(ts.predict_proba(logits=zt))
        rows, top = np.arange(len(p)), p.argmax(1)
        c = p[rows, top]
        test = pd.DataFrame({"p": c, "s": gt})
        new = np.clip(peer.predict(test, "p", categorical_feature_column_names=["s"]), 1e-12, 1)
        p *= ((1 - new) / np.maximum(1 - c, 1e-300))[:, None]
        p[rows, top] = new
        return p

    return predict


def status(field: str) -> float:
    """``VmRSS`` / ``VmHWM`` of this process, MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")  # pragma: no cover


def one_fit(row: str, case: str, sets: str | None, threads: int) -> dict[str, float]:
    """In this (fresh) process: ``row`` fitted on ``case``'s validation rows."""
    torch.set_num_threads(threads)
    logging.disable(logging.WARNING)  # mcgrad logs each unshrink factor
    warnings.simplefilter("ignore")
    (z, y, g, zt, yt, gt), _ = load(case, sets)
    small = mmlu_shaped(1, 1500, 10)
    fit(row, *small[:3])  # imports, first-call costs
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak resident set
    before = status("VmRSS")
    start = time.perf_counter()
    predict = fit(row, z, y, g)
    seconds = time.perf_counter() - start
    peak = status("VmHWM") - before
    p = predict(zt, gt)
    return {
        "seconds": seconds,
        "peak_mib": peak,
        "nll": float(nll(probs=p, labels=yt)),
        "worst_ece": float(worst_group_ece(probs=p, labels=yt, groups=gt)),
    }


def table(case: str, sets: str | None, threads: int) -> list[str]:
    (z, *_), what = load(case, sets)
    n, c = z.shape
    copy = n * c * 8 / 2**20
    rows = [r for r in ROWS if not (case == "large" and r.endswith("top"))]
    found = {}
    for row in rows:
        command = [
            sys.executable,
            __file__,
            "--row",
            row,
            "--case",
            case,
            "--threads",
            str(threads),
        ]
        command += ["--sets", sets] if sets else []
        out = subprocess.run(command, capture_output=True, text=True, check=True)
        found[row] = json.loads(out.stdout.strip().splitlines()[-1])
    base = found["selfcal ts"]
    lines = [
        f"### {n:,} x {c:,}: {what}, {threads} threads",
        "",
        f"One float64 copy of the validation logits: {copy:,.1f} MiB.",
        "",
        "| row | fit s | time / TS's | peak memory above the data (MiB) | × float64 copies | "
        "memory / TS's | test NLL | worst group's ECE |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row, r in found.items():
        lines.append(
            f"| {row} | {r['seconds']:.2f} | {r['seconds'] / base['seconds']:.1f}x | "
            f"{r['peak_mib']:.0f} | {r['peak_mib'] / copy:.2f} | "
            f"{r['peak_mib'] / max(base['peak_mib'], 1.0):.1f}x | {r['nll']:.4f} | "
            f"{r['worst_ece']:.4f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=os.environ.get("SELFCAL_PREDICTIONS"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cases", nargs="*", default=["mmlu", "large"])
    parser.add_argument("--row", help=argparse.SUPPRESS)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row:
        print(json.dumps(one_fit(args.row, args.case, args.sets, args.threads)))
        return
    from _timing import write_report

    command = "python benchmarks/bench_multicalibration.py" + (
        f" --sets {args.sets}" if args.sets else ""
    )
    lines = [
        "# Group-aware calibration: multicalibration beside TS and mcgrad",
        "",
        f"selfcal {selfcal.__version__}, torch {torch.__version__}, "
        f"{platform.processor() or platform.machine()}. Command: `{command}`",
        "",
    ]
    for case in args.cases:
        lines += table(case, args.sets, args.threads) + [""]
    write_report("\n".join(lines), RESULTS)


if __name__ == "__main__":
    main()
