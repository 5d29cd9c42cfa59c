"""Cost of one meta-learning iteration relative to one plain CE training step.

Per backbone (``--backbones``): a train batch of 128 and a meta-val batch of 128, 10 classes,
one intra-op thread. Backbones:

* ``resnet18`` -- ``build_model("resnet18", n_classes=10)`` (the CIFAR ResNet-18 of [MC] /
  [MetaReg], 11.2M parameters) on CIFAR-shaped random inputs ``3 x 32 x 32``: the papers'
  setting, so the representative row set. Slow on a CPU core (seconds per step): few repeats.
* ``cnn2d`` -- the tiny LeNet-shaped CNN on 8x8 digit-shaped random inputs (head 128 x 10).

Rows: a plain step (forward, sum CE, backward, clip 2, SGD lr 0.01 / momentum 0.9 / wd 5e-4)
and a full :meth:`~selfcal.bilevel.MetaStep.step` (train forward, the one-step-lookahead
hypergradient through the head, Adam on phi, the real step) for γ-Net + SECE, γ-Net + DECE and
CE-DECE (unit-wise L2). Components (γ-Net + SECE model, timed alone): the eval-mode no-grad
meta-val forward and the hypergradient by the default fast path
(:class:`~selfcal.bilevel.AutogradLookahead`) and by the engine's
:class:`~selfcal.bilevel.OneStepLookahead` (the reference). Every row runs once per repeat, in
turn (interleaved, so load on the shared machine hits all rows alike); the tables give medians
and the ratio to the plain step of the same backbone. methods §6 estimate: 1.5-2x.

    python benchmarks/bench_meta.py                         # both backbones, < ~5 minutes
    python benchmarks/bench_meta.py --backbones cnn2d --repeats 200
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from _timing import interleaved_medians, write_report
from torch import nn

from selfcal.bilevel import (
    AutogradLookahead,
    MetaBatch,
    MetaLookahead,
    MetaStep,
    OneStepLookahead,
    meta_hypergradient,
    meta_objective,
)
from selfcal.bilevel.meta import make_meta_module
from selfcal.models import build_model
from selfcal.training import TrainConfig, make_optimizer, prepare_run

CONFIG = TrainConfig(
    optimizer="sgd", lr=0.01, momentum=0.9, weight_decay=5e-4, batch_size=128, grad_clip=2.0
)
BATCH = 128
N_CLASSES = 10
PLAIN = "plain CE step (reference)"
METHODS = {
    "gamma-net + SECE": ("gamma-net", "sece"),
    "gamma-net + DECE": ("gamma-net", "dece"),
    "CE-DECE (unit-wise L2)": ("unit-l2", "dece"),
}
TARGET = 1.5


@dataclass(frozen=True)
class Backbone:
    name: str
    input_shape: tuple[int, ...]
    description: str
    repeats: int


BACKBONES = {
    "resnet18": Backbone(
        "resnet18",
        (3, 32, 32),
        "CIFAR ResNet-18 (11.2M parameters, head 512 x 10), CIFAR-shaped random inputs 3x32x32",
        5,
    ),
    "cnn2d": Backbone(
        "cnn2d", (1, 8, 8), "tiny cnn2d (head 128 x 10), 8x8 digit-shaped random inputs", 100
    ),
}

Step = Callable[[], object]


def plain_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
) -> None:
    optimizer.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y, reduction="sum").backward()
    nn.utils.clip_grad_norm_(model.parameters(), 2.0)
    optimizer.step()


def meta_step(name: str, method: str, objective: str, data: tuple[torch.Tensor, ...]) -> Step:
    """One :meth:`MetaStep.step` on the train batch, its meta batch the whole meta-val set."""
    x, y, xm, ym = data
    model = build_model(name, seed=0, n_classes=N_CLASSES)
    step = MetaStep((xm, ym), method=method, meta_objective=objective)
    step.start(prepare_run(model, (x, y), config=CONFIG))
    step.start_epoch(0)
    return lambda: step.step(model, x, y)


def component_steps(name: str, data: tuple[torch.Tensor, ...]) -> dict[str, Step]:
    """The meta step's own parts for γ-Net + SECE, each timed alone."""
    x, y, xm, ym = data
    model = build_model(name, seed=0, n_classes=N_CLASSES)
    meta, objective = make_meta_module(model, "gamma-net"), meta_objective("sece")
    with torch.no_grad():
        features = model.features(x)  # train mode, as in the step
        batch = MetaBatch(x, y, features, xm, ym, eval_features(model, xm))

    def hypergradient(estimator: AutogradLookahead | OneStepLookahead) -> Step:
        lookahead = MetaLookahead(CONFIG.lr, objective)
        return lambda: meta_hypergradient(model, meta, batch, lookahead, estimator=estimator)

    return {
        "meta-val forward (eval mode, no grad)": lambda: eval_features(model, xm),
        "hypergradient, autograd fast path (default)": hypergradient(AutogradLookahead()),
        "hypergradient, torch.func engine (reference)": hypergradient(OneStepLookahead()),
    }


def eval_features(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        features = model.features(x)
    model.train()
    return features


def random_data(shape: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    """One fixed (x, y, x_meta, y_meta): steps on it are timed, not trained to convergence
    (the state keeps changing, so the repeats stay in a normal regime at lr 0.01)."""
    gen = torch.Generator().manual_seed(0)
    x, xm = (torch.randn(BATCH, *shape, generator=gen) for _ in range(2))
    y, ym = (torch.randint(0, N_CLASSES, (BATCH,), generator=gen) for _ in range(2))
    return x, y, xm, ym


def run_backbone(spec: Backbone, repeats: int) -> tuple[dict[str, float], list[str]]:
    data = random_data(spec.input_shape)
    plain_model = build_model(spec.name, seed=0, n_classes=N_CLASSES)
    plain_opt = make_optimizer(plain_model, CONFIG)
    steps = {PLAIN: lambda: plain_step(plain_model, plain_opt, data[0], data[1])}
    steps |= {row: meta_step(spec.name, *args, data) for row, args in METHODS.items()}
    components = component_steps(spec.name, data)
    medians = interleaved_medians(steps | components, repeats)
    reference = medians[PLAIN]
    lines = [
        f"## {spec.name}: {spec.description}",
        "",
        f"Median of {repeats} interleaved repeats.",
        "",
        "| step | median (ms) | ratio to plain |",
        "|---|---|---|",
    ]
    for name in (*steps, *components):
        if name == next(iter(components)):
            lines += [
                "",
                "Components of the γ-Net + SECE meta step, timed alone:",
                "",
                "| component | median (ms) | ratio to plain |",
                "|---|---|---|",
            ]
        lines.append(f"| {name} | {1e3 * medians[name]:.3f} | {medians[name] / reference:.2f}x |")
    return {name: medians[name] / reference for name in medians}, lines


def summary(ratios: dict[str, dict[str, float]]) -> list[str]:
    """One generated sentence per backbone: the meta-step ratios and what they consist of."""
    lines = [
        "## Summary",
        "",
        "A meta step is a plain step (its train forward is shared with the real step) "
        "plus an eval-mode, no-grad forward of the meta-val batch (the outer loss needs "
        "its features), the head-sized lookahead hypergradient, γ-Net and Adam on phi. "
        "The forward is backbone-sized and cannot be dropped without changing the method; "
        "the rest is fixed and small, so it dominates only on a tiny backbone.",
        "",
    ]
    for name, r in ratios.items():
        worst = max(r[row] for row in METHODS)
        verdict = "met" if worst <= TARGET else "NOT met"
        fast = r["hypergradient, autograd fast path (default)"]
        engine = r["hypergradient, torch.func engine (reference)"]
        lines.append(
            f"* {name}: meta step {min(r[row] for row in METHODS):.2f}-{worst:.2f}x a plain "
            f"step (target <= {TARGET}x {verdict}). Of the γ-Net + SECE overhead "
            f"({r['gamma-net + SECE'] - 1:.2f}x), the eval-mode meta-val forward is "
            f"{r['meta-val forward (eval mode, no grad)']:.2f}x and the hypergradient "
            f"{fast:.2f}x (the torch.func engine: {engine:.2f}x); the remainder is γ-Net, "
            f"Adam on phi, the focal loss in place of CE and timing noise."
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--backbones",
        default=",".join(BACKBONES),
        help=f"comma-separated subset of {', '.join(BACKBONES)}",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="repeats for every backbone (default: "
        + ", ".join(f"{b.name} {b.repeats}" for b in BACKBONES.values())
        + ")",
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "meta.md")
    args = parser.parse_args()
    names = [n.strip() for n in args.backbones.split(",") if n.strip()]
    unknown = sorted(set(names) - set(BACKBONES))
    if unknown or not names:
        parser.error(f"--backbones: unknown {unknown}; choose from {list(BACKBONES)}")
    torch.set_num_threads(1)
    command = f"python benchmarks/bench_meta.py --backbones {','.join(names)}" + (
        f" --repeats {args.repeats}" if args.repeats is not None else ""
    )
    lines = [
        "# One meta-learning iteration vs one plain CE step",
        "",
        f"Train batch {BATCH} + meta batch {BATCH}, {N_CLASSES} classes, 1 intra-op "
        f"thread; torch {torch.__version__}, {platform.processor() or platform.machine()}"
        ", shared machine (ratios of interleaved medians; absolute times are noisy).",
        f"Command: `{command}`",
        "",
    ]
    ratios = {}
    for name in names:
        spec = BACKBONES[name]
        start = time.perf_counter()
        ratios[name], section = run_backbone(spec, args.repeats or spec.repeats)
        lines += section + ["", f"({time.perf_counter() - start:.0f} s for this backbone.)", ""]
        print("\n".join(section), flush=True)
    text = "\n".join(lines + summary(ratios)) + "\n"
    write_report(text, args.out)


if __name__ == "__main__":
    main()
