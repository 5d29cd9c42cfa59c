"""The BSCE-GRA report: the analogue of [GRA] Tables 1-5 and 2 with confidence intervals, the
published CIFAR numbers for reference, plain-words verdicts, and Figures 1, 4, 5a, 7-8 -- all
read from the results store.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from selfcal.experiments import bsce_gra as study
from selfcal.experiments import bsce_gra_published as published
from selfcal.experiments.store import ResultsStore, RunRecord
from selfcal.experiments.tables import (
    Aggregate,
    aggregate,
    aggregate_by_key,
    command_line,
    datasets_run,
    study_records,
)
from selfcal.plots.save import new_figure

COLUMNS = (("ECE", "ece"), ("AdaECE", "adaece"), ("classwise ECE", "classwise_ece"))
LABELS = {"ce": "CE", "brier": "Brier", "mmce": "MMCE", "flsd53": "FLSD-53", "dfl": "DFL",
          "bsce": "BSCE", "bsce-gra": "BSCE-GRA", "flsd53-gra": "FLSD-53-GRA",
          "dfl-gra": "DFL-GRA"}
T_NEAR_ONE = 0.1
"""'Optimal T ~ 1' means the 95% CI of T lies within 1 +- this."""


def records(store: ResultsStore, protocol: study.Protocol) -> list[RunRecord]:
    """The protocol's completed runs (its current fingerprint only)."""
    return study_records(store, study.STUDY, study.specs(protocol))


def aggregates(runs: list[RunRecord]) -> dict[tuple[str, str, str], Aggregate]:
    return aggregate_by_key(runs)


def _pct(agg: dict, key: tuple[str, str, str]) -> str:
    a = agg.get(key)
    return "—" if a is None else a.format(scale=100, digits=2)


def loss_table(agg: dict, dataset: str, losses: Sequence[str]) -> str:
    """Tables 1/3/4/5 analogue for one dataset: % pre / post temperature scaling."""
    head = " | ".join(f"{name} pre | {name} post" for name, _ in COLUMNS)
    lines = [f"| loss | {head} | accuracy | T |", "|---|" + "---|" * (2 * len(COLUMNS) + 2)]
    for loss in losses:
        cells = [_pct(agg, (dataset, loss, f"{m}_{tag}")) for _, m in COLUMNS
                 for tag in ("pre", "post")]
        t = agg.get((dataset, loss, "temperature"))
        cells += [_pct(agg, (dataset, loss, "accuracy")), "—" if t is None else t.format(digits=2)]
        lines.append(f"| {LABELS.get(loss, loss)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def published_table() -> str:
    """[GRA] Tables 1 and 3 (ECE % pre/post; accuracy %), ResNet-50 rows, for reference."""
    lines = ["| dataset / model | " + " | ".join(LABELS[x] for x in published.LOSSES) + " |",
             "|---|" + "---|" * len(published.LOSSES)]
    for dataset in ("cifar10", "cifar100"):
        for model in ("resnet50", "resnet110"):
            ece = [published.ECE[(dataset, model, x)] for x in published.LOSSES]
            acc = [published.ACCURACY[(dataset, model, x)] for x in published.LOSSES]
            lines.append(f"| {dataset} {model}: ECE | " + " | ".join(ece) + " |")
            lines.append(f"| {dataset} {model}: accuracy | " + " | ".join(acc) + " |")
    return "\n".join(lines)


def pairs_table(agg: dict, datasets: Sequence[str]) -> str:
    """Table 2 analogue: weight on the loss vs on the gradient (ECE % pre/post, accuracy %)."""
    lines = ["| dataset | loss | ECE pre | ECE post | accuracy | [GRA] CIFAR-10 R50 (ECE; acc) |",
             "|---|---|---|---|---|---|"]
    for d in datasets:
        for pair in study.GRA_PAIRS:
            for loss in pair:
                if (d, loss, "ece_pre") not in agg:
                    continue
                ece, acc = published.TABLE2[loss]
                lines.append(f"| {d} | {LABELS[loss]} | {_pct(agg, (d, loss, 'ece_pre'))} | "
                             f"{_pct(agg, (d, loss, 'ece_post'))} | "
                             f"{_pct(agg, (d, loss, 'accuracy'))} | {ece}; {acc} |")
    return "\n".join(lines)


def verdicts(agg: dict, datasets: Sequence[str], losses: Sequence[str]) -> list[str]:
    """Does the paper's ranking hold here? Computed from the means and CIs."""
    table = [x for x in study.TABLE_LOSSES if x in losses]
    out = []
    for d in datasets:
        means = {x: agg[(d, x, "ece_pre")].mean for x in table if (d, x, "ece_pre") in agg}
        if "bsce-gra" not in means:
            continue
        order = sorted(means, key=means.get)
        rank = order.index("bsce-gra") + 1
        out.append(f"- **{d}**: BSCE-GRA's pre-TS ECE ranks {rank} of {len(order)} "
                   f"(lowest: {LABELS[order[0]]}, {100 * means[order[0]]:.2f}%). "
                   + ("The paper's ranking (BSCE-GRA best) holds." if rank == 1
                      else "The paper's ranking (BSCE-GRA best) does not hold here."))
        t = agg.get((d, "bsce-gra", "temperature"))
        if t is not None and not math.isnan(t.low):
            out.append(f"  Optimal T of BSCE-GRA: {t.format(digits=2)} → {_near_one(t)}.")
        for loss, gra in study.GRA_PAIRS:
            a, b = agg.get((d, loss, "ece_pre")), agg.get((d, gra, "ece_pre"))
            if a is not None and b is not None:
                out.append(f"  {LABELS[gra]} vs {LABELS[loss]} pre-TS ECE: "
                           f"{100 * b.mean:.2f}% vs {100 * a.mean:.2f}% "
                           f"({'lower' if b.mean < a.mean else 'not lower'} with GRA).")
    return out


def _near_one(t: Aggregate) -> str:
    """Whether the temperature's 95% CI shows T ~ 1 (within 1 +- T_NEAR_ONE)."""
    if 1 - T_NEAR_ONE <= t.low and t.high <= 1 + T_NEAR_ONE:
        return f"≈ 1 (95% CI within 1 ± {T_NEAR_ONE}), as the paper reports"
    if t.high < 1 or t.low > 1:
        return "not ≈ 1 (the 95% CI excludes 1)"
    return (f"inconclusive (the 95% CI contains 1 but is wider than 1 ± {T_NEAR_ONE})")


# ------------------------------------------------------------------------------ figures
def figure1():
    """[GRA] Fig. 1: the focal-loss gradient factor g(p, gamma) against p."""
    import torch

    from selfcal.losses import focal_gradient_factor

    fig = new_figure((5.0, 3.6))
    ax = fig.subplots()
    p = torch.linspace(1e-3, 1 - 1e-3, 400, dtype=torch.float64)
    for gamma in (0.0, 1.0, 2.0, 3.0, 5.0):
        ax.plot(p.numpy(), focal_gradient_factor(p, gamma).numpy(), label=f"γ = {gamma:g}")
    ax.set(xlabel="true-class probability p", ylabel="g(p, γ)",
           title="Focal loss: gradient = g(p, γ) · CE gradient")
    ax.legend(fontsize="small")
    return fig


def _run(runs, dataset, loss, seed):
    return next((r for r in runs if (r.spec.dataset, r.spec.method, r.spec.seed)
                 == (dataset, loss, seed)), None)


def figure4(store, runs, protocol, dataset):
    """[GRA] Fig. 4: per-sample last-layer gradient norm against Brier score."""
    losses = [x for x in ("flsd53", "dfl", "bsce-gra") if x in protocol.losses] or ["ce"]
    epochs = study.figure_epochs(protocol, dataset)
    fig = new_figure((3.2 * len(epochs), 2.8 * len(losses)))
    axes = np.atleast_2d(fig.subplots(len(losses), len(epochs), squeeze=False))
    for i, loss in enumerate(losses):
        r = _run(runs, dataset, loss, protocol.seeds[0])
        for j, e in enumerate(epochs):
            ax = axes[i, j]
            if r is not None:
                ax.scatter(store.artefact(r.key, f"brier_e{e}"),
                           store.artefact(r.key, f"grad_norm_e{e}"), s=3, alpha=0.4)
            ax.set_title(f"{LABELS[loss]}, epoch {e}", fontsize="small")
            ax.set_xlabel("Brier score", fontsize="small")
            ax.set_ylabel("‖∇W loss‖", fontsize="small")
    return fig


def figure5a(store, runs, protocol, dataset):
    """[GRA] Fig. 5a: test ECE over epochs (seed means) for CE, FLSD-53 and BSCE-GRA."""
    fig = new_figure((5.0, 3.6))
    ax = fig.subplots()
    for loss in ("ce", "flsd53", "bsce-gra"):
        curves = [store.artefact(r.key, "test_ece_per_epoch") for r in runs
                  if (r.spec.dataset, r.spec.method) == (dataset, loss)]
        if curves:
            mean = 100 * np.mean(curves, axis=0)
            ax.plot(np.arange(1, len(mean) + 1), mean, label=LABELS[loss])
    ax.set(xlabel="epoch", ylabel="test ECE (%)", title=f"{dataset}: test ECE per epoch")
    ax.legend(fontsize="small")
    return fig


def figure7(store, runs, protocol, dataset):
    """[GRA] Figs. 7-8: true-class probability of correct vs wrong test predictions."""
    losses = [x for x in ("ce", "flsd53", "dfl", "bsce") if x in protocol.losses] or ["ce"]
    epochs = study.figure_epochs(protocol, dataset)
    fig = new_figure((3.2 * len(epochs), 2.6 * len(losses)))
    axes = np.atleast_2d(fig.subplots(len(losses), len(epochs), squeeze=False))
    bins = np.linspace(0, 1, 21)
    for i, loss in enumerate(losses):
        r = _run(runs, dataset, loss, protocol.seeds[0])
        for j, e in enumerate(epochs):
            ax = axes[i, j]
            if r is not None:
                prob = store.artefact(r.key, f"true_prob_e{e}")
                ok = store.artefact(r.key, f"correct_e{e}")
                ax.hist(prob[ok], bins=bins, alpha=0.6, label="correct", density=True)
                ax.hist(prob[~ok], bins=bins, alpha=0.6, label="wrong", density=True)
            ax.set_title(f"{LABELS[loss]}, epoch {e}", fontsize="small")
    axes[0, 0].legend(fontsize="small")
    return fig


def write_report(store: ResultsStore, protocol: study.Protocol, out: Path, *, command: str,
                 seconds: float | None = None) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    runs = records(store, protocol)
    agg = aggregates(runs)
    datasets = datasets_run(runs, protocol.datasets)
    figures = {"fig1_focal_gradient_factor.png": figure1()}
    for d in datasets:
        figures[f"fig4_gradient_norm_vs_brier_{d}.png"] = figure4(store, runs, protocol, d)
        figures[f"fig5a_test_ece_per_epoch_{d}.png"] = figure5a(store, runs, protocol, d)
        figures[f"fig7_true_class_probability_{d}.png"] = figure7(store, runs, protocol, d)
    for name, fig in figures.items():
        fig.savefig(out / name, dpi=100)
    env = runs[0].env if runs else {}
    parts = [
        "# BSCE-GRA reproduction (Lin et al., uncertainty-weighted gradients): Tables 1-5, 2",
        "", command_line(command, seconds, runs),
        f"Protocol `{protocol.name}` (fingerprint `{protocol.fingerprint()}`), seeds "
        f"{list(protocol.seeds)}, datasets {list(protocol.datasets)}.",
        f"Environment: selfcal {env.get('selfcal')}, torch {env.get('torch')}, "
        f"{env.get('device')}, git {env.get('git_commit')}.",
        *[f"> {n}" for n in protocol.notes], "",
        (study.__doc__ or "").split("\n\n", 1)[1].strip(), "",
        "Cells: mean ± 95% CI half-width over seeds, in % (T: the temperature). The paper's "
        "CIFAR numbers are below for reference; they are different data and networks.", "",
    ]
    if not any(d in study.CIFAR for d in datasets):
        parts += ["CIFAR-10/100 rows were not run: their files are not under `$SELFCAL_DATA` "
                  "(they run for real, with the papers' 350-epoch schedule, when present).", ""]
    for d in datasets:
        parts += [f"## {d} ({study.MODELS[d]})", "", loss_table(agg, d, protocol.losses), ""]
    parts += ["## Weight on the gradient vs on the loss (Table 2 analogue)", "",
              pairs_table(agg, datasets), "",
              "## Verdicts (computed from the runs above)", "",
              *verdicts(agg, datasets, protocol.losses), "",
              "## Published (CIFAR, [GRA] Tables 1 and 3; % pre/post TS)", "",
              published_table(), "", "## Figures", ""]
    parts += [f"![{name}]({name})" for name in figures]
    path = out / "README.md"
    path.write_text("\n".join(parts) + "\n")
    return path


def summary_lines(store: ResultsStore, protocol: study.Protocol) -> list[str]:
    """What ``selfcal reproduce bsce-gra`` prints: the loss tables and the verdicts."""
    runs = records(store, protocol)
    agg = aggregates(runs)
    datasets = datasets_run(runs, protocol.datasets)
    lines = []
    for d in datasets:
        lines += [f"{d} (%, mean ± 95% CI over seeds)", loss_table(agg, d, protocol.losses), ""]
    return lines + verdicts(agg, datasets, protocol.losses)


def json_payload(store: ResultsStore, protocol: study.Protocol) -> dict[str, Any]:
    runs = records(store, protocol)
    return {
        "protocol": protocol.name, "fingerprint": protocol.fingerprint(),
        "runs": [{"dataset": r.spec.dataset, "loss": r.spec.method, "seed": r.spec.seed,
                  "metrics": r.metrics} for r in runs],
        "aggregates": [a.as_dict() for a in aggregate(runs)],
    }
