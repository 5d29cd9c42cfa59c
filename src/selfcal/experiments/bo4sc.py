"""The BO4SC study: Standard, IsoReg and BO4SC on the paper's five datasets (its Table 1).

A run is one (dataset, method, seed). Every seed is an independent replicate of the whole
protocol: its own data draw and split, its own initialisation, and its own hyperparameter
selection on its own validation set. The test set is evaluated once per run, with the selected
model only.

* **Standard**: the MLP trained with plain cross-entropy by full-batch Adam. Selected on
  validation NLL over learning rates x epochs (checkpoints along one trajectory).
* **Standard, fixed epochs** (``standard-fixed``; not in the paper): the same trajectories,
  learning rate selected by validation NLL at the last epoch, no early stopping.
* **IsoReg**: the selected Standard model plus top-label isotonic regression fitted on the
  validation set (:class:`~selfcal.posthoc.IsotonicCalibration`); predictions unchanged.
* **BO4SC**: :mod:`selfcal.bilevel.bo4sc` from the same initialisation: weights ``w = 1``, clipped
  to ``[0, 1]``, ``T`` unrolled Adam steps per outer iteration, outer step ``eta_w``, Boltzmann
  confidence with ``beta``. Selected on its own objective -- validation BCE of ``p_hat``
  against correctness -- over ``T x eta_w x beta x`` epochs.

Runs of one (dataset, method family) execute as one batch: every (seed, configuration) pair is
an independent problem, stacked and run with :func:`torch.func.vmap` (one trajectory per
problem; epochs are checkpoints along it). Metrics are on the test set; BO4SC's are given for
the hard max-probability (``ece`` etc., comparable with the other methods) and for its smooth
confidence ``p_hat`` (``ece_smooth`` etc.).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from selfcal._inputs import Predictions
from selfcal.experiments.protocols import one_thread, resolve_protocol, settings_fingerprint
from selfcal.experiments.spec import RunResult, RunSpec

STUDY = "bo4sc"
DATASETS = ("blobs-1.3", "blobs-1.7", "spiral-2.5", "spiral-3.5", "bac")
METHODS = ("standard", "standard-fixed", "isoreg", "bo4sc")
"""``standard-fixed`` is not in the paper: Standard trained for the full ``max_epochs`` (only the
learning rate selected on validation), to show how much of the gap to the paper's Standard is
early stopping."""
REGION_DATASETS = ("blobs-1.3", "blobs-1.7", "spiral-2.5", "spiral-3.5")
"""2-D datasets for which the figure seed's confidence map is stored."""
STUDY_VERSION = 2
"""Bumped whenever the executor's computation or metrics change, so stored runs of an older
version are not mixed with new ones (it is part of every run's key via the fingerprint)."""
REGION_MARGIN = 0.5
"""Confidence maps cover the raw training data's bounding box plus this margin."""

PUBLISHED: dict[str, dict[str, dict[str, float]]] = {
    "ece": {
        "standard": dict(zip(DATASETS, (0.026, 0.074, 0.064, 0.109, 0.018))),
        "isoreg": dict(zip(DATASETS, (0.023, 0.039, 0.039, 0.143, 0.004))),
        "bo4sc": dict(zip(DATASETS, (0.017, 0.016, 0.025, 0.067, 0.012))),
    },
    "accuracy": {
        "standard": dict(zip(DATASETS, (0.94, 0.876, 0.91, 0.815, 0.989))),
        "isoreg": dict(zip(DATASETS, (0.94, 0.876, 0.91, 0.815, 0.989))),
        "bo4sc": dict(zip(DATASETS, (0.931, 0.859, 0.923, 0.801, 0.994))),
    },
}
"""[BO4SC] Table 1 (test set, fractions; single runs, no seeds reported)."""


@dataclass(frozen=True)
class Protocol:
    """Everything a BO4SC-study run depends on besides (dataset, method, seed)."""

    name: str
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    datasets: tuple[str, ...] = DATASETS
    hidden: tuple[int, ...] = (32, 32)
    max_epochs: int = 600
    checkpoint_every: int = 50
    standard_lrs: tuple[float, ...] = (3e-3, 1e-2, 3e-2)
    inner_lrs: tuple[float, ...] = (3e-3, 1e-2)
    inner_steps: tuple[int, ...] = (10,)
    weight_lrs: tuple[float, ...] = (100.0, 300.0)
    betas: tuple[float, ...] = (10.0, 50.0)
    n_bins: int = 15
    grid_size: int = 300
    notes: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.max_epochs % self.checkpoint_every:
            raise ValueError("max_epochs must be a multiple of checkpoint_every")
        for t in self.inner_steps:
            if self.checkpoint_every % t:
                raise ValueError(f"checkpoint_every must be a multiple of every T, not of {t}")
        unknown = set(self.datasets) - set(DATASETS)
        if unknown:
            raise ValueError(f"unknown BO4SC datasets {sorted(unknown)}; known: {DATASETS}")

    @property
    def checkpoints(self) -> tuple[int, ...]:
        """Epochs at which models are snapshotted for selection."""
        return tuple(range(self.checkpoint_every, self.max_epochs + 1, self.checkpoint_every))

    def fingerprint(self) -> str:
        """Hash of every setting that changes a run's result (not seeds/datasets/notes), and
        of :data:`STUDY_VERSION`."""
        settings = {k: v for k, v in asdict(self).items()
                    if k not in ("name", "seeds", "datasets", "notes")}
        settings["study_version"] = STUDY_VERSION
        return settings_fingerprint(settings)


FULL = Protocol(
    "full",
    notes=("T is fixed at 10, the paper's Fig. 3 reading (1 outer iteration = 10 epochs), and "
           "eta_w in {100, 300}: in a pilot of this protocol with T in {5, 10} and eta_w in "
           "{100, 300, 1000} (inner lr 1e-2), validation selection chose T = 10 in 23 of 25 "
           "runs and never eta_w = 1000; the grid was cut to fit the 3-minute budget.",),
)
QUICK = Protocol(
    "quick", seeds=(0, 1), datasets=("blobs-1.7", "spiral-3.5"), max_epochs=100,
    checkpoint_every=50, standard_lrs=(1e-2,), inner_lrs=(1e-2,), weight_lrs=(300.0,),
    betas=(20.0,), grid_size=40,
    notes=("--quick: 2 datasets, 2 seeds, 100 epochs, one configuration per method; for tests "
           "and a first look, not for conclusions.",),
)
PROTOCOLS = {p.name: p for p in (FULL, QUICK)}


# ------------------------------------------------------------------------------ run specs
def specs(protocol: Protocol) -> list[RunSpec]:
    """One spec per (dataset, method, seed), BO4SC first (the longest groups start first)."""
    hparams = {"protocol": protocol.name, "fingerprint": protocol.fingerprint()}
    order = ("bo4sc", "standard", "standard-fixed", "isoreg")
    return [
        RunSpec(STUDY, dataset, method, seed, hparams)
        for method in order for dataset in protocol.datasets for seed in protocol.seeds
    ]


def family(method: str) -> str:
    """Standard and IsoReg share one trained model, so they run in one group."""
    return "bo4sc" if method == "bo4sc" else "standard"


def batch_by(spec: RunSpec) -> tuple[str, str]:
    return spec.dataset, family(spec.method)


def protocol_of(spec: RunSpec) -> Protocol:
    return resolve_protocol(spec, PROTOCOLS)


def execute(group: list[RunSpec]) -> list[RunResult]:
    """Executor for :func:`~selfcal.experiments.run_sweep`: one (dataset, family) group."""
    protocol = protocol_of(group[0])
    dataset, fam = batch_by(group[0])
    seeds = sorted({spec.seed for spec in group})
    runner = _run_bo4sc if fam == "bo4sc" else _run_standard
    with one_thread():
        results = runner(protocol, dataset, seeds)
    return [results[(spec.method, spec.seed)] for spec in group]


# ------------------------------------------------------------------------------ problems
@dataclass
class _Problems:
    """Stacked independent training problems: one per (seed, configuration), seed-major.

    Problem ``s * len(configs) + c`` trains seed ``seeds[s]``'s initialisation on its data
    with configuration ``configs[c]``."""

    seeds: list[int]
    configs: list[dict[str, Any]]
    data: dict[int, Any]
    hidden: tuple[int, ...]

    @property
    def problem_seeds(self) -> list[int]:
        return [s for s in self.seeds for _ in self.configs]

    def initial_params(self) -> dict[str, torch.Tensor]:
        """Seed ``s``'s MLP initialisation (the same for every configuration and method)."""
        from selfcal.models import build_model, stack_models

        first = self.data[self.seeds[0]]
        models = {seed: build_model("mlp", seed=seed, n_features=first.n_features,
                                    n_classes=first.n_classes, hidden=self.hidden)
                  for seed in self.seeds}
        params, _ = stack_models([models[s] for s in self.problem_seeds])
        return {k: v.detach() for k, v in params.items()}

    def stacked(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        parts = [self.data[s].split(split) for s in self.problem_seeds]
        return torch.stack([p.x for p in parts]), torch.stack([p.y for p in parts])

    def hyper(self, name: str) -> torch.Tensor:
        values = [c[name] for _ in self.seeds for c in self.configs]
        return torch.tensor(values, dtype=torch.float32)


def _template(splits: Any, hidden: tuple[int, ...]) -> torch.nn.Module:
    from selfcal.models import build_model

    return build_model("mlp", seed=0, n_features=splits.n_features,
                       n_classes=splits.n_classes, hidden=hidden).to("meta")


def _load(protocol: Protocol, dataset: str, seeds: Sequence[int]) -> dict[int, Any]:
    from selfcal.data import load_dataset

    return {seed: load_dataset(dataset, seed) for seed in seeds}


def _grid(**axes: Sequence[Any]) -> list[dict[str, Any]]:
    configs: list[dict[str, Any]] = [{}]
    for name, values in axes.items():
        configs = [{**c, name: v} for c in configs for v in values]
    return configs


def _best(scores: np.ndarray, n_seeds: int, n_configs: int) -> list[tuple[int, int]]:
    """Per seed, ``(config, checkpoint)`` minimising ``scores`` ``(problems, checkpoints)``
    (NaN = diverged, never chosen)."""
    per_seed = scores.reshape(n_seeds, n_configs, -1)
    out = []
    for s in range(n_seeds):
        flat = np.where(np.isfinite(per_seed[s]), per_seed[s], np.inf)
        c, k = np.unravel_index(int(np.argmin(flat)), flat.shape)
        out.append((int(c), int(k)))
    return out


# ------------------------------------------------------------------------------ Standard
def _run_standard(protocol: Protocol, dataset: str, seeds: list[int]) -> dict:
    from selfcal.posthoc import IsotonicCalibration

    splits = _load(protocol, dataset, seeds)
    configs = _grid(lr=protocol.standard_lrs)
    problems = _Problems(seeds, configs, splits, protocol.hidden)
    model = _template(splits[seeds[0]], protocol.hidden)
    x, y = problems.stacked("train")
    xv, yv = problems.stacked("val")
    lr = problems.hyper("lr")

    scores, snapshots = train_standard(model, problems.initial_params(), x, y, xv, yv, lr,
                                       protocol.max_epochs, protocol.checkpoint_every)
    choice = _best(scores, len(seeds), len(configs))
    last = _best(scores[:, -1:], len(seeds), len(configs))
    results = {}
    for s_idx, seed in enumerate(seeds):
        c, k = choice[s_idx]
        p = s_idx * len(configs) + c
        params = {name: t[p] for name, t in snapshots[k].items()}
        split = splits[seed]
        selected = {"hp.lr": configs[c]["lr"], "hp.epochs": protocol.checkpoints[k]}
        logits = _logits(model, params, split.test.x)
        standard = Predictions.from_logits(logits, split.test.y)
        iso = IsotonicCalibration().fit(logits=_logits(model, params, split.val.x),
                                        labels=split.val.y)
        iso_conf = iso.predict_confidence(logits=logits)
        iso_probs = Predictions.from_probs(iso.predict_proba(logits=logits), split.test.y)
        results[("standard", seed)] = _result(
            protocol, standard, selected,
            _region(protocol, dataset, seed, split, lambda z: torch.softmax(z, 1).amax(1),
                    model, params),
        )
        c_last = last[s_idx][0]
        fixed = {name: t[s_idx * len(configs) + c_last] for name, t in snapshots[-1].items()}
        results[("standard-fixed", seed)] = _result(
            protocol, Predictions.from_logits(_logits(model, fixed, split.test.x), split.test.y),
            {"hp.lr": configs[c_last]["lr"], "hp.epochs": protocol.max_epochs}, {},
        )
        results[("isoreg", seed)] = _result(
            protocol, standard.with_confidence(iso_conf), selected,
            _region(protocol, dataset, seed, split,
                    lambda z, iso=iso: iso.predict_confidence(logits=z), model, params),
            proper_scores=iso_probs,
        )
    return results


def train_standard(model, params, x, y, x_val, y_val, lr, epochs: int, every: int):
    """Full-batch Adam on mean cross-entropy for ``P`` stacked problems at once (``vmap``):
    ``params`` ``{name: (P, ...)}``, data ``(P, n, d)`` / ``(P, n)``, ``lr`` ``(P,)``. Every
    ``every`` epochs the validation NLL ``(P,)`` is recorded and the parameters snapshotted.
    Returns ``(scores (P, epochs // every), snapshots)``. Same steps as
    :func:`selfcal.training.fit` with ``TrainConfig(optimizer="adam", batch_size=None)``."""
    from selfcal.bilevel.optim import Adam

    def step(theta, state, x, y, lr):
        g = grad(lambda th: F.cross_entropy(functional_call(model, th, (x,)), y))(theta)
        return Adam(lr, eps_root=0.0).step(theta, g, state)

    def val_nll(theta, xv, yv):
        return F.cross_entropy(functional_call(model, theta, (xv,)), yv)

    state = vmap(lambda th: Adam(1e-3).init(th))(params)
    vstep, vnll = vmap(step), vmap(val_nll)
    scores, snapshots = [], []
    for epoch in range(1, epochs + 1):
        params, state = vstep(params, state, x, y, lr)
        if epoch % every == 0:
            scores.append(vnll(params, x_val, y_val).detach().numpy())
            snapshots.append(params)
    return np.stack(scores, 1), snapshots


# ------------------------------------------------------------------------------ BO4SC
def _run_bo4sc(protocol: Protocol, dataset: str, seeds: list[int]) -> dict:
    splits = _load(protocol, dataset, seeds)
    model = _template(splits[seeds[0]], protocol.hidden)
    configs = _grid(T=protocol.inner_steps, lr=protocol.inner_lrs, weight_lr=protocol.weight_lrs,
                    beta=protocol.betas)
    runs = [_bo4sc_trajectories(protocol, model, splits, seeds, t, [c for c in configs
                                                                     if c["T"] == t])
            for t in protocol.inner_steps]
    # problems are ordered (seed, config) within each T; regroup to (seed, all configs)
    n_ck = len(protocol.checkpoints)
    scores = np.concatenate([r["scores"].reshape(len(seeds), -1, n_ck) for r in runs], 1)
    order = [c for t in protocol.inner_steps for c in configs if c["T"] == t]
    choice = _best(scores.reshape(-1, n_ck), len(seeds), len(order))
    results = {}
    for s_idx, seed in enumerate(seeds):
        c, k = choice[s_idx]
        config = order[c]
        run = runs[protocol.inner_steps.index(config["T"])]
        local = [i for i, cc in enumerate(order) if cc["T"] == config["T"]].index(c)
        p = s_idx * run["n_configs"] + local
        params = {name: t[p] for name, t in run["snapshots"][k].items()}
        iterations = protocol.checkpoints[k] // config["T"]
        history = run["weights"][p, : iterations + 1]
        results[("bo4sc", seed)] = _bo4sc_result(
            protocol, dataset, seed, splits[seed], model, params, config,
            protocol.checkpoints[k], history,
        )
    return results


def _bo4sc_trajectories(protocol, model, splits, seeds, inner_steps, configs) -> dict:
    from selfcal.bilevel.bo4sc import BO4SCConfig, BO4SCData, bo4sc_init, bo4sc_step
    from selfcal.bilevel.estimators import Unrolled
    from selfcal.bilevel.optim import Adam

    problems = _Problems(seeds, configs, splits, protocol.hidden)
    x, y = problems.stacked("train")
    xv, yv = problems.stacked("val")
    lr, weight_lr = problems.hyper("lr"), problems.hyper("weight_lr")
    beta = problems.hyper("beta")

    def config(lr, wlr, b):
        return BO4SCConfig(estimator=Unrolled(inner_steps), inner_optimizer=Adam(lr),
                           weight_lr=wlr, beta=b)

    def init(theta):
        one = torch.tensor(1.0)
        return bo4sc_init(theta, x.shape[1], config(one, one, one))

    def step(state, x, y, xv, yv, lr, wlr, b):
        return bo4sc_step(model, state, BO4SCData(x, y, xv, yv), config(lr, wlr, b))

    state = vmap(init)(problems.initial_params())
    vstep = vmap(step)
    weights = [state.weights]
    scores, snapshots = [], []
    for it in range(1, protocol.max_epochs // inner_steps + 1):
        state, info = vstep(state, x, y, xv, yv, lr, weight_lr, beta)
        weights.append(state.weights)
        if (it * inner_steps) % protocol.checkpoint_every == 0:
            scores.append(info.outer_loss.detach().numpy())
            snapshots.append(state.params)
    return {"scores": np.stack(scores, 1), "snapshots": snapshots, "n_configs": len(configs),
            "weights": torch.stack(weights, 1).numpy()}


def _bo4sc_result(protocol, dataset, seed, split, model, params, config, epochs, history):
    from selfcal.bilevel.bo4sc import boltzmann_confidence

    beta = config["beta"]
    logits = _logits(model, params, split.test.x)
    hard = Predictions.from_logits(logits, split.test.y)
    smooth = hard.with_confidence(boltzmann_confidence(hard.probs, beta).clamp(0, 1))
    selected = {"hp.T": config["T"], "hp.lr": config["lr"], "hp.weight_lr": config["weight_lr"],
                "hp.beta": beta, "hp.epochs": epochs}
    train_logits = _logits(model, params, split.train.x)
    artefacts = {
        "weight_history": history.astype(np.float32),
        "train_misclassified": (train_logits.argmax(1) != split.train.y).numpy(),
        "test_confidence_smooth": smooth.confidence.numpy().astype(np.float32),
    }
    region = _region(protocol, dataset, seed, split,
                     lambda z: boltzmann_confidence(torch.softmax(z.double(), 1), beta),
                     model, params)
    result = _result(protocol, hard, selected, {**region, **artefacts})
    smooth_metrics = {f"{k}_smooth": v for k, v in _top_label_metrics(protocol, smooth).items()}
    return replace(result, metrics={**result.metrics, **smooth_metrics})


# ------------------------------------------------------------------------------ evaluation
def _logits(model, params, x) -> torch.Tensor:
    with torch.no_grad():
        return functional_call(model, params, (x,)).detach()


def _top_label_metrics(protocol: Protocol, pred: Predictions) -> dict[str, float]:
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


def _result(protocol, pred: Predictions, selected: dict, artefacts: dict,
            proper_scores: Predictions | None = None) -> RunResult:
    """Test metrics of ``pred`` (NLL / Brier from ``proper_scores`` when the calibrated
    probability vector differs from the scores), selected hyperparameters as ``hp.*``."""
    import selfcal.metrics as M

    scored = pred if proper_scores is None else proper_scores
    metrics = {
        "accuracy": float(M.accuracy(pred)),
        **_top_label_metrics(protocol, pred),
        "nll": float(M.nll(scored)),
        "brier": float(M.brier(scored)),
        **{k: float(v) for k, v in selected.items()},
    }
    artefacts = {
        **artefacts,
        "test_logits": pred.scores.numpy().astype(np.float32),
        "test_labels": pred.labels.numpy(),
        "test_confidence": pred.confidence.numpy().astype(np.float32),
    }
    return RunResult(metrics=metrics, artefacts=artefacts)


def _region(protocol, dataset, seed, split, confidence_of_logits, model, params) -> dict:
    """The confidence map of the figure seed on 2-D datasets (empty dict otherwise)."""
    if dataset not in REGION_DATASETS or seed != protocol.seeds[0]:
        return {}
    from selfcal.plots.regions import grid_axes

    ax, ay = grid_axes(split.raw("train").numpy(), protocol.grid_size, REGION_MARGIN)
    xx, yy = np.meshgrid(ax, ay)
    points = torch.from_numpy(np.stack([xx.ravel(), yy.ravel()], 1))
    conf = confidence_of_logits(_logits(model, params, split.standardize(points)))
    conf = torch.as_tensor(conf).reshape(xx.shape)
    return {"region_x": ax.astype(np.float32), "region_y": ay.astype(np.float32),
            "region_confidence": conf.numpy().astype(np.float32)}
