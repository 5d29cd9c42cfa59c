"""Meta-learned calibration on the bilevel engine: γ-Net + SECE / DECE ([MetaReg], spec §6) and
Meta-Calibration's learnable unit-wise L2 (CE-DECE, CE-SECE; Bohdal et al., spec §5.2).

Both are one configuration of :class:`~selfcal.bilevel.engine.BilevelProblem` per iteration:

* inner parameters ``theta``: the classifier ``head`` (``lookahead="head"``, the reference
  code) or every model parameter (``lookahead="all"``, the "parameters of the backbone" of the
  [MetaReg] text; spec §5.3 / §6.6 item 4);
* outer parameters ``phi``: γ-Net's parameters (``method="gamma-net"``) or one L2 coefficient
  per element of the head's weight and bias (``method="unit-l2"``, init 0, unclamped);
* inner loss on the train batch (sum reduction, spec §0): the focal loss with per-sample
  ``gamma_i = gammaNet(sg(x_i))`` (:func:`~selfcal.losses.focal_loss`), or
  ``CE + sum lambda * theta_head^2``;
* inner optimizer: plain gradient descent ``SGD(lr=current lr)`` (no momentum, no weight
  decay: the reference lookahead), estimator ``OneStepLookahead(1)`` -- evaluated for the
  head lookahead by :class:`~selfcal.bilevel.estimators.AutogradLookahead`, the same
  hypergradient on plain autograd (tested equal to the ``torch.func`` engine);
* outer loss on a meta-validation batch through the looked-ahead parameters: SECE (Gaussian
  kernel, h = 0.01, t_a = 100), DECE (M = 15, t_a = 100, t_b = 0.01), mean CE +
  ``ce_weight`` * DECE, or mean CE alone (no calibration term) -- :func:`selfcal.metrics.sece`
  / :func:`selfcal.metrics.dece` themselves, so the trained and the reported quantity are one
  function.

The gradient reaches γ-Net only through the lookahead: ``SECE(meta-val) -> theta' ->
grad_theta FL_gamma -> gamma(phi)`` (spec §6.4).

:func:`fit_meta` / :class:`MetaCalibrationTrainer` run the whole training (spec §6.4 steps 1-6):
per iteration (a) train forward, (b) the meta step and an Adam step on ``phi``, (c) the real
SGD step (momentum / weight decay / clipping / MultiStepLR from :class:`TrainConfig`) with
``gamma`` recomputed by the *updated* γ-Net and **detached**, so the backbone cannot lower its
loss by moving ``gamma``.

Reference-code quirks of Meta-Calibration (spec §5.2 "Code quirk"), replicated only with
``replicate_reference_quirks=True``:

1. the backbone's gradient buffers are not zeroed between the meta backward and the real
   backward, so the backbone's SGD step also follows ``d meta-loss / d backbone`` (through the
   meta-val features and through ``theta'_fc``, which depends on the train features). We
   compute this "leak" with the engine itself by adding the backbone parameters to ``phi``.
   The head's own leaked gradient (``d meta / d theta_fc`` through ``theta' = theta - lr g``) is
   not included: the spec names the backbone only.
2. the meta-val forward runs in train mode: BatchNorm normalises the meta batch with its own
   statistics and updates the running statistics with them (we apply that update with one
   extra no-grad train-mode forward of the meta batch; the engine itself never mutates
   buffers).

With ``False`` (default) the meta-val features come from an eval-mode, no-grad forward.

Hooks for the caller (both off by default, and neither changes the training when off):
``on_epoch(epoch, model, meta_module)`` runs after each epoch's validation, for analysis only
(e.g. γ-Net on held-out data, [MetaReg] Fig. 3c-d; it must not modify either module, and its
return value is ignored); ``batch_transform(x_batch, generator) -> x_batch`` augments every
training minibatch (never the meta-val or validation batches) exactly as in
:func:`selfcal.training.fit`: the generator is on ``config.device`` and seeded from
``[config.seed, 1]`` by :class:`numpy.random.SeedSequence`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from typing import Any, Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from selfcal.bilevel.engine import BilevelProblem, Estimator, Hypergradient
from selfcal.bilevel.estimators import AutogradLookahead, OneStepLookahead
from selfcal.bilevel.gamma_net import DEFAULT_TAU, GammaNet
from selfcal.bilevel.optim import SGD, Params
from selfcal.exceptions import NonFinite, TrainingDiverged
from selfcal.losses import focal_loss
from selfcal.metrics import dece, sece
from selfcal.training import History, TrainConfig, make_optimizer
from selfcal.training.history import HistoryRecorder, StopReason
from selfcal.training.loop import (
    augmentation_generator,
    bind_transform,
    check_parameters,
    epoch_batches,
    loss_value,
    prepare_pair,
    seeded_global_rng,
    validation_scores,
)

Method = Literal["gamma-net", "unit-l2"]
MetaObjective = Literal["sece", "dece", "ce+dece", "ce"]
Lookahead = Literal["head", "all"]
METHODS: tuple[str, ...] = ("gamma-net", "unit-l2")
META_OBJECTIVES: tuple[str, ...] = ("sece", "dece", "ce+dece", "ce")
LOOKAHEADS: tuple[str, ...] = ("head", "all")

SECE_BANDWIDTH = 0.01
SOFT_ACCURACY_SCALE = 100.0
DECE_BINS = 15
DECE_TEMPERATURE = 0.01
DEFAULT_CE_WEIGHT = 0.5
"""``CE + 0.5 DECE``: the meta loss of the later Meta-Calibration commit (spec §5.2)."""
DEFAULT_META_LR = 1e-3
"""Adam's lr on ``phi``, inherited from Meta-Calibration (not stated in [MetaReg])."""

ObjectiveFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
MetaEpochCallback = Callable[[int, nn.Module, nn.Module], object]
"""``on_epoch(epoch, model, meta_module)``: analysis after each epoch (return ignored)."""
BatchTransform = Callable[[torch.Tensor, torch.Generator], torch.Tensor]


# ------------------------------------------------------------------------ objectives
def meta_objective(name: str, *, ce_weight: float = DEFAULT_CE_WEIGHT) -> ObjectiveFn:
    """``(logits, labels) -> scalar`` outer loss by name (float64, differentiable).

    ``"sece"``: SECE, h = 0.01, t_a = 100 (exact all-pairs kernel up to 2048 samples);
    ``"dece"``: DECE, M = 15, t_a = 100, t_b = 0.01; ``"ce+dece"``: mean CE + ``ce_weight``
    DECE (mean CE, as the Meta-Calibration code's meta criterion); ``"ce"``: mean CE
    ``-1/n sum_i log softmax(z_i)_{y_i}`` alone, no calibration term (our reading of the
    [MetaReg] Table 2 "FL_gamma" ablation, spec §6.6 item 8).
    """
    if name not in META_OBJECTIVES:
        raise ValueError(f"meta_objective must be one of {META_OBJECTIVES}, got {name!r}")
    if name == "sece":
        return lambda logits, labels: sece(
            labels=labels, logits=logits, bandwidth=SECE_BANDWIDTH, t_a=SOFT_ACCURACY_SCALE
        )
    if name == "dece":
        return _dece
    if name == "ce":
        return lambda logits, labels: F.cross_entropy(logits.double(), labels)
    if not ce_weight >= 0:
        raise ValueError(f"ce_weight must be >= 0, got {ce_weight!r}")
    return lambda logits, labels: (
        F.cross_entropy(logits, labels).double() + ce_weight * _dece(logits, labels)
    )


_build_objective = meta_objective  # the trainer's ``meta_objective`` argument shadows it


def _dece(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return dece(
        labels=labels,
        logits=logits,
        n_bins=DECE_BINS,
        t_a=SOFT_ACCURACY_SCALE,
        t_b=DECE_TEMPERATURE,
    )


# ------------------------------------------------------------------ phi: the meta module
class UnitL2(nn.Module):
    """Meta-Calibration's learnable unit-wise L2: one coefficient per element of the head's
    weight and bias (parameters ``weight``, ``bias`` shaped like them), initialised at 0 and
    not clamped (as the reference L2 variant). Penalty: ``sum lambda * theta_head^2``."""

    def __init__(self, head: nn.Linear) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros_like(head.weight, requires_grad=False))
        bias = head.bias if head.bias is not None else torch.zeros(0)
        self.bias = nn.Parameter(torch.zeros_like(bias, requires_grad=False))

    def penalty(self, head: Params, lam: Params | None = None) -> torch.Tensor:
        """``sum_k lam_k * head_k^2`` over ``weight`` and ``bias`` (``lam``: this module's own
        parameters unless given, e.g. the functional ``phi`` inside the engine)."""
        lam = dict(self.named_parameters()) if lam is None else lam
        return sum((lam[k] * head[k].square()).sum() for k in ("weight", "bias") if lam[k].numel())  # type: ignore[return-value]


def make_meta_module(model: nn.Module, method: str, *, tau: float = DEFAULT_TAU) -> nn.Module:
    """γ-Net sized to ``model.head`` (``d = in_features``, ``k = out_features``) or
    :class:`UnitL2` for it."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    head = _head(model)
    if method == "gamma-net":
        return GammaNet(head.in_features, head.out_features, tau)
    return UnitL2(head)


def _head(model: nn.Module) -> nn.Linear:
    head = getattr(model, "head", None)
    if not isinstance(head, nn.Linear) or not callable(getattr(model, "features", None)):
        raise ValueError("the model must expose features(x) and a final nn.Linear named 'head'")
    return head


def training_loss(
    meta: nn.Module,
    logits: torch.Tensor,
    labels: torch.Tensor,
    features: torch.Tensor,
    head: Params,
    phi: Params | None = None,
    *,
    gamma: torch.Tensor | None = None,
) -> torch.Tensor:
    """The regularised training loss (sum reduction) with the meta module's parameters ``phi``
    (its own parameters, detached, when ``None``: the real step).

    γ-Net: ``sum_i -(1 - p_iy)^gamma_i log p_iy`` with ``gamma = gammaNet(features)`` (the
    caller passes detached features), or the given ``gamma`` (the real step passes the
    detached output it has just checked, rather than evaluating γ-Net twice). Unit-L2:
    ``sum_i CE_i + sum lambda * head^2``.
    """
    if phi is None:
        phi = {k: p.detach() for k, p in meta.named_parameters()}
    if isinstance(meta, GammaNet):
        gamma = meta.gamma(features, phi) if gamma is None else gamma
        return focal_loss(logits, labels, gamma, reduction="sum")
    if isinstance(meta, UnitL2):
        return F.cross_entropy(logits, labels, reduction="sum") + meta.penalty(head, phi)
    raise ValueError(f"unknown meta module {type(meta).__name__}")


# ----------------------------------------------------------------------- the problem
class MetaBatch(NamedTuple):
    """One iteration's data: the train batch, its detached penultimate features (γ-Net's
    input; the head's input for ``lookahead="head"``), and the meta-validation batch with its
    features (``None`` when the outer loss recomputes them: ``lookahead="all"`` or the
    backbone leak)."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    features_train: torch.Tensor
    x_meta: torch.Tensor
    y_meta: torch.Tensor
    features_meta: torch.Tensor | None


class _Features(nn.Module):
    """``model.features`` as a module's forward, so ``functional_call`` can evaluate it with
    given parameters (names prefixed ``model.``)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.features(x)


@contextlib.contextmanager
def _mode(model: nn.Module, training: bool) -> Iterator[None]:
    """Run in train or eval mode, without mutating BatchNorm running statistics (train-mode
    BatchNorm normalises with the batch statistics but does not update the buffers), and
    restore the previous mode afterwards."""
    was_training = model.training
    norms = [
        m
        for m in model.modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats
    ]
    model.train(training)
    for m in norms:
        m.track_running_stats = not training
    try:
        yield
    finally:
        for m in norms:
            m.track_running_stats = True
        model.train(was_training)


def _linear(x: torch.Tensor, head: Params) -> torch.Tensor:
    """``x W^T + b``: the ``nn.Linear`` head evaluated with the parameters ``head``
    (``weight``, and ``bias`` if the head has one)."""
    return F.linear(x, head["weight"], head.get("bias"))


def head_params(model: nn.Module) -> Params:
    """The head's parameters, detached (``theta`` of the head-only lookahead)."""
    return {k: p.detach() for k, p in _head(model).named_parameters()}


def backbone_params(model: nn.Module) -> Params:
    """Every parameter outside ``head``, detached, under its name in ``model``."""
    return {k: p.detach() for k, p in model.named_parameters() if not k.startswith("head.")}


def meta_problem(
    model: nn.Module,
    meta: nn.Module,
    batch: MetaBatch,
    *,
    lr: float,
    objective: ObjectiveFn,
    lookahead: str = "head",
    backbone_leak: bool = False,
) -> BilevelProblem:
    """The bilevel problem of one meta step (module doc).

    ``phi`` is a dict of the meta module's parameters; with ``backbone_leak`` it is
    ``{"meta": ..., "backbone": backbone_params(model)}`` and the hypergradient's
    ``"backbone"`` part is the reference code's leaked gradient (quirk 1; head lookahead
    only; the meta-val forward then runs in train mode, quirk 2). ``theta``:
    :func:`head_params` (``"head"``) or all parameters by name (``"all"``).
    """
    if lookahead not in LOOKAHEADS:
        raise ValueError(f"lookahead must be one of {LOOKAHEADS}, got {lookahead!r}")
    if backbone_leak and lookahead != "head":
        raise ValueError("the reference-code gradient leak exists for the head lookahead only")
    inner = SGD(lr=lr)
    if lookahead == "all":
        return _whole_network_problem(model, meta, batch, inner, objective)
    if backbone_leak:
        return _leaky_head_problem(model, meta, batch, inner, objective)
    if batch.features_meta is None:
        raise ValueError("the head lookahead needs batch.features_meta")
    _head(model)  # validates the head: the closures evaluate it as an nn.Linear
    feats, feats_meta = batch.features_train, batch.features_meta

    def inner_loss(theta: Params, phi: Params) -> torch.Tensor:
        return training_loss(meta, _linear(feats, theta), batch.y_train, feats, theta, phi)

    def outer_loss(theta: Params, phi: Params) -> torch.Tensor:
        return objective(_linear(feats_meta, theta), batch.y_meta)

    return BilevelProblem(inner_loss, outer_loss, inner)


def _whole_network_problem(
    model: nn.Module, meta: nn.Module, batch: MetaBatch, inner: SGD, objective: ObjectiveFn
) -> BilevelProblem:
    """``theta`` = every parameter; train-mode inner forward, eval-mode meta-val forward."""
    buffers = dict(model.named_buffers())

    def inner_loss(theta: Params, phi: Params) -> torch.Tensor:
        with _mode(model, True):
            logits = functional_call(model, {**theta, **buffers}, (batch.x_train,))
        head = {k.removeprefix("head."): v for k, v in theta.items() if k.startswith("head.")}
        return training_loss(meta, logits, batch.y_train, batch.features_train, head, phi)

    def outer_loss(theta: Params, phi: Params) -> torch.Tensor:
        with _mode(model, False):
            logits = functional_call(model, {**theta, **buffers}, (batch.x_meta,))
        return objective(logits, batch.y_meta)

    return BilevelProblem(inner_loss, outer_loss, inner)


def _leaky_head_problem(
    model: nn.Module, meta: nn.Module, batch: MetaBatch, inner: SGD, objective: ObjectiveFn
) -> BilevelProblem:
    """Head lookahead with the backbone in ``phi`` (quirk 1) and train-mode meta-val
    features (quirk 2)."""
    view = _Features(model)
    buffers = {f"model.{k}": v for k, v in model.named_buffers()}

    def features(backbone: Params, x: torch.Tensor) -> torch.Tensor:
        params = {f"model.{k}": v for k, v in backbone.items()}
        with _mode(model, True):
            return functional_call(view, {**params, **buffers}, (x,), strict=False)

    def inner_loss(theta: Params, phi: dict[str, Params]) -> torch.Tensor:
        logits = _linear(features(phi["backbone"], batch.x_train), theta)
        return training_loss(meta, logits, batch.y_train, batch.features_train, theta, phi["meta"])

    def outer_loss(theta: Params, phi: dict[str, Params]) -> torch.Tensor:
        logits = _linear(features(phi["backbone"], batch.x_meta), theta)
        return objective(logits, batch.y_meta)

    return BilevelProblem(inner_loss, outer_loss, inner)


def meta_hypergradient(
    model: nn.Module,
    meta: nn.Module,
    batch: MetaBatch,
    *,
    lr: float,
    objective: ObjectiveFn,
    lookahead: str = "head",
    backbone_leak: bool = False,
    estimator: Estimator | None = None,
) -> Hypergradient:
    """The one-step-lookahead hypergradient of :func:`meta_problem` from the model's current
    parameters: ``dF/dphi = (d theta'/d phi)^T grad_theta f(theta')`` with
    ``theta' = theta - lr grad_theta g(theta, phi)``.

    ``estimator``: ``None`` picks :class:`AutogradLookahead` for the head lookahead (plain
    autograd, the fast path) and the engine's :class:`OneStepLookahead` (the reference, which
    tests compare the fast path against) for ``lookahead="all"``; pass either to force it.
    ``result.grad``: dict over the meta module's parameter names (with ``backbone_leak``:
    ``{"meta": ..., "backbone": ...}``); ``result.outer_loss``: the meta loss at ``theta'``.
    """
    problem = meta_problem(
        model,
        meta,
        batch,
        lr=lr,
        objective=objective,
        lookahead=lookahead,
        backbone_leak=backbone_leak,
    )
    phi: Any = {k: p.detach() for k, p in meta.named_parameters()}
    if backbone_leak:
        phi = {"meta": phi, "backbone": backbone_params(model)}
    theta = (
        head_params(model)
        if lookahead == "head"
        else {k: p.detach() for k, p in model.named_parameters()}
    )
    if estimator is None:
        estimator = AutogradLookahead() if lookahead == "head" else OneStepLookahead()
    return estimator(problem, phi, theta, problem.inner_optimizer.init(theta))


# ---------------------------------------------------------------------- the trainer
@dataclass(frozen=True, repr=False)
class MetaHistory(History):
    """:class:`~selfcal.training.History` plus, per epoch: ``meta_loss`` (mean outer loss at
    the looked-ahead parameters), ``train_gamma_mean`` / ``train_gamma_std`` (γ-Net's output
    over the epoch's training batches, before each meta step) and ``val_gamma_mean`` /
    ``val_gamma_std`` (γ-Net on the validation features after the epoch, eval mode; the
    analysis of [MetaReg] Fig. 3c-d). The γ entries are empty for ``method="unit-l2"``."""

    meta_loss: tuple[float, ...] = ()
    train_gamma_mean: tuple[float, ...] = ()
    train_gamma_std: tuple[float, ...] = ()
    val_gamma_mean: tuple[float, ...] = ()
    val_gamma_std: tuple[float, ...] = ()


@dataclass
class _MetaRecord:
    meta_loss: list[float]
    train_gamma_mean: list[float]
    train_gamma_std: list[float]
    val_gamma_mean: list[float]
    val_gamma_std: list[float]

    def history(self, base: History) -> MetaHistory:
        values = {f.name: getattr(base, f.name) for f in fields(History)}
        return MetaHistory(**values, **{k: tuple(v) for k, v in vars(self).items()})


class MetaCalibrationTrainer:
    """Trains a model with a meta-learned calibration regulariser (module doc).

    ``method``: ``"gamma-net"`` (FL_gamma; with ``meta_objective="sece"`` the proposed
    FL_gamma-SECE, with ``"dece"`` FL_gamma-DECE, with ``"ce"`` our reading of the paper's
    "FL_gamma" ablation) or ``"unit-l2"`` (CE-DECE / CE-SECE). ``meta_objective``: one of
    :data:`META_OBJECTIVES` (:func:`meta_objective`).
    ``lookahead``: ``"head"`` (reference) or ``"all"``. ``config``: the real optimizer's
    protocol (use ``optimizer="sgd", lr=0.1, momentum=0.9, weight_decay=5e-4,
    batch_size=128, grad_clip=2.0`` for the papers); its ``seed`` also seeds γ-Net's
    initialisation and the meta-val batch order. ``on_epoch`` / ``batch_transform``: the
    hooks of the module doc. After :meth:`fit`: ``meta_module_`` (the trained γ-Net or
    :class:`UnitL2`, for analysis only) and ``history_``.
    """

    def __init__(
        self,
        *,
        method: str = "gamma-net",
        meta_objective: str = "sece",
        config: TrainConfig,
        meta_lr: float = DEFAULT_META_LR,
        lookahead: str = "head",
        replicate_reference_quirks: bool = False,
        ce_weight: float = DEFAULT_CE_WEIGHT,
        tau: float = DEFAULT_TAU,
        on_epoch: MetaEpochCallback | None = None,
        batch_transform: BatchTransform | None = None,
    ) -> None:
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        if lookahead not in LOOKAHEADS:
            raise ValueError(f"lookahead must be one of {LOOKAHEADS}, got {lookahead!r}")
        if replicate_reference_quirks and lookahead != "head":
            raise ValueError("replicate_reference_quirks needs lookahead='head'")
        if not (isinstance(meta_lr, (int, float)) and meta_lr > 0):
            raise ValueError(f"meta_lr must be positive, got {meta_lr!r}")
        self.objective = _build_objective(meta_objective, ce_weight=ce_weight)
        self.method, self.config, self.meta_lr = method, config, float(meta_lr)
        self.lookahead, self.quirks, self.tau = lookahead, replicate_reference_quirks, tau
        self.on_epoch, self.batch_transform = on_epoch, batch_transform

    def fit(
        self,
        model: nn.Module,
        train: tuple[torch.Tensor, torch.Tensor],
        val: tuple[torch.Tensor, torch.Tensor] | None,
        meta_val: tuple[torch.Tensor, torch.Tensor],
    ) -> MetaHistory:
        """Train ``model`` in place; ``meta_val`` is cycled in shuffled batches of
        ``config.batch_size``. Raises :class:`TrainingDiverged` on NaN/inf."""
        config, device = self.config, torch.device(self.config.device)
        model.to(device)
        _head(model)
        x, y = prepare_pair(model, train, "train", device)
        xm, ym = prepare_pair(model, meta_val, "meta_val", device)
        validation = None if val is None else prepare_pair(model, val, "val", device)
        if validation is None and (config.early_stopping is not None or config.restore_best):
            raise ValueError("early_stopping and restore_best need validation data (val=...)")
        with seeded_global_rng(config.seed, device):
            meta = make_meta_module(model, self.method, tau=self.tau).to(device, x.dtype)
            history = self._train(model, meta, (x, y), (xm, ym), validation)
        self.meta_module_, self.history_ = meta, history
        return history

    def _train(
        self,
        model: nn.Module,
        meta: nn.Module,
        train: tuple[torch.Tensor, ...],
        meta_val: tuple[torch.Tensor, ...],
        validation: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> MetaHistory:
        config = self.config
        optimizer = make_optimizer(model, config)
        scheduler = torch.optim.lr_scheduler.MultiStepLR(
            optimizer, list(config.milestones), gamma=config.lr_decay
        )
        meta_optimizer = torch.optim.Adam(meta.parameters(), lr=self.meta_lr)
        shuffle = torch.Generator().manual_seed(config.seed)
        meta_batches = _cycle(
            len(meta_val[1]),
            config.batch_size,
            torch.Generator().manual_seed(config.seed + 1),
            train[0].device,
        )
        augment = bind_transform(
            self.batch_transform, augmentation_generator(config.seed, train[0].device)
        )
        record, extra = HistoryRecorder(best_by=config.best_by), _MetaRecord([], [], [], [], [])
        best_state, stop, start = None, "completed", time.perf_counter()
        for epoch in range(config.epochs):
            epoch_start, lr = time.perf_counter(), optimizer.param_groups[0]["lr"]
            try:
                batches = epoch_batches(len(train[1]), config.batch_size, shuffle, train[0].device)
                stats = self._epoch(
                    model,
                    meta,
                    train,
                    meta_val,
                    batches,
                    meta_batches,
                    optimizer,
                    meta_optimizer,
                    lr,
                    augment,
                )
                scheduler.step()
                check_parameters(model)
                scores = None if validation is None else validation_scores(model, *validation)
            except NonFinite as err:
                base = record.snapshot(time.perf_counter() - start)
                raise TrainingDiverged(epoch, str(err), extra.history(base)) from None
            record.train_loss.append(stats["loss"])
            record.lr.append(lr)
            self._record_meta(extra, stats, meta, model, validation)
            if scores is not None and record.add_validation(epoch, *scores) and config.restore_best:
                best_state = {k: t.detach().clone() for k, t in model.state_dict().items()}
            record.epoch_time.append(time.perf_counter() - epoch_start)
            if self.on_epoch is not None:
                self.on_epoch(epoch, model, meta)
            best, patience = record.best_epoch, config.early_stopping
            if patience is not None and best is not None and epoch - best >= patience:
                stop = "early_stopping"
                break
        if best_state is not None:
            model.load_state_dict(best_state)
        base = record.snapshot(
            time.perf_counter() - start, _stop(stop), restored=best_state is not None
        )
        return extra.history(base)

    def _epoch(
        self,
        model: nn.Module,
        meta: nn.Module,
        train: tuple[torch.Tensor, ...],
        meta_val: tuple[torch.Tensor, ...],
        batches: list[Any],
        meta_batches: Iterator[torch.Tensor],
        optimizer: torch.optim.Optimizer,
        meta_optimizer: torch.optim.Optimizer,
        lr: float,
        augment: Callable[[torch.Tensor], torch.Tensor],
    ) -> dict[str, Any]:
        """One pass: per batch (``augment``-ed) the meta step then the real step. Returns the
        batch-size weighted mean train loss, the mean meta loss and every γ seen."""
        x, y = train
        total, meta_total, gammas = 0.0, 0.0, []
        for batch in batches:
            rows = next(meta_batches)
            loss, meta_loss, gamma = self.step(
                model,
                meta,
                augment(x[batch]),
                y[batch],
                meta_val[0][rows],
                meta_val[1][rows],
                optimizer,
                meta_optimizer,
                lr,
            )
            total += loss * len(y[batch])
            meta_total += meta_loss
            if gamma is not None:
                gammas.append(gamma)
        return {
            "loss": total / len(y),
            "meta_loss": meta_total / len(batches),
            "gamma": torch.cat(gammas) if gammas else None,
        }

    def step(
        self,
        model: nn.Module,
        meta: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        x_meta: torch.Tensor,
        y_meta: torch.Tensor,
        optimizer: torch.optim.Optimizer,
        meta_optimizer: torch.optim.Optimizer,
        lr: float,
    ) -> tuple[float, float, torch.Tensor | None]:
        """One iteration (spec §6.4 steps 1-6); returns (real loss, meta loss, gamma before
        the meta update or ``None``)."""
        model.train()
        features = model.features(x)  # (a) the train forward, kept
        logits = model.head(features)
        detached = features.detach()
        gamma = _checked_gamma(meta, detached, "")
        batch = MetaBatch(x, y, detached, x_meta, y_meta, self._meta_features(model, x_meta))
        result = meta_hypergradient(
            model,
            meta,
            batch,
            lr=lr,
            objective=self.objective,
            lookahead=self.lookahead,
            backbone_leak=self.quirks,
        )
        meta_grad = result.grad["meta"] if self.quirks else result.grad
        _adam_step(meta, meta_grad, meta_optimizer)  # (b)
        updated = _checked_gamma(meta, detached, " after the meta step")
        optimizer.zero_grad(set_to_none=True)
        if self.quirks:  # quirk 1 (+ 2: BN update)
            _accumulate(model, result.grad["backbone"])
            _update_batchnorm_statistics(model, x_meta)
        loss = training_loss(
            meta, logits, y, detached, dict(_head(model).named_parameters()), gamma=updated
        )
        value = loss_value(loss)  # (c) gamma recomputed, detached
        loss.backward()
        if self.config.grad_clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), self.config.grad_clip)
        optimizer.step()
        return value, float(result.outer_loss), gamma

    def _meta_features(self, model: nn.Module, x_meta: torch.Tensor) -> torch.Tensor | None:
        """Eval-mode, no-grad meta-val features for the plain head lookahead; ``None`` where
        the outer loss recomputes them."""
        if self.lookahead != "head" or self.quirks:
            return None
        with torch.no_grad(), _mode(model, False):
            return model.features(x_meta)

    @staticmethod
    def _record_meta(
        extra: _MetaRecord,
        stats: dict[str, Any],
        meta: nn.Module,
        model: nn.Module,
        validation: tuple[torch.Tensor, ...] | None,
    ) -> None:
        extra.meta_loss.append(float(stats["meta_loss"]))
        if stats["gamma"] is None:
            return
        _append_stats(extra.train_gamma_mean, extra.train_gamma_std, stats["gamma"])
        if validation is not None:
            with torch.no_grad(), _mode(model, False):
                _append_stats(
                    extra.val_gamma_mean, extra.val_gamma_std, meta(model.features(validation[0]))
                )


def fit_meta(
    model: nn.Module,
    train: tuple[torch.Tensor, torch.Tensor],
    val: tuple[torch.Tensor, torch.Tensor] | None,
    meta_val: tuple[torch.Tensor, torch.Tensor],
    *,
    method: str = "gamma-net",
    meta_objective: str = "sece",
    config: TrainConfig,
    meta_lr: float = DEFAULT_META_LR,
    lookahead: str = "head",
    replicate_reference_quirks: bool = False,
    ce_weight: float = DEFAULT_CE_WEIGHT,
    tau: float = DEFAULT_TAU,
    on_epoch: MetaEpochCallback | None = None,
    batch_transform: BatchTransform | None = None,
) -> MetaHistory:
    """Function face of :class:`MetaCalibrationTrainer` (γ-Net is discarded afterwards)."""
    trainer = MetaCalibrationTrainer(
        method=method,
        meta_objective=meta_objective,
        config=config,
        meta_lr=meta_lr,
        lookahead=lookahead,
        replicate_reference_quirks=replicate_reference_quirks,
        ce_weight=ce_weight,
        tau=tau,
        on_epoch=on_epoch,
        batch_transform=batch_transform,
    )
    return trainer.fit(model, train, val, meta_val)


# ---------------------------------------------------------------------------- helpers
def _cycle(
    n: int, batch_size: int | None, generator: torch.Generator, device: torch.device
) -> Iterator[torch.Tensor]:
    """Endless shuffled meta-val batches (a new permutation per pass, the cycled loader)."""
    while True:
        order = torch.randperm(n, generator=generator).to(device)
        yield from (order.split(batch_size) if batch_size is not None else [order])


def _adam_step(meta: nn.Module, grads: Params, optimizer: torch.optim.Optimizer) -> None:
    optimizer.zero_grad(set_to_none=True)
    for name, p in meta.named_parameters():
        p.grad = grads[name].to(p.dtype)
    optimizer.step()


def _checked_gamma(meta: nn.Module, features: torch.Tensor, when: str) -> torch.Tensor | None:
    """γ-Net's detached output on ``features`` (``None`` for another meta module); raises
    :class:`NonFinite` if any value is NaN or infinite."""
    if not isinstance(meta, GammaNet):
        return None
    with torch.no_grad():
        gamma = meta(features)
    if not bool(torch.isfinite(gamma).all()):
        raise NonFinite(f"the γ-Net output is not finite{when}")
    return gamma


def _accumulate(model: nn.Module, grads: Params) -> None:
    """Add the leaked meta gradient into the backbone's ``.grad`` (quirk 1)."""
    for name, p in model.named_parameters():
        if name in grads:
            p.grad = grads[name].to(p.dtype).clone() if p.grad is None else p.grad + grads[name]


def _update_batchnorm_statistics(model: nn.Module, x_meta: torch.Tensor) -> None:
    """Quirk 2: the reference's train-mode meta-val forward updates BatchNorm's running
    statistics with the meta batch; a no-grad train-mode forward applies the same update."""
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        with torch.no_grad():
            model.train()
            model.features(x_meta)


def _append_stats(means: list[float], stds: list[float], gamma: torch.Tensor) -> None:
    means.append(float(gamma.mean()))
    stds.append(float(gamma.std(unbiased=False)) if gamma.numel() else float("nan"))


def _stop(reason: str) -> StopReason:
    return "early_stopping" if reason == "early_stopping" else "completed"
