"""Benchmark: fitting temperature scaling on 10^5 x 100 logits.

Compares selfcal's ``TemperatureScaling(method="nll")`` (safeguarded Newton on 1/T: float32
passes to get close, a float64 pass for the exact optimum) with ``torch.optim.LBFGS`` on
``log T`` in float32 and float64, measured in the same run with interleaved repeats. Reports
median wall times, the speed-up and ``|T_ours - T_lbfgs| / T``; prints a Markdown table and
writes it, with every peer's exact settings, to ``benchmarks/results/temperature.md``.

Peers (see :data:`PEER_SETTINGS`): the LBFGS that reaches the optimum (strong-Wolfe line
search on ``log T``, restarted until a step changes nothing), the same as one ``step()`` call
with default tolerances, and with ``--user-configs`` the calls of torch-uncertainty's
``TemperatureScaler`` and of the Guo et al. reference code (LBFGS on ``T``, fixed step, no line
search), which are slower here and do not reach the optimum.

Run: ``python benchmarks/bench_temperature.py [--repeats 5] [--threads 1] [--user-configs]``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

import torch
from _timing import write_report

from selfcal.posthoc import TemperatureScaling
from selfcal.posthoc._inverse_temperature import fit_inverse_temperature

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


def fit_ours_solver(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """The solver alone, without ``fit``'s input validation."""
    return 1.0 / fit_inverse_temperature(logits, labels)


def fit_lbfgs(logits: torch.Tensor, labels: torch.Tensor, dtype: torch.dtype) -> float:
    """LBFGS on ``u = log T`` minimising the mean cross-entropy of ``z / exp(u)``, iterated
    until a step changes nothing (gradient below 1e-9 or change below 1e-12 / 1e-9)."""
    z = logits.to(dtype)
    log_t = torch.zeros((), dtype=dtype, requires_grad=True)
    tol = 1e-12 if dtype == torch.float64 else 1e-9
    opt = torch.optim.LBFGS(
        [log_t],
        lr=1.0,
        max_iter=100,
        tolerance_grad=1e-9,
        tolerance_change=tol,
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


def fit_lbfgs_once(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """One ``LBFGS.step`` on ``log T`` (float32) with strong Wolfe and default tolerances."""
    log_t = torch.zeros((), requires_grad=True)
    opt = torch.optim.LBFGS([log_t], line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(logits / log_t.exp(), labels)
        loss.backward()
        return loss

    opt.step(closure)
    return float(log_t.detach().double().exp())


def fit_lbfgs_on_t(
    logits: torch.Tensor, labels: torch.Tensor, init: float, lr: float, max_iter: int
) -> float:
    """LBFGS directly on ``T`` (float32), one ``step`` with no line search:
    torch-uncertainty's ``TemperatureScaler`` (init 1, lr 0.1, max_iter 100) and the Guo et
    al. code (init 1.5, lr 0.01, max_iter 50)."""
    t = torch.full((), init, requires_grad=True)
    opt = torch.optim.LBFGS([t], lr=lr, max_iter=max_iter)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(logits / t, labels)
        loss.backward()
        return loss

    opt.step(closure)
    return float(t.detach())


OURS = "selfcal TemperatureScaling().fit"
PEER_SETTINGS = {
    OURS: "public API incl. input validation; T exact (float64 optimum)",
    "selfcal solver only": "`fit_inverse_temperature` without `fit`'s input validation",
    "LBFGS log-T float32": "log T, init 0, lr=1, max_iter=100, tolerance_grad=1e-9, "
    "tolerance_change=1e-9, line_search_fn='strong_wolfe'; step() repeated (<= 10) until "
    "log T stops changing",
    "LBFGS log-T float32, one step()": "log T, init 0, defaults (lr=1, max_iter=20, "
    "tolerance_grad=1e-7, tolerance_change=1e-9), line_search_fn='strong_wolfe', one step()",
    "LBFGS log-T float64": "as 'LBFGS log-T float32' on float64 logits, tolerance_change=1e-12",
    "LBFGS T, torch-uncertainty defaults": "T, init 1, lr=0.1, max_iter=100, no line search, "
    "one step() (TemperatureScaler defaults)",
    "LBFGS T, Guo et al. code": "T, init 1.5, lr=0.01, max_iter=50, no line search, one step() "
    "(gpleiss/temperature_scaling `set_temperature`)",
}


def timed(fn, *args) -> tuple[float, float]:
    start = time.perf_counter()
    value = fn(*args)
    return time.perf_counter() - start, value


def contenders(logits, labels, user_configs: bool) -> dict:
    out = {
        OURS: lambda: fit_ours(logits, labels),
        "selfcal solver only": lambda: fit_ours_solver(logits, labels),
        "LBFGS log-T float32": lambda: fit_lbfgs(logits, labels, torch.float32),
        "LBFGS log-T float32, one step()": lambda: fit_lbfgs_once(logits, labels),
        "LBFGS log-T float64": lambda: fit_lbfgs(logits, labels, torch.float64),
    }
    if user_configs:
        out["LBFGS T, torch-uncertainty defaults"] = lambda: fit_lbfgs_on_t(
            logits, labels, 1.0, 0.1, 100
        )
        out["LBFGS T, Guo et al. code"] = lambda: fit_lbfgs_on_t(logits, labels, 1.5, 0.01, 50)
    return out


def run(repeats: int, user_configs: bool, command: str) -> str:
    logits, labels = make_data()
    fns = contenders(logits, labels, user_configs)
    for fn in fns.values():  # warm-up (allocator, lazy imports)
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    temps: dict[str, float] = {}
    for _ in range(repeats):  # interleaved so that machine load hits all alike
        for name, fn in fns.items():
            t, temps[name] = timed(fn)
            times[name].append(t)
    t_ours = statistics.median(times[OURS])
    lines = [
        f"Temperature fit on {N_SAMPLES:,} x {N_CLASSES} float32 logits; median of {repeats} "
        f"interleaved repeats; torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{platform.processor() or platform.machine()}. Speed-up = median of the row / median "
        f"of `{OURS}`.",
        f"Command: `{command}`",
        "",
        "| method | median s | min s | T | speed-up of ours | rel. diff of T vs ours |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in fns:
        med = statistics.median(times[name])
        rel = abs(temps[OURS] - temps[name]) / temps[name]
        lines.append(
            f"| {name} | {med:.3f} | {min(times[name]):.3f} | {temps[name]:.10f} | "
            f"{med / t_ours:.2f}x | {rel:.2e} |"
        )
    lines += ["", "Settings:", ""] + [f"- {name}: {PEER_SETTINGS[name]}" for name in fns]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads for every contender (default 1: on a shared, "
        "oversubscribed machine multi-threaded kernels stall unpredictably)",
    )
    parser.add_argument(
        "--user-configs",
        action="store_true",
        help="also time the LBFGS calls of torch-uncertainty and of the Guo et al. code "
        "(LBFGS on T without line search; ~10 s per fit here)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    command = (
        f"python benchmarks/bench_temperature.py --repeats {args.repeats} "
        f"--threads {args.threads}" + (" --user-configs" if args.user_configs else "")
    )
    table = run(args.repeats, args.user_configs, command)
    write_report(table, RESULTS)


if __name__ == "__main__":
    main()
