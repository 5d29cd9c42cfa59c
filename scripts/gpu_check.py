"""The GPU check: every metric and calibrator on CUDA against its CPU result (and the metrics
against a second CUDA run); each metric's time and peak GPU memory on 200,000 x 1,000 logits;
every method family of the benchmark trained for a few dozen minibatch steps on a CIFAR
ResNet-18 with synthetic CIFAR-shaped data (minibatch BO4SC and the γ-Net meta step among
them), with each one's time relative to a CE epoch of the same batches and its peak GPU memory
above the data; and the command line: ``selfcal train --device cuda`` and ``--device cpu`` on
the digits table, then ``selfcal predict`` of the GPU-trained model where no GPU is visible.
Written to ``benchmarks/results/gpu.md``.

On a machine without CUDA it runs its CPU half -- the metrics and calibrators on the CPU only,
the training at ``--cpu-steps`` batches of 16, the CLI on the CPU -- checks that every path
runs, and says what it skipped (BO4SC's T = 10 inner steps need at least 10 batches an epoch).
Nothing here is timed against a peer: the ratios are to CE on the same machine in the same run.

Usage: ``python scripts/gpu_check.py [--steps 30] [--cli-epochs 20] [--out FILE]`` (default
``benchmarks/results/gpu.md``; a few minutes on one H200; PYTHONPATH=src where selfcal is not
installed).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from selfcal.evaluation import METRICS, point_estimates
from selfcal.methods import Recipe, build_network, train_method
from selfcal.posthoc import build_calibrator, calibrator_names
from selfcal.predictions import Predictions
from selfcal.studies.benchmark.protocol import FULL, METHODS
from selfcal.training import BestCheckpoint

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "gpu.md"
N_ROWS, N_CLASSES = 20_000, 100
"""The metrics' logits."""
MEMORY_ROWS, MEMORY_CLASSES = 200_000, 1_000
"""The logits of the metrics' memory check (800 MB in float32; a float64 copy is 1.6 GB)."""
LARGE_ROWS, LARGE_CLASSES = 50_000, 1_000
"""The large post-hoc fits' validation logits (ImageNet-shaped: 200 MB in float32)."""
FIT_ROWS, FIT_CLASSES = 4_000, 20
"""The calibrators' logits (half to fit, half to predict; two classes for the binary ones)."""
METRIC_TOLERANCE = 1e-6
PROBABILITY_TOLERANCE = 1e-4
"""Largest |CPU - CUDA| that passes: metrics are float64 sums (summation order only);
calibrators are fitted by iterative solvers whose paths may part in the last digits."""


def logits(n: int, c: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Over-confident logits: noise plus a margin on a class that is the label 70% of the time."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, c, (n,), generator=g)
    other = torch.randint(0, c, (n,), generator=g)
    target = torch.where(torch.rand(n, generator=g) < 0.7, y, other)
    z = 3.0 * torch.randn(n, c, generator=g)
    z[torch.arange(n), target] += 6.0
    return z, y


def metric_rows(cuda: bool) -> list[str]:
    z, y = logits(N_ROWS, N_CLASSES, 0)
    keys = list(METRICS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cpu = point_estimates(Predictions.from_logits(z, y), keys)
        runs = [
            point_estimates(Predictions.from_logits(z.cuda(), y.cuda()), keys)
            for _ in range(2 if cuda else 0)
        ]
    gpu = runs[0] if cuda else {}
    rows = []
    for k in keys:
        if not cuda:
            rows.append(f"| {k} | {cpu[k]:.6g} | skipped (no CUDA) | — |")
            continue
        diff = abs(cpu[k] - gpu[k])
        both_nan = math.isnan(cpu[k]) and math.isnan(gpu[k])
        verdict = "ok" if diff <= METRIC_TOLERANCE or both_nan else "**differs**"
        again = runs[1][k] == gpu[k] or both_nan
        verdict += "" if again else ", **not repeatable** (a second CUDA run differs)"
        rows.append(f"| {k} | {cpu[k]:.6g} | {gpu[k]:.6g} | {diff:.1e} {verdict} |")
    return rows


def timed_peak(run: Callable[[], object]) -> tuple[float, int]:
    """``run()``'s seconds on CUDA and the peak GPU memory it adds to what was allocated
    before it (warnings silenced)."""
    synchronize("cuda")
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run()
    synchronize("cuda")
    return time.perf_counter() - start, torch.cuda.max_memory_allocated() - before


def memory_rows() -> list[str]:
    """Each metric alone on :data:`MEMORY_ROWS` x :data:`MEMORY_CLASSES` CUDA logits: its
    seconds and the peak GPU memory it adds to the logits and labels, also as a fraction of
    one float64 copy of the logits."""
    g = torch.Generator(device="cuda").manual_seed(0)
    z = 3 * torch.randn(MEMORY_ROWS, MEMORY_CLASSES, device="cuda", generator=g)
    y = torch.randint(MEMORY_CLASSES, (MEMORY_ROWS,), device="cuda", generator=g)
    copy = MEMORY_ROWS * MEMORY_CLASSES * 8
    rows = []
    for k in METRICS:

        def metric(k: str = k, z: torch.Tensor = z, y: torch.Tensor = y) -> object:
            return point_estimates(Predictions.from_logits(z, y), [k])

        seconds, extra = timed_peak(metric)
        rows.append(f"| {k} | {seconds:.2f} | {extra / 2**20:.0f} | {extra / copy:.2f} |")
        print(f"memory {k}: {seconds:.2f} s, {extra / 2**20:.0f} MiB", file=sys.stderr, flush=True)
    del z, y
    gc.collect()
    return rows


def calibrator_rows(cuda: bool) -> list[str]:
    rows = []
    for name in calibrator_names():
        binary = False
        try:
            cpu_p, cpu_s = fit_predict(name, "cpu", binary)
        except ValueError:  # a binary calibrator: two classes
            binary = True
            cpu_p, cpu_s = fit_predict(name, "cpu", binary)
        if not cuda:
            rows.append(f"| {name} | {2 if binary else FIT_CLASSES} | {cpu_s:.2f} | skipped | — |")
            continue
        gpu_p, gpu_s = fit_predict(name, "cuda", binary)
        print(f"calibrator {name}: {cpu_s:.2f} s, {gpu_s:.2f} s", file=sys.stderr, flush=True)
        diff = float((cpu_p - gpu_p.cpu()).abs().max())
        verdict = "ok" if diff <= PROBABILITY_TOLERANCE else "**differs**"
        rows.append(
            f"| {name} | {2 if binary else FIT_CLASSES} | {cpu_s:.2f} | {gpu_s:.2f} | "
            f"{diff:.1e} {verdict} |"
        )
    return rows


def large_fit_rows() -> list[str]:
    """TS, SVS, SMS and ``auto`` fitted on :data:`LARGE_ROWS` x :data:`LARGE_CLASSES` float32
    CUDA logits shaped like an ImageNet classifier's (``benchmarks/bench_calibrators_scale.py``):
    each fit's seconds and the peak GPU memory it adds to the logits, also in float64 copies of
    them (issue 40's bound: two)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from bench_calibrators_scale import imagenet_shaped

    z, y = imagenet_shaped(0, LARGE_ROWS, LARGE_CLASSES)
    z, y = z.cuda(), y.cuda()
    copy = LARGE_ROWS * LARGE_CLASSES * 8
    rows = []
    for name in ("ts", "svs", "sms", "auto"):
        build_calibrator(name).fit(logits=z[:2000, :50], labels=y[:2000] % 50)  # warm-up

        def fit(name: str = name, z: torch.Tensor = z, y: torch.Tensor = y) -> object:
            return build_calibrator(name).fit(logits=z, labels=y)

        seconds, extra = timed_peak(fit)
        rows.append(f"| {name} | {seconds:.1f} | {extra / 2**20:.0f} | {extra / copy:.2f} |")
        print(f"large {name}: {seconds:.1f} s, {extra / 2**20:.0f} MiB", file=sys.stderr)
    del z, y
    gc.collect()
    return rows


def fit_predict(name: str, device: str, binary: bool) -> tuple[torch.Tensor, float]:
    """Probabilities on held-out rows after fitting ``name`` on half of :data:`FIT_ROWS`; the
    seconds of the fit and the prediction."""
    c = 2 if binary else FIT_CLASSES
    z, y = logits(FIT_ROWS, c, 1)
    z, y = z.to(device), y.to(device)
    half = FIT_ROWS // 2
    synchronize(device)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = build_calibrator(name).fit(logits=z[:half], labels=y[:half])
        p = torch.as_tensor(cal.predict_proba(logits=z[half:]))
    synchronize(device)
    return p.double().cpu(), time.perf_counter() - start


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def training_rows(device: str, steps: int, batch: int) -> list[str]:
    """Every benchmark method for one epoch of ``steps`` batches of synthetic CIFAR-shaped
    data on ResNet-18 with the papers' SGD recipe; seconds relative to CE's epoch."""
    recipe = Recipe("resnet18", 1, "sgd", 0.1, batch, (), 0.9, 5e-4, 2.0)
    g = torch.Generator().manual_seed(0)
    n = steps * batch

    def split(rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(rows, 3, 32, 32, generator=g)
        return x.to(device), torch.randint(0, 10, (rows,), generator=g).to(device)

    train, meta, val = split(n), split(4 * batch), split(4 * batch)
    seconds, memory = {}, {}
    for method in ("ce", *METHODS):  # CE twice: the first is the warm-up
        gc.collect()  # the last method's model and optimizer state
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
            data = torch.cuda.memory_allocated()  # the splits, and what else is left: printed
        model = build_network(recipe, 10, 0).to(device)
        checkpoint = BestCheckpoint(*val)
        options = FULL.candidates("cifar10", method)[0]
        synchronize(device)
        start = time.perf_counter()
        train_method(
            METHODS[method], options, recipe, model, train, meta, checkpoint,
            seed=0, device=device, val_batch_size=4 * batch,
        )  # fmt: skip
        synchronize(device)
        seconds[method] = time.perf_counter() - start
        print(f"trained {method}: {seconds[method]:.2f} s", file=sys.stderr, flush=True)
        if device == "cuda":
            memory[method] = (torch.cuda.max_memory_allocated() - data) / 2**20
            splits = sum(t.nbytes for t in (*train, *meta, *val))
            print(
                f"allocated before {method}: {data / 2**20:.0f} MiB "
                f"(the splits: {splits / 2**20:.0f} MiB)",
                file=sys.stderr,
            )
        else:
            memory[method] = math.nan
        del model, checkpoint
    rows = []
    for method in METHODS:
        mib = "—" if math.isnan(memory[method]) else f"{memory[method]:.0f}"
        rows.append(
            f"| {method} | {seconds[method]:.2f} | {seconds[method] / seconds['ce']:.2f} | {mib} |"
        )
    return rows


CLI_METHODS = ("ce", "bsce-gra", "flγ-sece", "bo4sc")
"""Methods ``selfcal train`` fits in the CLI check: the baseline, the gradient-weighted loss,
the γ-Net meta step and the bilevel method."""


def selfcal(*args: str, hide_gpu: bool = False) -> str:
    """``python -m selfcal.cli ARGS``' standard output (a failure stops the check); with
    ``hide_gpu``, in a process that sees no CUDA device."""
    env = dict(os.environ, **({"CUDA_VISIBLE_DEVICES": ""} if hide_gpu else {}))
    done = subprocess.run(
        [sys.executable, "-m", "selfcal.cli", *args], capture_output=True, text=True, env=env
    )
    if done.returncode != 0:
        raise SystemExit(f"selfcal {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def cli_rows(cuda: bool, epochs: int) -> list[str]:
    """``selfcal train`` on the bundled digits table (every candidate of each method of
    :data:`CLI_METHODS`, ``--calibrate auto``) with ``--device cuda`` and ``--device cpu``;
    then ``selfcal predict`` of the model trained on the first device in a process that sees
    no GPU (a model trained on a GPU serves on a CPU-only machine)."""
    devices = ("cuda", "cpu") if cuda else ("cpu",)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "digits"
        selfcal("dataset", "digits", "--out", str(data))
        splits = [str(data / f"{split}.csv") for split in ("train", "val", "test")]
        for method in CLI_METHODS:
            cells = {}
            for device in devices:
                model = Path(tmp) / f"{method}-{device}"
                start = time.perf_counter()
                report = json.loads(
                    selfcal(
                        "train", splits[0], "--val", splits[1], "--test", splits[2],
                        "--method", method, "--epochs", str(epochs), "--calibrate", "auto",
                        "--device", device, "--out", str(model), "--json",
                    )
                )  # fmt: skip
                test = report["metrics"]["test"]["calibrated"]
                cells[device] = (time.perf_counter() - start, test["nll"]["value"])
                print(f"cli {method} on {device}: {cells[device]}", file=sys.stderr, flush=True)
            served = json.loads(
                selfcal(
                    "predict", str(Path(tmp) / f"{method}-{devices[0]}"), splits[2],
                    "--out", str(Path(tmp) / f"{method}.csv"), "--target-coverage", "0.9",
                    "--json", hide_gpu=True,
                )
            )  # fmt: skip
            cuda_cells = (
                f"{cells['cuda'][0]:.1f} | {cells['cuda'][1]:.4f}" if cuda else "skipped | —"
            )
            rows.append(
                f"| {method} | {cuda_cells} | {cells['cpu'][0]:.1f} | {cells['cpu'][1]:.4f} | "
                f"{served['rows']:,} rows, {served['abstained']} abstained |"
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="batches of 128 per method (GPU)")
    parser.add_argument("--cpu-steps", type=int, default=10, help="batches of 16 per method (CPU)")
    parser.add_argument("--cli-epochs", type=int, default=20, help="epochs of selfcal train")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    steps, batch = (args.steps, 128) if cuda else (args.cpu_steps, 16)
    name = torch.cuda.get_device_name() if cuda else "no CUDA device (the CPU half)"
    lines = [
        "# GPU check",
        "",
        f"`python scripts/gpu_check.py --steps {args.steps}` on {name}; torch {torch.__version__}, "
        f"{datetime.date.today().isoformat()}.",
        "",
    ]
    if not cuda:
        lines += [
            "Skipped without CUDA: the CUDA results of the metrics and calibrators, and the "
            "peak GPU memory; the training ran on the CPU with batches of 16.",
            "",
        ]
    lines += [
        f"## Metrics on {N_ROWS:,} x {N_CLASSES} logits: CPU against CUDA "
        f"(pass: |difference| <= {METRIC_TOLERANCE:g})",
        "",
        "| metric | CPU | CUDA | difference |",
        "|---|---|---|---|",
        *metric_rows(cuda),
        "",
        f"## Each metric's peak GPU memory on {MEMORY_ROWS:,} x {MEMORY_CLASSES:,} float32 "
        "logits (the memory it adds to them; one float64 copy of them = 1.00)",
        "",
        *(
            ["| metric | seconds | peak added (MiB) | / float64 copy |", "|---|---|---|---|"]
            + memory_rows()
            if cuda
            else ["Skipped: no CUDA device."]
        ),
        "",
        f"## Calibrators fitted on {FIT_ROWS // 2:,} rows, probabilities on "
        f"{FIT_ROWS // 2:,} more: CPU against CUDA "
        f"(pass: max |difference| <= {PROBABILITY_TOLERANCE:g})",
        "",
        "| calibrator | classes | fit + predict, CPU (s) | CUDA (s) | max difference |",
        "|---|---|---|---|---|",
        *calibrator_rows(cuda),
        "",
        f"## The large post-hoc fits on {LARGE_ROWS:,} x {LARGE_CLASSES:,} float32 logits: "
        "seconds and the peak GPU memory each adds to them",
        "",
        *(
            ["| calibrator | seconds | peak added (MiB) | / float64 copy |", "|---|---|---|---|"]
            + large_fit_rows()
            if cuda
            else ["Skipped: no CUDA device."]
        ),
        "",
        f"## One epoch of {steps} batches of {batch} synthetic 3 x 32 x 32 images, ResNet-18, "
        "the papers' SGD recipe (the checkpoint's validation pass included)",
        "",
        "| method | seconds | × CE | peak GPU memory above the data (MiB) |",
        "|---|---|---|---|",
        *training_rows(device, steps, batch),
        "",
        f"## The CLI: `selfcal train` on the digits table ({args.cli_epochs} epochs, every "
        "candidate, `--calibrate auto`) on each device, then `selfcal predict` of the "
        f"{'CUDA' if cuda else 'CPU'}-trained model in a process that sees no GPU",
        "",
        "| method | CUDA: seconds | test NLL | CPU: seconds | test NLL | predict, no GPU |",
        "|---|---|---|---|---|---|",
        *cli_rows(cuda, args.cli_epochs),
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
