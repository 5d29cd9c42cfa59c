"""Training with a meta-learned regulariser: :class:`MetaStep` (the step strategy of the one
training loop, :func:`selfcal.training.fit`), :class:`MetaTrainer` (estimator face) and
:func:`fit_meta` (function face).

Per minibatch (methods §6.4 steps 1-6): (a) the train forward, kept; (b) the meta step -- the
one-step-lookahead hypergradient of the meta-objective on a meta-validation batch
(:func:`~selfcal.bilevel.meta.lookahead.meta_hypergradient`) and an Adam step on ``phi``; (c)
the real step on the training loss with the *updated* meta module's output, **detached**
(γ-Net's ``gamma`` is recomputed after (b), so the backbone cannot lower its loss by moving
``gamma``), by the loop's optimizer (SGD with momentum / weight decay / clipping / MultiStepLR
from :class:`~selfcal.training.TrainConfig`). The meta-validation set is cycled in shuffled
batches of ``config.batch_size`` from a generator seeded ``config.seed + 1``; γ-Net's
initialisation draws from the run's seeded global RNG.

With ``replicate_reference_quirks=False`` (default) the meta-val features come from an
eval-mode, no-grad forward; ``True`` replicates the Meta-Calibration code's quirks
(:mod:`selfcal.bilevel.meta.reference_quirks`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

import torch
from torch import nn

from selfcal._validation import check_choice, check_positive
from selfcal.bilevel.meta.lookahead import LOOKAHEADS, MetaLookahead, meta_hypergradient
from selfcal.bilevel.meta.modules import (
    DEFAULT_TAU,
    METHODS,
    MetaModule,
    make_meta_module,
    model_features,
    model_head,
)
from selfcal.bilevel.meta.objectives import DEFAULT_CE_WEIGHT, ObjectiveFn, meta_objective
from selfcal.bilevel.meta.problem import MetaBatch, frozen_statistics_mode
from selfcal.bilevel.meta.reference_quirks import (
    accumulate_leaked_gradient,
    update_batchnorm_statistics,
)
from selfcal.exceptions import NonFinite
from selfcal.losses._checks import gammas_checked
from selfcal.models.inference import predict_logits
from selfcal.optim import Params
from selfcal.training import History, TrainConfig, fit
from selfcal.training.loop import BatchTransform, EpochCallback
from selfcal.training.steps import Pair, Run, TrainStep, descend

DEFAULT_META_LR = 1e-3
"""Adam's lr on ``phi``, inherited from Meta-Calibration (not stated in [MetaReg])."""


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


_META_FIELDS = tuple(f.name for f in fields(MetaHistory) if f.name not in History.__annotations__)
"""The fields :class:`MetaHistory` adds to :class:`~selfcal.training.History`."""


@dataclass(frozen=True)
class MetaOptions:
    """The options of a meta-learned regulariser (checked on construction).

    * ``method``: ``"gamma-net"`` (FL_gamma; with ``meta_objective="sece"`` the proposed
      FL_gamma-SECE, with ``"dece"`` FL_gamma-DECE, with ``"ce"`` our reading of the paper's
      "FL_gamma" ablation) or ``"unit-l2"`` (Meta-Calibration's CE-DECE / CE-SECE);
    * ``meta_objective``: one of :data:`~selfcal.bilevel.meta.objectives.META_OBJECTIVES`
      (``ce_weight``: the DECE weight of ``"ce+dece"``);
    * ``meta_lr``: Adam's learning rate on ``phi``;
    * ``lookahead``: ``"head"`` (reference) or ``"all"`` (every parameter);
    * ``replicate_reference_quirks``: the Meta-Calibration code's quirks
      (:mod:`selfcal.bilevel.meta.reference_quirks`; head lookahead only);
    * ``tau``: γ-Net's temperature.
    """

    method: str = "gamma-net"
    meta_objective: str = "sece"
    meta_lr: float = DEFAULT_META_LR
    lookahead: Literal["head", "all"] = "head"
    replicate_reference_quirks: bool = False
    ce_weight: float = DEFAULT_CE_WEIGHT
    tau: float = DEFAULT_TAU

    def __post_init__(self) -> None:
        check_choice("method", self.method, METHODS)
        check_choice("lookahead", self.lookahead, LOOKAHEADS)
        if self.replicate_reference_quirks and self.lookahead != "head":
            raise ValueError("replicate_reference_quirks needs lookahead='head'")
        check_positive("meta_lr", self.meta_lr)
        meta_objective(self.meta_objective, ce_weight=self.ce_weight)
        check_positive("tau", self.tau)

    def objective(self) -> ObjectiveFn:
        return meta_objective(self.meta_objective, ce_weight=self.ce_weight)


class MetaStep(TrainStep):
    """The meta-learning step strategy (module doc) for :func:`selfcal.training.fit`.

    ``meta_val``: the meta-validation pair ``(x, y)``; ``**options``: the fields of
    :class:`MetaOptions`. The model must expose ``features(x)`` and a final ``nn.Linear``
    named ``head``. ``meta_module``: a meta module to train instead of a fresh one (e.g. a
    γ-Net from an earlier run; it is moved to the model's device and dtype). During and after
    the run, ``meta_module`` is the trained γ-Net or :class:`~selfcal.bilevel.UnitL2`
    (analysis only).
    """

    meta_module: MetaModule

    speed_options = False  # functional lookahead passes: no compile, no autocast

    def __init__(
        self, meta_val: Pair, *, meta_module: MetaModule | None = None, **options: Any
    ) -> None:
        self.meta_val, self.options = meta_val, MetaOptions(**options)
        self.objective = self.options.objective()
        self.given_module = meta_module
        self.record: dict[str, list[float]] = {name: [] for name in _META_FIELDS}

    def start(self, run: Run) -> None:
        """Check the model, validate ``meta_val``, create the meta module (from the run's
        seeded global RNG), its Adam optimizer and the meta-validation batches."""
        super().start(run)
        model_head(run.model)
        self.x_meta, self.y_meta = run.prepare(self.meta_val, "meta_val")
        meta = self.given_module
        if meta is None:
            meta = make_meta_module(run.model, self.options.method, tau=self.options.tau)
        self.meta_module = meta.to(run.device, run.train[0].dtype)
        self.meta_optimizer = torch.optim.Adam(meta.parameters(), lr=self.options.meta_lr)
        self.record = {name: [] for name in _META_FIELDS}
        generator = torch.Generator().manual_seed(run.config.seed + 1)
        self.meta_batches = _cycle(len(self.y_meta), run.config.batch_size, generator, run.device)

    def start_epoch(self, epoch: int) -> None:
        self.meta_losses: list[torch.Tensor] = []
        self.gamma_finite = torch.ones((), dtype=torch.bool, device=self.run.device)
        self.gammas: list[torch.Tensor] = []

    def step(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One iteration (methods §6.4 steps 1-6); returns the real step's loss. Its γ are
        not read on the host: they are ``>= 0`` by construction and their finiteness is read
        once an epoch (:meth:`_gamma`)."""
        with gammas_checked():
            return self._iteration(model, x, y)

    def _iteration(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        rows = next(self.meta_batches)
        x, x_meta, y_meta = self.run.augment(x), self.x_meta[rows], self.y_meta[rows]
        meta = self.meta_module
        model.train()
        features = model_features(model, x)  # (a) the train forward, kept
        logits = model_head(model)(features)
        detached = features.detach()
        gamma = self._gamma(meta, detached)
        labels = self.run.labels(y)  # checked once a run: the losses read none of them
        batch = MetaBatch(x, labels, detached, x_meta, y_meta, self._meta_features(model, x_meta))
        quirks = self.options.replicate_reference_quirks
        lr = self.run.optimizer.param_groups[0]["lr"]
        lookahead = MetaLookahead(lr, self.objective, self.options.lookahead, quirks)
        result = meta_hypergradient(model, meta, batch, lookahead)
        _adam_step(meta, result.grad["meta"] if quirks else result.grad, self.meta_optimizer)
        updated = self._gamma(meta, detached)  # (b) done
        self.run.optimizer.zero_grad(set_to_none=True)
        if quirks:
            accumulate_leaked_gradient(model, result.grad["backbone"])
            update_batchnorm_statistics(model, x_meta)
        head = dict(model_head(model).named_parameters())
        loss = meta.training_loss(logits, labels, features=detached, head=head, gamma=updated)
        self.meta_losses.append(result.outer_loss.detach())
        if gamma is not None:
            self.gammas.append(gamma)
        return descend(model, loss, self.run)  # (c) gamma recomputed, detached

    def _gamma(self, meta: MetaModule, features: torch.Tensor) -> torch.Tensor | None:
        """The meta module's detached exponent on ``features`` (``None`` if it has none); its
        finiteness is kept on the device and read once an epoch (:meth:`end_epoch` raises
        :class:`~selfcal.exceptions.NonFinite`), so the step never waits for it."""
        gamma = meta.gamma(features)
        if gamma is not None:
            self.gamma_finite = self.gamma_finite & torch.isfinite(gamma).all()
        return gamma

    def _meta_features(self, model: nn.Module, x_meta: torch.Tensor) -> torch.Tensor | None:
        """Eval-mode, no-grad meta-val features for the plain head lookahead; ``None`` where
        the outer loss recomputes them."""
        if self.options.lookahead != "head" or self.options.replicate_reference_quirks:
            return None
        with torch.no_grad(), frozen_statistics_mode(model, False):
            return model_features(model, x_meta)

    def end_epoch(self, model: nn.Module, validation: Pair | None) -> None:
        """Record the epoch's mean meta loss and γ-Net's output statistics."""
        if not bool(self.gamma_finite):
            raise NonFinite("the γ-Net output is not finite")
        self.record["meta_loss"].append(float(torch.stack(self.meta_losses).double().mean()))
        if not self.gammas:
            return
        self._append_stats("train", torch.cat(self.gammas))
        if validation is not None:
            gamma = predict_logits(
                model, validation[0], forward=lambda m, x: self.meta_module(model_features(m, x))
            )
            self._append_stats("val", gamma)

    def _append_stats(self, split: str, gamma: torch.Tensor) -> None:
        self.record[f"{split}_gamma_mean"].append(float(gamma.mean()))
        std = float(gamma.std(unbiased=False)) if gamma.numel() else float("nan")
        self.record[f"{split}_gamma_std"].append(std)

    def history(self, base: History) -> MetaHistory:
        values: dict[str, Any] = {f.name: getattr(base, f.name) for f in fields(History)}
        values.update({name: tuple(v) for name, v in self.record.items()})
        return MetaHistory(**values)


class MetaTrainer:
    """Trains a model with a meta-learned regulariser (module doc): ``config`` -- the real
    optimizer's protocol (use ``optimizer="sgd", lr=0.1, momentum=0.9, weight_decay=5e-4,
    batch_size=128, grad_clip=2.0`` for the papers; its ``seed`` also seeds γ-Net's
    initialisation and the meta-val batch order) --, ``on_epoch(epoch, model, history)`` and
    ``batch_transform`` as in :func:`selfcal.training.fit`, and ``**options``, the fields of
    :class:`MetaOptions` (checked here). After :meth:`fit`: ``history_`` (a
    :class:`MetaHistory`) and ``meta_module_`` (the trained γ-Net or
    :class:`~selfcal.bilevel.UnitL2`, for analysis).
    """

    def __init__(
        self,
        *,
        config: TrainConfig,
        on_epoch: EpochCallback | None = None,
        batch_transform: BatchTransform | None = None,
        **options: Any,
    ) -> None:
        self.config, self.on_epoch, self.batch_transform = config, on_epoch, batch_transform
        self.options = MetaOptions(**options)

    def fit(self, model: nn.Module, train: Pair, val: Pair | None, meta_val: Pair) -> MetaTrainer:
        """Train ``model`` in place (:func:`selfcal.training.fit` with a :class:`MetaStep` on
        ``meta_val``); returns ``self``. Raises
        :class:`~selfcal.exceptions.TrainingDiverged` on NaN/inf."""
        step = MetaStep(meta_val, **asdict(self.options))
        hooks: dict[str, Any] = {"on_epoch": self.on_epoch, "batch_transform": self.batch_transform}
        history = fit(model, train, val, config=self.config, step=step, **hooks)
        assert isinstance(history, MetaHistory)
        self.history_, self.meta_module_ = history, step.meta_module
        return self


def fit_meta(
    model: nn.Module,
    train: Pair,
    val: Pair | None,
    meta_val: Pair,
    *,
    config: TrainConfig,
    on_epoch: EpochCallback | None = None,
    batch_transform: BatchTransform | None = None,
    **options: Any,
) -> MetaHistory:
    """Function face of :class:`MetaTrainer`: train ``model`` in place with the meta-learned
    regulariser ``**options`` (the fields of :class:`MetaOptions`) and return its
    :class:`MetaHistory` (the meta module is discarded).

    Examples
    --------
    >>> import torch
    >>> from selfcal.bilevel import fit_meta
    >>> from selfcal.models import build_model
    >>> from selfcal.training import TrainConfig
    >>> g = torch.Generator().manual_seed(0)
    >>> x, y = torch.randn(96, 4, generator=g), torch.randint(0, 3, (96,), generator=g)
    >>> model = build_model("mlp", seed=0, n_features=4, n_classes=3, hidden=(8,))
    >>> history = fit_meta(model, (x[:64], y[:64]), (x[64:80], y[64:80]), (x[80:], y[80:]),
    ...                    method="gamma-net", meta_objective="sece",
    ...                    config=TrainConfig(epochs=2, optimizer="sgd", lr=0.1, batch_size=16))
    >>> history.epochs_run, len(history.meta_loss), len(history.train_gamma_mean)
    (2, 2, 2)
    """
    trainer = MetaTrainer(
        config=config, on_epoch=on_epoch, batch_transform=batch_transform, **options
    )
    return trainer.fit(model, train, val, meta_val).history_


# ---------------------------------------------------------------------------- helpers
def _cycle(
    n: int, batch_size: int | None, generator: torch.Generator, device: torch.device
) -> Iterator[torch.Tensor]:
    """Endless shuffled meta-val batches (a new permutation per pass, the cycled loader; drawn
    on the CPU and copied without waiting for the device)."""
    while True:
        order = torch.randperm(n, generator=generator).to(device, non_blocking=True)
        yield from (order.split(batch_size) if batch_size is not None else [order])


def _adam_step(meta: nn.Module, grads: Params, optimizer: torch.optim.Optimizer) -> None:
    optimizer.zero_grad(set_to_none=True)
    for name, p in meta.named_parameters():
        p.grad = grads[name].to(p.dtype)
    optimizer.step()
