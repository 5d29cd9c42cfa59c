"""The BO4SC study's runs: Standard (and IsoReg and temperature scaling on top of it) and BO4SC,
every seed and candidate of one (dataset, family, network) trained at once.

Every seed is an independent replicate of the whole protocol: its own data draw and split, its
own initialisation, and its own selection on its own validation set; the test set is scored
once per candidate and never read by a selection.

* **Standard**: the MLP trained with mean cross-entropy by full-batch Adam, every candidate
  learning rate from the seed's initialisation; checkpoints every ``checkpoint_every`` epochs.
  The regime's rule picks the checkpoint: lowest validation NLL (``nll``), highest validation
  accuracy (``accuracy``; the first of equals), or the last (``overfit``).
* **IsoReg** (the paper's baseline): top-label isotonic regression fitted on the validation
  set on top of the Standard model (:class:`~selfcal.posthoc.IsotonicCalibration`);
  predictions unchanged. **TS**: temperature scaling fitted on the validation set by NLL
  (:class:`~selfcal.posthoc.TemperatureScaling`). Both carry their Standard model's
  validation scores, so selection picks the same learning rate for all three.
* **BO4SC** (:mod:`selfcal.bilevel.bo4sc`) from the same initialisation: weights ``w = 1``,
  clipped to ``[0, 1]``, ``T`` unrolled Adam steps per outer iteration, outer step ``eta_w``,
  Boltzmann confidence with ``beta``; the checkpoint by the regime's rule on its own
  objective (validation BCE of ``p_hat`` against correctness), on validation accuracy, or the
  last.

All (dataset, seed, candidate) triples of a group are independent problems stacked and run
with :func:`torch.func.vmap` (one trajectory per problem; epochs are checkpoints along it);
datasets of the same shape share a group (:data:`BATCHES`): a vmap of few problems is
dominated by per-step overhead, so two datasets cost little more than one. Metrics
are on the test set; BO4SC's are given for the hard max-probability (``ece`` etc., comparable
with the other methods) and for its smooth confidence ``p_hat`` (``ece_smooth`` etc.). The
first seed's runs keep their parameters (and BO4SC on the Fig. 3 dataset its weight
trajectory) for the figures.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, vmap

from selfcal.experiments import RunResult, RunSpec
from selfcal.models.inference import predict_logits
from selfcal.selection import grid
from selfcal.studies.bo4sc.protocol import Bo4scProtocol, Regime
from selfcal.training import fit_batched

if TYPE_CHECKING:  # pragma: no cover - typing only
    from selfcal.bilevel.bo4sc import BO4SCConfig, BO4SCInfo, BO4SCState

BATCHES = (("blobs-1.3", "blobs-1.7"), ("spiral-2.5", "spiral-3.5"))
"""Datasets with the same shapes (inputs, classes, split sizes), trained in one vmap."""
FIG3_DATASET = "blobs-1.7"
"""Where BO4SC's weight trajectories are kept (the paper's Fig. 3)."""
PARAMS = "params"
WEIGHT_HISTORY, TRAIN_MISCLASSIFIED = "weight_history", "train_misclassified"
TEST_CONFIDENCE_SMOOTH = "test_confidence_smooth"


def family(method: str) -> str:
    """Standard, IsoReg and TS share one trained model; BO4SC trains its own."""
    return "bo4sc" if method == "bo4sc" else "standard"


def group_of(protocol: Bo4scProtocol, spec: RunSpec) -> Hashable:
    """Specs trained in one vmap: regimes with the same network and budget (``nll`` and
    ``accuracy``) share their trajectories, and datasets of one :data:`BATCHES` entry their
    batch."""
    regime = protocol.regime(str(spec.hparams["regime"]))
    batch = next((b for b in BATCHES if spec.dataset in b), (spec.dataset,))
    return batch, family(spec.method), regime.hidden, regime.epochs


Member = tuple[str, int]
"""A (dataset, seed) pair: one data draw and initialisation."""


def key(method: str, regime: str, config: dict[str, Any], member: Member) -> tuple:
    return method, regime, tuple(sorted(config.items())), member


def spec_key(spec: RunSpec) -> tuple:
    config = {k[3:]: v for k, v in spec.hparams.items() if k.startswith("hp.")}
    return key(spec.method, str(spec.hparams["regime"]), config, (spec.dataset, spec.seed))


def execute(protocol: Bo4scProtocol, group: list[RunSpec]) -> list[RunResult]:
    fam = family(group[0].method)
    regimes = [protocol.regime(r) for r in dict.fromkeys(str(s.hparams["regime"]) for s in group)]
    members = sorted({(spec.dataset, spec.seed) for spec in group})
    runner = bo4sc_runs if fam == "bo4sc" else standard_runs
    results = runner(protocol, members, regimes)
    return [results[spec_key(spec)] for spec in group]


# ------------------------------------------------------------------------------ problems
@dataclass
class Problems:
    """Stacked independent training problems: one per (member, configuration), member-major.
    Problem ``m * len(configs) + c`` trains member ``members[m]``'s initialisation (its seed's)
    on its data with configuration ``configs[c]``."""

    members: list[Member]
    configs: list[dict[str, Any]]
    data: dict[Member, Any]
    hidden: tuple[int, ...]

    def index(self) -> list[tuple[Member, dict[str, Any], int]]:
        """``(member, config, problem)`` for every problem."""
        return [
            (m, c, i * len(self.configs) + j)
            for i, m in enumerate(self.members)
            for j, c in enumerate(self.configs)
        ]

    def initial_params(self) -> dict[str, torch.Tensor]:
        """Each member's MLP initialisation: its seed's (the same for every configuration,
        method and dataset of one shape)."""
        from selfcal.models import build_model, stack_models

        first = self.data[self.members[0]]
        models = [
            build_model(
                "mlp",
                seed=seed,
                n_features=first.n_features,
                n_classes=first.n_classes,
                hidden=self.hidden,
            )
            for (_, seed), _, _ in self.index()
        ]
        params, _ = stack_models(models)
        return {k: v.detach() for k, v in params.items()}

    def stacked(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        parts = [self.data[m].split(split) for m, _, _ in self.index()]
        return torch.stack([p.x for p in parts]), torch.stack([p.y for p in parts])

    def hyper(self, name: str) -> torch.Tensor:
        return torch.tensor([c[name] for _, c, _ in self.index()], dtype=torch.float32)


def template(data: Any, hidden: tuple[int, ...]) -> torch.nn.Module:
    """The MLP of the study on the meta device (its structure only, for functional calls)."""
    from selfcal.models import build_model

    return build_model(
        "mlp", seed=0, n_features=data.n_features, n_classes=data.n_classes, hidden=hidden
    ).to("meta")


def load(members: Sequence[Member]) -> dict[Member, Any]:
    """Each member's data; the members of one group must share their shapes."""
    from selfcal.data import load_dataset

    data = {(d, seed): load_dataset(d, seed) for d, seed in members}
    shapes = {(s.n_features, s.n_classes, len(s.train), len(s.val)) for s in data.values()}
    if len(shapes) > 1:
        raise ValueError(f"datasets batched together need one shape, got {sorted(shapes)}")
    return data


def checkpoint_scores(
    model: torch.nn.Module,
    snapshots: list[dict[str, torch.Tensor]],
    x: torch.Tensor,
    y: torch.Tensor,
) -> dict[str, np.ndarray]:
    """Validation NLL and accuracy ``(problems, checkpoints)`` of every snapshot."""

    def scores(
        params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        z = functional_call(model, params, (x,))
        return F.cross_entropy(z, y), (z.argmax(1) == y).float().mean()

    nll, acc = [], []
    with torch.no_grad():
        for snapshot in snapshots:
            n, a = vmap(scores)(snapshot, x, y)
            nll.append(n.numpy())
            acc.append(a.numpy())
    return {
        "val_nll": np.stack(nll, 1).astype(np.float64),
        "val_accuracy": np.stack(acc, 1).astype(np.float64),
    }


def pick(regime: Regime, method: str, scores: dict[str, np.ndarray], problem: int) -> int:
    """The checkpoint the regime's rule selects for one problem (NaN = diverged, never)."""
    if not regime.early_stopping:
        return next(iter(scores.values())).shape[1] - 1
    criterion = regime.criterion(method)
    values = scores[criterion.metric][problem]
    values = -values if criterion.maximize else values
    return int(np.argmin(np.where(np.isfinite(values), values, np.inf)))


# ------------------------------------------------------------------------------ Standard
def standard_runs(
    protocol: Bo4scProtocol, members: list[Member], regimes: list[Regime]
) -> dict[tuple, RunResult]:
    first = regimes[0]
    data = load(members)
    problems = Problems(members, grid(lr=first.standard_lrs), data, first.hidden)
    model = template(data[members[0]], first.hidden)
    x, y = problems.stacked("train")
    snapshots = fit_batched(
        model,
        problems.initial_params(),
        x,
        y,
        problems.hyper("lr"),
        epochs=first.epochs,
        every=protocol.checkpoint_every,
    )
    scores = checkpoint_scores(model, snapshots, *problems.stacked("val"))
    out = {}
    for regime in regimes:
        for member, config, p in problems.index():
            k = pick(regime, "standard", scores, p)
            params = {name: t[p] for name, t in snapshots[k].items()}
            chosen = {
                "hp.epochs": float(protocol.checkpoint_every * (k + 1)),
                **{name: float(v[p, k]) for name, v in scores.items()},
            }
            figure = member[1] == protocol.seeds[0]
            for method, result in posthoc_results(
                protocol, data[member], model, params, chosen, figure
            ).items():
                out[key(method, regime.name, config, member)] = result
    return out


def posthoc_results(
    protocol: Bo4scProtocol,
    split: Any,
    model: torch.nn.Module,
    params: dict[str, torch.Tensor],
    chosen: dict[str, float],
    figure: bool,
) -> dict[str, RunResult]:
    """Standard, IsoReg and TS results of one Standard model."""
    from selfcal import Predictions
    from selfcal.posthoc import IsotonicCalibration, TemperatureScaling

    logits = predict_logits(model, split.test.x, params=params)
    val_logits = predict_logits(model, split.val.x, params=params)
    standard = Predictions.from_logits(logits, split.test.y)
    # the paper's IsoReg: isotonic regression as it is, not mixed with the uniform distribution
    iso = IsotonicCalibration(mix=0).fit(logits=val_logits, labels=split.val.y)
    iso_pred = standard.with_confidence(iso.predict_confidence(logits=logits))
    iso_probs = Predictions.from_probs(iso.predict_proba(logits=logits), split.test.y)
    ts = TemperatureScaling().fit(logits=val_logits, labels=split.val.y)
    ts_pred = Predictions.from_logits(logits / ts.temperature_, split.test.y)
    kept = {PARAMS: flat(params)} if figure else {}
    return {
        "standard": result(protocol, standard, chosen, kept),
        "isoreg": result(protocol, iso_pred, chosen, kept, proper_scores=iso_probs),
        "ts": result(protocol, ts_pred, {**chosen, "temperature": ts.temperature_}, kept),
    }


# ------------------------------------------------------------------------------ BO4SC
def bo4sc_runs(
    protocol: Bo4scProtocol, members: list[Member], regimes: list[Regime]
) -> dict[tuple, RunResult]:
    first = regimes[0]
    data = load(members)
    model = template(data[members[0]], first.hidden)
    configs = first.grid.configs()
    out = {}
    for t in dict.fromkeys(c["T"] for c in configs):
        problems = Problems(members, [c for c in configs if c["T"] == t], data, first.hidden)
        run = trajectories(protocol, first, model, problems, t)
        scores = {
            **checkpoint_scores(model, run["snapshots"], *problems.stacked("val")),
            "val_bce": run["val_bce"],
        }
        for regime in regimes:
            for member, config, p in problems.index():
                k = pick(regime, "bo4sc", scores, p)
                epochs = protocol.checkpoint_every * (k + 1)
                history = run["weights"][p, : epochs // t + 1]
                out[key("bo4sc", regime.name, config, member)] = bo4sc_result(
                    protocol,
                    member,
                    data[member],
                    model,
                    {name: x[p] for name, x in run["snapshots"][k].items()},
                    config,
                    {
                        "hp.epochs": float(epochs),
                        **{name: float(v[p, k]) for name, v in scores.items()},
                    },
                    history,
                )
    return out


def trajectories(
    protocol: Bo4scProtocol,
    regime: Regime,
    model: torch.nn.Module,
    problems: Problems,
    inner_steps: int,
) -> dict[str, Any]:
    """Every problem's BO4SC run: parameters and outer loss (validation BCE) at each
    checkpoint, and the weights after every outer iteration."""
    from selfcal.bilevel.bo4sc import BO4SCConfig, BO4SCData, bo4sc_init, bo4sc_step
    from selfcal.bilevel.estimators import Unrolled
    from selfcal.optim import Adam

    x, y = problems.stacked("train")
    xv, yv = problems.stacked("val")
    lr, weight_lr = problems.hyper("lr"), problems.hyper("weight_lr")
    beta = problems.hyper("beta")

    def config(lr: torch.Tensor, wlr: torch.Tensor, b: torch.Tensor) -> BO4SCConfig:
        return BO4SCConfig(
            estimator=Unrolled(inner_steps), inner_optimizer=Adam(lr), weight_lr=wlr, beta=b
        )

    def init(theta: dict[str, torch.Tensor]) -> BO4SCState:
        one = torch.tensor(1.0)
        return bo4sc_init(theta, x.shape[1], config(one, one, one))

    def step(
        state: BO4SCState,
        x: torch.Tensor,
        y: torch.Tensor,
        xv: torch.Tensor,
        yv: torch.Tensor,
        lr: torch.Tensor,
        wlr: torch.Tensor,
        b: torch.Tensor,
    ) -> tuple[BO4SCState, BO4SCInfo]:
        return bo4sc_step(model, state, BO4SCData(x, y, xv, yv), config(lr, wlr, b))

    state = vmap(init)(problems.initial_params())
    vstep = vmap(step)
    weights = [state.weights]
    val_bce, snapshots = [], []
    for it in range(1, regime.epochs // inner_steps + 1):
        state, info = vstep(state, x, y, xv, yv, lr, weight_lr, beta)
        weights.append(state.weights)
        if (it * inner_steps) % protocol.checkpoint_every == 0:
            val_bce.append(info.outer_loss.detach().numpy())
            snapshots.append(state.params)
    return {
        "val_bce": np.stack(val_bce, 1).astype(np.float64),
        "snapshots": snapshots,
        "weights": torch.stack(weights, 1).numpy(),
    }


def bo4sc_result(
    protocol: Bo4scProtocol,
    member: Member,
    split: Any,
    model: torch.nn.Module,
    params: dict[str, torch.Tensor],
    config: dict[str, Any],
    chosen: dict[str, float],
    history: np.ndarray,
) -> RunResult:
    from selfcal import Predictions
    from selfcal.bilevel.bo4sc import boltzmann_confidence

    hard = Predictions.from_logits(predict_logits(model, split.test.x, params=params), split.test.y)
    smooth = hard.with_confidence(boltzmann_confidence(hard.probs, config["beta"]).clamp(0, 1))
    dataset, seed = member
    kept: dict[str, np.ndarray] = {}
    if seed == protocol.seeds[0]:
        kept = {
            PARAMS: flat(params),
            TEST_CONFIDENCE_SMOOTH: smooth.confidence.numpy().astype(np.float32),
        }
        if dataset == FIG3_DATASET:
            train_logits = predict_logits(model, split.train.x, params=params)
            kept[WEIGHT_HISTORY] = history.astype(np.float32)
            kept[TRAIN_MISCLASSIFIED] = (train_logits.argmax(1) != split.train.y).numpy()
    out = result(protocol, hard, chosen, kept)
    smooth_metrics = {f"{k}_smooth": v for k, v in top_label_metrics(protocol, smooth).items()}
    return RunResult(metrics={**out.metrics, **smooth_metrics}, artefacts=out.artefacts)


# ------------------------------------------------------------------------------ evaluation
def flat(params: dict[str, torch.Tensor]) -> np.ndarray:
    """The parameters as one float32 vector, in the model's parameter order."""
    return torch.cat([p.reshape(-1) for p in params.values()]).numpy().astype(np.float32)


def top_label_metrics(protocol: Bo4scProtocol, pred: Any) -> dict[str, float]:
    import selfcal.metrics as M

    bins = protocol.n_bins
    return {
        "ece": float(M.ece(pred, n_bins=bins)),
        "ece_10_bins": float(M.ece(pred, n_bins=10)),  # sensitivity to the bin count
        "mce": float(M.mce(pred, n_bins=bins)),
        "adaece": float(M.adaece(pred, n_bins=bins)),
        "sece": float(M.sece(pred)),
        "aurc": float(M.aurc(pred)),
        "acc_at_80": float(M.accuracy_at_coverage(pred, coverage=0.8)),
        "acc_at_90": float(M.accuracy_at_coverage(pred, coverage=0.9)),
    }


def result(
    protocol: Bo4scProtocol,
    pred: Any,
    chosen: dict[str, float],
    artefacts: dict[str, np.ndarray],
    proper_scores: Any = None,
) -> RunResult:
    """Test metrics of ``pred`` (NLL / Brier from ``proper_scores`` when the calibrated
    probability vector differs from the scores), with the validation scores and the chosen
    epoch."""
    import selfcal.metrics as M

    scored = pred if proper_scores is None else proper_scores
    metrics = {
        "accuracy": float(M.accuracy(pred)),
        **top_label_metrics(protocol, pred),
        "nll": float(M.nll(scored)),
        "brier": float(M.brier(scored)),
        **chosen,
    }
    return RunResult(metrics=metrics, artefacts=artefacts)
