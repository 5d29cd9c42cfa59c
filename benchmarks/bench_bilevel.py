"""Cost of one BO4SC outer step (T inner steps + hypergradient) against T plain training steps.

Problem: BO4SC's size -- MLP 2 -> 64 -> 64 -> 5 (ReLU, float32), 700 training and 300
validation points, full batch. Reference: ``T`` plain, non-differentiable steps of
``torch.optim.Adam`` on the same weighted cross-entropy (forward, backward, step). Rows:

* selfcal ``Unrolled(T)``, ``OneStepLookahead(T)``, ``Implicit(T, ConjugateGradient(20))``,
  ``Implicit(T, Neumann(0.01, 20))`` -- one :func:`selfcal.bilevel.bo4sc_step` each;
* peer: torchopt 0.7.3 ``MetaAdam`` unrolled (same math: Adam with ``eps_root`` and
  differentiable moments, BO4SC's outer loss, ``torch.autograd.grad`` to the weights).

Time: median of ``--repeats`` interleaved runs after a warm-up, as a ratio to ``T`` plain
steps (absolute times on a shared machine are noise). One intra-op thread (``--threads``).

Memory: in a fresh subprocess per (row, T), the peak resident set size during the measured
call minus the resident set size just before it. ``tracemalloc`` does not see torch's CPU
allocations, so RSS is the sound whole-process measure. The peak (``VmHWM``) is reset right
before the call by writing ``5`` to ``/proc/self/clear_refs`` (Linux >= 4.0; otherwise the
peak reached while importing torch would hide everything). The subprocess sets
``MALLOC_MMAP_THRESHOLD_=65536`` so glibc serves every tensor over 64 KiB by ``mmap`` and
returns it at once (RSS then follows live tensor memory, not heap high-water marks), and warms
up on an 8-point copy of the problem so one-off initialisation is not counted.

Vmap: one ``vmap``-ed ``bo4sc_step`` over 25 stacked problems against 25 sequential calls.

    python benchmarks/bench_bilevel.py                  # writes benchmarks/results/bilevel.md
    python benchmarks/bench_bilevel.py --repeats 3 --steps 1,10
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from _timing import interleaved_medians, write_report
from torch import nn
from torch.func import vmap

import selfcal
from selfcal.bilevel import (
    Adam,
    BO4SCConfig,
    BO4SCData,
    BO4SCState,
    ConjugateGradient,
    Implicit,
    Neumann,
    OneStepLookahead,
    Unrolled,
    bo4sc_init,
    bo4sc_inner_loss,
    bo4sc_outer_loss,
    bo4sc_step,
)

INNER_LR, WEIGHT_LR, BETA, EPS_ROOT = 1e-2, 10.0, 20.0, 1e-12
ROWS = ("unrolled", "lookahead", "implicit-cg", "implicit-neumann", "torchopt-metaadam")
LABELS = {
    "plain": "torch.optim.Adam, T plain steps (reference)",
    "unrolled": "selfcal Unrolled(T)",
    "lookahead": "selfcal OneStepLookahead(T)",
    "implicit-cg": "selfcal Implicit(T, ConjugateGradient(20))",
    "implicit-neumann": "selfcal Implicit(T, Neumann(0.01, 20))",
    "torchopt-metaadam": "torchopt MetaAdam unrolled (peer)",
}


# ------------------------------------------------------------------------- problem
def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 5)
    )


def make_data(seed: int, n_train: int = 700, n_val: int = 300) -> BO4SCData:
    """Five Gaussian blobs (std 1.7, centres in [-10, 10]^2), as BO4SC's Blobs 1.7."""
    gen = torch.Generator().manual_seed(seed)
    centres = 20 * torch.rand(5, 2, generator=gen) - 10

    def sample(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.randint(0, 5, (n,), generator=gen)
        return centres[y] + 1.7 * torch.randn(n, 2, generator=gen), y

    return BO4SCData(*sample(n_train), *sample(n_val))


def estimator_for(row: str, steps: int):
    return {
        "unrolled": lambda: Unrolled(steps),
        "lookahead": lambda: OneStepLookahead(steps),
        "implicit-cg": lambda: Implicit(steps, ConjugateGradient(20)),
        "implicit-neumann": lambda: Implicit(steps, Neumann(INNER_LR, 20)),
    }[row]()


def selfcal_runner(row: str, steps: int, data: BO4SCData) -> Callable[[], object]:
    model = make_model(0)
    config = BO4SCConfig(
        estimator=estimator_for(row, steps),
        inner_optimizer=Adam(INNER_LR, eps_root=EPS_ROOT),
        weight_lr=WEIGHT_LR,
        beta=BETA,
    )
    params = {k: p.detach() for k, p in model.named_parameters()}
    state = bo4sc_init(params, data.x_train.shape[0], config)
    return lambda: bo4sc_step(model, state, data, config)


def plain_runner(steps: int, data: BO4SCData) -> Callable[[], object]:
    model = make_model(0)
    optim = torch.optim.Adam(model.parameters(), lr=INNER_LR)
    weights = torch.ones(data.x_train.shape[0])

    def run() -> None:
        for _ in range(steps):
            optim.zero_grad()
            bo4sc_inner_loss(model(data.x_train), data.y_train, weights).backward()
            optim.step()

    return run


def torchopt_runner(steps: int, data: BO4SCData) -> Callable[[], torch.Tensor]:
    """One BO4SC outer step with torchopt's OOP API (methods §4.4), warm-started."""
    import torchopt

    model = make_model(0)
    inner_opt = torchopt.MetaAdam(model, lr=INNER_LR, eps_root=EPS_ROOT, moment_requires_grad=True)
    weights = torch.ones(data.x_train.shape[0])

    def run() -> torch.Tensor:
        nonlocal weights
        w = weights.clone().requires_grad_()
        for _ in range(steps):
            inner_opt.step(bo4sc_inner_loss(model(data.x_train), data.y_train, w))
        outer = bo4sc_outer_loss(model(data.x_val), data.y_val, BETA)
        (grad,) = torch.autograd.grad(outer, w)
        torchopt.stop_gradient(model)
        torchopt.stop_gradient(inner_opt)
        weights = (weights - WEIGHT_LR * grad).clamp(0, 1)
        return grad

    return run


def runner(row: str, steps: int, data: BO4SCData) -> Callable[[], object]:
    if row == "plain":
        return plain_runner(steps, data)
    if row == "torchopt-metaadam":
        return torchopt_runner(steps, data)
    return selfcal_runner(row, steps, data)


def check_same_math(data: BO4SCData, steps: int = 5) -> float:
    """Relative difference of the first hypergradient, selfcal Unrolled vs torchopt, in
    float64 (float32 rounding through Adam's division by sqrt(v) would hide the agreement)."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        data = BO4SCData(data.x_train.double(), data.y_train, data.x_val.double(), data.y_val)
        _, info = selfcal_runner("unrolled", steps, data)()
        peer = torchopt_runner(steps, data)()
    finally:
        torch.set_default_dtype(default)
    return float((info.weight_grad - peer).norm() / peer.norm())


def vmap_comparison(steps: int, n_problems: int, repeats: int) -> dict[str, float]:
    """``vmap`` of one outer step over ``n_problems`` stacked problems vs a Python loop."""
    model = make_model(0)
    datasets = [make_data(seed) for seed in range(n_problems)]
    config = BO4SCConfig(
        estimator=Unrolled(steps),
        inner_optimizer=Adam(INNER_LR, eps_root=EPS_ROOT),
        weight_lr=WEIGHT_LR,
        beta=BETA,
    )
    states = []
    for seed in range(n_problems):
        params = {k: p.detach() for k, p in make_model(seed).named_parameters()}
        states.append(bo4sc_init(params, 700, config))
    stacked_data = BO4SCData(*(torch.stack(parts) for parts in zip(*datasets, strict=True)))
    stacked_state = BO4SCState(
        {k: torch.stack([s.params[k] for s in states]) for k in states[0].params},
        type(states[0].opt_state)(
            *(torch.stack(parts) for parts in zip(*(s.opt_state for s in states), strict=True))
        ),
        torch.stack([s.weights for s in states]),
    )
    batched = vmap(lambda state, data: bo4sc_step(model, state, data, config))
    return interleaved_medians(
        {
            "vmap": lambda: batched(stacked_state, stacked_data),
            "loop": lambda: [
                bo4sc_step(model, s, d, config) for s, d in zip(states, datasets, strict=True)
            ],
        },
        repeats,
    )


# -------------------------------------------------------------------------- memory
def status_bytes(field: str) -> int:
    """``VmRSS`` (current) or ``VmHWM`` (peak) of this process from ``/proc/self/status``."""
    match = re.search(rf"{field}:\s+(\d+) kB", Path("/proc/self/status").read_text())
    if match is None:
        raise RuntimeError(f"/proc/self/status has no {field}")
    return int(match.group(1)) * 1024


def memory_child(row: str, steps: int) -> None:
    """Runs in a fresh process: warm up on 8 points, then print the peak-RSS increase of one
    measured call on the full problem."""
    torch.set_num_threads(1)
    tiny = make_data(0, n_train=8, n_val=8)
    runner(row, 1, tiny)()
    fn = runner(row, steps, make_data(0))
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak RSS to the current RSS
    before = status_bytes("VmRSS")
    fn()
    print(json.dumps({"delta": status_bytes("VmHWM") - before}))


def memory_delta(row: str, steps: int, script: str = __file__) -> float:
    """MiB: the peak-RSS increase ``script --memory-child ROW T`` prints from a fresh process
    (one thread, every tensor over 64 KiB served by ``mmap``)."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, script, "--memory-child", row, str(steps)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["delta"] / 2**20


# ---------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", default="1,5,10,20,50")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--vmap-problems", type=int, default=25)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "bilevel.md"
    )
    parser.add_argument("--memory-child", nargs=2, metavar=("ROW", "T"))
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args.memory_child[0], int(args.memory_child[1]))
        return
    torch.set_num_threads(args.threads)
    import torchopt

    steps_list = [int(s) for s in args.steps.split(",")]
    data = make_data(0)
    same_math = check_same_math(data)
    times, memory = {}, {}
    for steps in steps_list:
        fns = {row: runner(row, steps, data) for row in ("plain", *ROWS)}
        times[steps] = interleaved_medians(fns, args.repeats)
        memory[steps] = {row: memory_delta(row, steps) for row in ("plain", *ROWS)}
    vm = vmap_comparison(10, args.vmap_problems, max(3, args.repeats // 2))

    header = "| computation | " + " | ".join(f"T = {s}" for s in steps_list) + " |"
    rule = "|---|" + "---|" * len(steps_list)
    lines = [
        "# Bilevel engine: one BO4SC outer step vs T plain Adam steps",
        "",
        f"selfcal {selfcal.__version__}, torch {torch.__version__}, torchopt "
        f"{torchopt.__version__}, {args.threads} thread(s), {platform.machine()}; "
        f"median of {args.repeats} interleaved repeats.",
        f"Command: `python benchmarks/bench_bilevel.py --steps {args.steps} "
        f"--repeats {args.repeats}`",
        "",
        "Problem: MLP 2-64-64-5 (ReLU, float32), 700 train / 300 val points, full batch, "
        f"Adam lr {INNER_LR} (eps_root {EPS_ROOT}), beta {BETA}. Same math check: first "
        f"hypergradient of selfcal Unrolled(5) vs torchopt MetaAdam in float64, relative "
        f"difference {same_math:.1e}.",
        "",
        "## Time of one outer step / time of T plain steps",
        "",
        header,
        rule,
        "| T plain steps, absolute (ms) | "
        + " | ".join(f"{times[s]['plain'] * 1e3:.1f}" for s in steps_list)
        + " |",
    ]
    for row in ROWS:
        lines.append(
            f"| {LABELS[row]} | "
            + " | ".join(f"{times[s][row] / times[s]['plain']:.2f}x" for s in steps_list)
            + " |"
        )
    lines += [
        "",
        "## Peak memory increase of one call (MiB; peak RSS delta in a fresh process)",
        "",
        header,
        rule,
    ]
    for row in ("plain", *ROWS):
        lines.append(
            f"| {LABELS[row]} | " + " | ".join(f"{memory[s][row]:.1f}" for s in steps_list) + " |"
        )
    lines += [
        "",
        f"## {args.vmap_problems} problems, Unrolled(10): one vmapped step vs a Python loop",
        "",
        "| computation | time (ms) | per problem (ms) | loop / vmap |",
        "|---|---|---|---|",
        f"| vmap over {args.vmap_problems} stacked problems | {vm['vmap'] * 1e3:.1f} | "
        f"{vm['vmap'] * 1e3 / args.vmap_problems:.2f} | {vm['loop'] / vm['vmap']:.2f}x |",
        f"| {args.vmap_problems} sequential calls | {vm['loop'] * 1e3:.1f} | "
        f"{vm['loop'] * 1e3 / args.vmap_problems:.2f} | 1.00x |",
    ]
    text = "\n".join(lines) + "\n"
    write_report(text, args.out)


if __name__ == "__main__":
    main()
