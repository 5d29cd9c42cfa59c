"""Minibatch BO4SC on real networks: one outer iteration against the T plain minibatch steps it
replaces, peak memory against T, and the time of an iteration against the number of rows.

1. **Time.** One :func:`selfcal.bilevel.bo4sc_minibatch_step` (T inner SGD steps, lr 0.1,
   momentum 0.9, on T pre-drawn minibatches, plus the hypergradient and the weight update)
   against ``T`` plain ``torch.optim.SGD`` steps (forward, backward, step; same model, batches
   and optimizer settings), as a ratio. Models: the MNIST-1D 1-D CNN (``cnn1d``, batch 128 of
   40-sample signals) and the CIFAR ResNet-18 (``resnet18``, CIFAR-shaped 3x32x32 inputs; batch
   32 on the CPU, 128 on a GPU). Reverse mode through a step costs about two more passes than
   the step itself, so ``Unrolled(T)`` should stay near 3x and ``OneStepLookahead(T)`` (T - 1
   steps without a graph, one differentiated) near 1x + 2x / T.
2. **Memory** (cnn1d): peak resident memory of one call in a fresh process (as
   ``bench_bilevel.py``), against T: ``Unrolled`` keeps every step's graph, ``Implicit`` none.
3. **Rows.** The public face, ``BO4SC(model, batch_size=256, inner_steps=10)`` on ``N`` rows of
   20 features (MLP 20-64-64-10): the time of one more outer iteration (the difference of fits
   of ``--iterations`` and 3 iterations, divided by the difference), for N = 10^4 .. 10^6. Set-up
   costs of a fit that grow with N (checking the data, the weight table) are excluded by the
   difference; an iteration touches only its drawn rows.

GPU rows (ResNet-18 on CUDA, timings and peak CUDA memory) run when ``torch.cuda`` is available
and are otherwise reported as not run. One intra-op thread on the CPU (``--threads``); medians
of ``--repeats`` interleaved rounds.

    python benchmarks/bench_bilevel_minibatch.py   # -> benchmarks/results/bilevel-minibatch.md
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from _timing import interleaved_medians, write_report
from bench_bilevel import memory_delta, status_bytes
from torch import nn

import selfcal
from selfcal.bilevel import (
    BO4SC,
    SGD,
    AutogradUnrolled,
    BO4SCBatch,
    BO4SCConfig,
    ConjugateGradient,
    Implicit,
    OneStepLookahead,
    Unrolled,
    bo4sc_init,
    bo4sc_minibatch_step,
)
from selfcal.models import build_model

LR, MOMENTUM = 0.1, 0.9
ESTIMATORS = {
    "unrolled": ("selfcal Unrolled(T)", lambda t: Unrolled(t)),
    "autograd": ("selfcal AutogradUnrolled(T) (BO4SC's default)", lambda t: AutogradUnrolled(t)),
    "lookahead": ("selfcal OneStepLookahead(T)", lambda t: OneStepLookahead(t)),
    "implicit": (
        "selfcal Implicit(T, ConjugateGradient(5))",
        lambda t: Implicit(t, ConjugateGradient(5)),
    ),
}
SHAPES = {"cnn1d": (40,), "resnet18": (3, 32, 32)}
N_ROWS = (10_000, 20_000, 200_000, 1_000_000)


def problem(
    model_name: str, steps: int, batch: int, device: str
) -> tuple[nn.Module, BO4SCBatch, int]:
    """The model (seeded) and one iteration's T batches of random inputs, 10 classes."""
    gen = torch.Generator().manual_seed(0)
    n = steps * batch
    x = torch.randn(n, *SHAPES[model_name], generator=gen)
    y = torch.randint(0, 10, (n,), generator=gen)
    rows = torch.randperm(n, generator=gen).view(steps, batch)
    x_val = torch.randn(batch, *SHAPES[model_name], generator=gen)
    y_val = torch.randint(0, 10, (batch,), generator=gen)
    model = build_model(model_name, seed=0, n_classes=10).to(device)
    data = BO4SCBatch(
        x[rows].to(device), y[rows].to(device), rows.to(device), x_val.to(device), y_val.to(device)
    )
    return model, data, n


def bo4sc_runner(
    model_name: str, row: str, steps: int, batch: int, device: str
) -> Callable[[], object]:
    model, data, n = problem(model_name, steps, batch, device)
    config = BO4SCConfig(
        estimator=ESTIMATORS[row][1](steps),
        inner_optimizer=SGD(LR, momentum=MOMENTUM),
        weight_lr=1.0,
    )
    state = bo4sc_init({k: p.detach() for k, p in model.named_parameters()}, n, config)
    return lambda: _sync(bo4sc_minibatch_step(model, state, data, config)[1].outer_loss)


def plain_runner(model_name: str, steps: int, batch: int, device: str) -> Callable[[], object]:
    model, data, _ = problem(model_name, steps, batch, device)
    model.train()
    optim = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)

    def run() -> object:
        for x, y in zip(data.x_train, data.y_train, strict=True):
            optim.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optim.step()
        return _sync(loss)

    return run


def _sync(value: torch.Tensor) -> torch.Tensor:
    if value.is_cuda:
        torch.cuda.synchronize()
    return value


def runner(model_name: str, row: str, steps: int, batch: int, device: str) -> Callable[[], object]:
    if row == "plain":
        return plain_runner(model_name, steps, batch, device)
    return bo4sc_runner(model_name, row, steps, batch, device)


def time_rows(
    model_name: str,
    steps_list: list[int],
    batch: int,
    device: str,
    repeats: int,
    rows: tuple[str, ...],
) -> dict[int, dict[str, float]]:
    return {
        t: interleaved_medians(
            {r: runner(model_name, r, t, batch, device) for r in ("plain", *rows)}, repeats
        )
        for t in steps_list
    }


# ---------------------------------------------------------------------------- memory
def memory_child(row: str, steps: int) -> None:
    """In a fresh process: warm up at T = 1, then the peak-RSS increase of one call."""
    torch.set_num_threads(1)
    runner("cnn1d", row, 1, 8, "cpu")()
    fn = runner("cnn1d", row, steps, 128, "cpu")
    Path("/proc/self/clear_refs").write_text("5")
    before = status_bytes("VmRSS")
    fn()
    print(json.dumps({"delta": status_bytes("VmHWM") - before}))


def cuda_peak(model_name: str, row: str, steps: int, batch: int) -> float:
    """Peak CUDA memory (MiB) allocated during one call, above what was allocated before."""
    fn = runner(model_name, row, steps, batch, "cuda")
    fn()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    return (torch.cuda.max_memory_allocated() - before) / 2**20


# ------------------------------------------------------------------------------ rows
def per_iteration_seconds(n_rows: int, iterations: int) -> float:
    """Marginal seconds of one outer iteration of ``BO4SC(batch_size=256)`` on ``n_rows``."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n_rows, 20, generator=gen)
    y = torch.randint(0, 10, (n_rows,), generator=gen)
    x_val, y_val = x[:512].clone(), y[:512].clone()

    def fit(count: int) -> float:
        torch.manual_seed(0)
        model = nn.Sequential(
            nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)
        )
        start = time.perf_counter()
        fitted = BO4SC(
            batch_size=256, inner_steps=10, outer_iterations=count, weight_lr=1.0, seed=0
        ).fit(model, (x, y), (x_val, y_val))
        assert fitted.weights_.shape == (n_rows,)
        return time.perf_counter() - start

    fit(2)  # warm-up
    return (fit(iterations) - fit(3)) / (iterations - 3)


# ------------------------------------------------------------------------------ main
def ratio_table(times: dict[int, dict[str, float]], rows: tuple[str, ...]) -> list[str]:
    steps = list(times)
    lines = [
        "| computation | " + " | ".join(f"T = {t}" for t in steps) + " |",
        "|---|" + "---|" * len(steps),
        "| T plain SGD steps, absolute (ms) | "
        + " | ".join(f"{times[t]['plain'] * 1e3:.1f}" for t in steps)
        + " |",
    ]
    for row in rows:
        lines.append(
            f"| {ESTIMATORS[row][0]} | "
            + " | ".join(f"{times[t][row] / times[t]['plain']:.2f}x" for t in steps)
            + " |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--iterations", type=int, default=23)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "bilevel-minibatch.md"
    )
    parser.add_argument("--memory-child", nargs=2, metavar=("ROW", "T"))
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args.memory_child[0], int(args.memory_child[1]))
        return
    torch.set_num_threads(args.threads)
    cnn = time_rows("cnn1d", [1, 5, 10, 20], 128, "cpu", args.repeats, tuple(ESTIMATORS))
    resnet = time_rows(
        "resnet18",
        [1, 3],
        32,
        "cpu",
        max(2, args.repeats // 2),
        ("unrolled", "autograd", "lookahead"),
    )
    memory = {
        t: {r: memory_delta(r, t, __file__) for r in ("plain", "unrolled", "autograd", "implicit")}
        for t in (1, 5, 10, 20)
    }
    scaling = {n: per_iteration_seconds(n, args.iterations) for n in N_ROWS}

    lines = [
        "# Minibatch BO4SC: one outer iteration vs the T plain SGD steps it replaces",
        "",
        f"selfcal {selfcal.__version__}, torch {torch.__version__}, {args.threads} CPU "
        f"thread(s), {platform.machine()}; median of {args.repeats} interleaved repeats.",
        "Command: `python benchmarks/bench_bilevel_minibatch.py`",
        "",
        f"Inner optimizer SGD lr {LR}, momentum {MOMENTUM}; 10 classes; random inputs "
        "(the cost does not depend on the values).",
        "",
        "## MNIST-1D CNN (cnn1d), batch 128, CPU: time / T plain steps",
        "",
        *ratio_table(cnn, tuple(ESTIMATORS)),
        "",
        "## CIFAR ResNet-18 (resnet18, 3x32x32), batch 32, CPU: time / T plain steps",
        "",
        *ratio_table(resnet, ("unrolled", "autograd", "lookahead")),
        "",
        "## Peak memory increase of one call, cnn1d, batch 128 (MiB; fresh process)",
        "",
        "| computation | T = 1 | T = 5 | T = 10 | T = 20 |",
        "|---|---|---|---|---|",
    ]
    labels = {
        "plain": "torch.optim.SGD, T plain steps (reference)",
        "unrolled": ESTIMATORS["unrolled"][0],
        "autograd": ESTIMATORS["autograd"][0],
        "implicit": ESTIMATORS["implicit"][0],
    }
    for row, label in labels.items():
        lines.append(f"| {label} | " + " | ".join(f"{memory[t][row]:.1f}" for t in memory) + " |")
    base = scaling[N_ROWS[0]]
    lines += [
        "",
        "## One more outer iteration against the number of training rows",
        "",
        "`BO4SC(model, batch_size=256, inner_steps=10)`, MLP 20-64-64-10, CPU; the "
        f"difference of a {args.iterations}- and a 3-iteration fit, per iteration.",
        "",
        "| rows N | seconds / iteration | vs N = 10^4 |",
        "|---|---|---|",
    ]
    lines += [f"| {n:,} | {s:.4f} | {s / base:.2f}x |" for n, s in scaling.items()]
    lines += ["", "## GPU", ""]
    if torch.cuda.is_available():
        gpu = time_rows(
            "resnet18", [1, 5, 10], 128, "cuda", args.repeats, ("unrolled", "autograd", "lookahead")
        )
        lines += [
            f"{torch.cuda.get_device_name()}, ResNet-18, batch 128:",
            "",
            *ratio_table(gpu, ("unrolled", "autograd", "lookahead")),
            "",
            "| peak CUDA memory of one call (MiB) | T = 1 | T = 5 | T = 10 |",
            "|---|---|---|---|",
        ]
        for row in ("plain", "unrolled", "lookahead"):
            lines.append(
                f"| {row} | "
                + " | ".join(f"{cuda_peak('resnet18', row, t, 128):.0f}" for t in (1, 5, 10))
                + " |"
            )
    else:
        lines.append(
            "Not run: no CUDA device on the machine that produced this report (the "
            "ResNet-18 rows run on the GPU when `torch.cuda.is_available()`)."
        )
    write_report("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
