"""Cost of one meta-learning iteration relative to one plain CE training step.

Same model (``cnn2d`` on 8x8 digit images, 10 classes), same train batch of 128 and a
meta-val batch of 128, one intra-op thread. Rows: a plain step (forward, sum CE, backward,
clip 2, SGD lr 0.01 / 0.9 / 5e-4) and a full :meth:`MetaCalibrationTrainer.step` (train forward, the
one-step-lookahead hypergradient through the head, Adam on phi, the real step) for γ-Net +
SECE, γ-Net + DECE and CE-DECE (unit-wise L2). The variants are interleaved in every repeat;
the table reports medians and the ratio to the plain step. Spec §6 estimate: 1.5-2x.

    python benchmarks/bench_meta.py --repeats 200
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from selfcal.bilevel import MetaCalibrationTrainer
from selfcal.bilevel.meta_calibration import make_meta_module
from selfcal.models import build_model
from selfcal.training import TrainConfig, make_optimizer

CONFIG = TrainConfig(optimizer="sgd", lr=0.01, momentum=0.9, weight_decay=5e-4,
                     batch_size=128, grad_clip=2.0)


def plain_step(model, optimizer, x, y):
    optimizer.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y, reduction="sum").backward()
    nn.utils.clip_grad_norm_(model.parameters(), 2.0)
    optimizer.step()


def meta_step(method, objective):
    model = build_model("cnn2d", seed=0, n_classes=10)
    trainer = MetaCalibrationTrainer(method=method, meta_objective=objective, config=CONFIG)
    meta = make_meta_module(model, method)
    optimizer = make_optimizer(model, CONFIG)
    meta_optimizer = torch.optim.Adam(meta.parameters(), lr=1e-3)
    return lambda x, y, xm, ym: trainer.step(model, meta, x, y, xm, ym, optimizer,
                                             meta_optimizer, 0.01)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).parent / "results" / "meta.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    # one fixed batch pair: steps on it are timed, not trained to convergence (the state
    # keeps changing, so a few hundred repeats stay in a normal regime at lr 0.01)
    x, xm = torch.randn(128, 1, 8, 8, generator=gen), torch.randn(128, 1, 8, 8, generator=gen)
    y, ym = torch.randint(0, 10, (128,), generator=gen), torch.randint(0, 10, (128,),
                                                                       generator=gen)
    plain_model = build_model("cnn2d", seed=0, n_classes=10)
    plain_opt = make_optimizer(plain_model, CONFIG)
    steps = {"gamma-net + SECE": meta_step("gamma-net", "sece"),
             "gamma-net + DECE": meta_step("gamma-net", "dece"),
             "CE-DECE (unit-wise L2)": meta_step("unit-l2", "dece")}
    rows = {"plain CE step (reference)": lambda: plain_step(plain_model, plain_opt, x, y)}
    rows |= {name: (lambda f=f: f(x, y, xm, ym)) for name, f in steps.items()}
    times: dict[str, list[float]] = {name: [] for name in rows}
    for fn in rows.values():
        fn()  # warm-up
    for _ in range(args.repeats):
        for name, fn in rows.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    reference = statistics.median(times["plain CE step (reference)"])
    lines = [
        "# One meta-learning iteration vs one plain CE step",
        "",
        f"cnn2d (8x8 digits, 10 classes), batch 128 + meta batch 128, 1 thread, "
        f"median of {args.repeats} interleaved repeats; torch {torch.__version__}, "
        f"{platform.processor() or platform.machine()}.",
        "Command: `python benchmarks/bench_meta.py --repeats " f"{args.repeats}`",
        "",
        "| step | median (ms) | ratio to plain |",
        "|---|---|---|",
    ]
    for name, values in times.items():
        median = statistics.median(values)
        lines.append(f"| {name} | {1e3 * median:.3f} | {median / reference:.2f}x |")
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
