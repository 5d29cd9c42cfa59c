"""Benchmark: fitting temperature scaling on 10^5 x 100 logits.

Compares selfcal's ``TemperatureScaling(method="nll")`` (safeguarded Newton on 1/T, float64)
with ``torch.optim.LBFGS`` on ``log T`` (strong-Wolfe line search, run to convergence) in
float32 and float64, measured in the same run with interleaved repeats. Reports median wall
times, the speed-up and ``|T_ours - T_lbfgs| / T``; prints a Markdown table and writes it to
``benchmarks/results/temperature.md``.

Run: ``python benchmarks/bench_temperature.py [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

import torch

from selfcal.posthoc import TemperatureScaling

N_SAMPLES, N_CLASSES = 100_000, 100
RESULTS = Path(__file__).parent / "results" / "temperature.md"


def make_data(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Overconfident synthetic logits (float32): Gaussian noise plus a margin on a class that
    is the true label 70% of the time."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, N_CLASSES, (N_SAMPLES,), generator=g)
    target = torch.where(
        torch.rand(N_SAMPLES, generator=g) < 0.7,
        labels,
        torch.randint(0, N_CLASSES, (N_SAMPLES,), generator=g),
    )
    logits = 3.0 * torch.randn(N_SAMPLES, N_CLASSES, generator=g)
    logits[torch.arange(N_SAMPLES), target] += 8.0
    return logits.float(), labels


def fit_ours(logits: torch.Tensor, labels: torch.Tensor) -> float:
    return TemperatureScaling().fit(logits=logits, labels=labels).temperature_


def fit_lbfgs(logits: torch.Tensor, labels: torch.Tensor, dtype: torch.dtype) -> float:
    """LBFGS on ``u = log T`` minimising the mean cross-entropy of ``z / exp(u)``, iterated
    until a step changes nothing (gradient below 1e-9 or change below 1e-12 / float32 eps)."""
    z = logits.to(dtype)
    log_t = torch.zeros((), dtype=dtype, requires_grad=True)
    tol = 1e-12 if dtype == torch.float64 else 1e-9
    opt = torch.optim.LBFGS(
        [log_t], lr=1.0, max_iter=100, tolerance_grad=1e-9, tolerance_change=tol,
        line_search_fn="strong_wolfe",
    )

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(z / log_t.exp(), labels)
        loss.backward()
        return loss

    for _ in range(10):  # restart until an outer step moves nothing
        before = float(log_t.detach())
        opt.step(closure)
        if float(log_t.detach()) == before:
            break
    return float(log_t.detach().double().exp())


def timed(fn, *args) -> tuple[float, float]:
    start = time.perf_counter()
    value = fn(*args)
    return time.perf_counter() - start, value


def run(repeats: int) -> str:
    logits, labels = make_data()
    contenders = {
        "selfcal Newton (float64)": lambda: fit_ours(logits, labels),
        "LBFGS log-T float32": lambda: fit_lbfgs(logits, labels, torch.float32),
        "LBFGS log-T float64": lambda: fit_lbfgs(logits, labels, torch.float64),
    }
    for fn in contenders.values():  # warm-up (allocator, lazy imports)
        fn()
    times: dict[str, list[float]] = {k: [] for k in contenders}
    temps: dict[str, float] = {}
    for _ in range(repeats):  # interleaved so that machine load hits all alike
        for name, fn in contenders.items():
            t, temps[name] = timed(fn)
            times[name].append(t)
    ours = "selfcal Newton (float64)"
    t_ours = statistics.median(times[ours])
    lines = [
        f"Temperature fit on {N_SAMPLES:,} x {N_CLASSES} float32 logits; median of {repeats} "
        f"interleaved repeats; torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{platform.processor() or platform.machine()}.",
        "",
        "| method | median s | min s | T | speed-up of ours | rel. diff of T vs ours |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in contenders:
        med = statistics.median(times[name])
        rel = abs(temps[ours] - temps[name]) / temps[name]
        lines.append(
            f"| {name} | {med:.3f} | {min(times[name]):.3f} | {temps[name]:.10f} | "
            f"{med / t_ours:.2f}x | {rel:.2e} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--threads", type=int, default=1,
        help="torch intra-op threads for every contender (default 1: on a shared, "
        "oversubscribed machine multi-threaded kernels stall unpredictably)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    table = run(args.repeats)
    print(table)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(table)


if __name__ == "__main__":
    main()
