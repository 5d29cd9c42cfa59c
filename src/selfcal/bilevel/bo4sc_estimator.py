"""The estimator face of BO4SC: :class:`BO4SC` trains a user's ``nn.Module`` on tensors or a
map-style ``Dataset``, full batch or by minibatches, on the CPU or a GPU (the model's device).

Usage::

    fitted = BO4SC(batch_size=256, inner_steps=10, outer_iterations=2000).fit(
        model, (x_train, y_train), (x_val, y_val))   # or .fit(model, train_dataset, val_dataset)
    fitted.weights_                                   # one weight per training row

Why BO4SC keeps an outer loop of its own instead of being a step strategy
(:class:`~selfcal.training.steps.TrainStep`) of the training loop :func:`selfcal.training.fit`:

* ``fit`` trains an in-memory ``(x, y)`` pair, validated and moved to the device whole by
  :func:`~selfcal.training.prepare_run`; BO4SC also trains on a map-style ``Dataset`` read row
  by row (:class:`~selfcal.bilevel._batches.Rows`), and a ``Dataset`` that draws its items
  afresh cannot be read once into a pair without changing what is trained on;
* the loop's unit is an epoch -- one shuffled permutation split into minibatches, each a step
  of its ``torch.optim`` optimizer under ``MultiStepLR``, then a validation pass on the model;
  BO4SC's is an outer iteration -- ``T`` inner steps of a differentiable functional optimizer
  (:mod:`selfcal.optim`) on ``T`` minibatches from epochs that run across iterations, then one
  update of the weights from the outer loss. A BO4SC step would have to ignore the loop's
  batches, optimizer, schedule and validation, and hold the parameters itself: they live in the
  functional state and reach the model only when the fit completes, so that a fit that raises
  leaves the model as it was;
* the loop puts the model in training mode every epoch; BO4SC trains in the mode the model
  came in.

What the two share instead: the random streams (:mod:`selfcal.training.seeding`: the global
generators seeded inside ``fork_rng``, the CPU shuffling generator seeded with ``seed``, the
augmentation generator on the model's device), the batch-transform protocol
``batch_transform(x, generator)`` and its check, and the prediction pass
(:func:`~selfcal.models.inference.predict_logits`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from selfcal._validation import check_int
from selfcal.bilevel import bo4sc as core
from selfcal.bilevel._batches import (
    EpochSampler,
    Rows,
    WeightRecord,
    as_batch_transform,
    as_pair,
    feature_rows,
    model_classes,
)
from selfcal.bilevel.engine import Estimator
from selfcal.bilevel.estimators import AutogradUnrolled
from selfcal.exceptions import NotFittedError
from selfcal.models.inference import predict_logits
from selfcal.optim import Adam, Optimizer, Params
from selfcal.predictions import ArrayLike, validate_labels
from selfcal.training.seeding import (
    BatchTransform,
    augmentation_generator,
    bind_transform,
    seeded_global_rng,
    shuffle_generator,
)


class BO4SC:
    """Self-calibrating training of a model by bilevel sample weighting: the hyperparameters
    here, the model and data at :meth:`fit` (which trains the model in place).

    ``batch_size=None`` (default) is full-batch BO4SC: every inner step on the whole training
    set and the outer loss on the whole validation set. With ``batch_size=B`` an outer
    iteration takes the ``T`` inner steps on ``T`` minibatches of ``B`` rows (epochs of
    shuffled rows) and the outer loss on a validation batch of ``val_batch_size`` rows (default:
    the whole validation set), and updates the weights of the drawn rows only
    (:mod:`selfcal.bilevel.bo4sc`). ``dF/dw_i`` scales as ``1/B`` (``1/N`` full batch), so
    ``weight_lr`` must be chosen for the batch size.

    ``inner_steps`` (``T``, default 10) and ``inner_lr`` (default 1e-2, Adam) are shortcuts
    for ``estimator=AutogradUnrolled(inner_steps)`` (:class:`~selfcal.bilevel.Unrolled`'s exact
    hypergradient on the regular autograd tape, faster) and ``inner_optimizer=Adam(inner_lr)``; pass
    either the shortcut or the object, not both. ``batch_transform(x) -> x`` augments each
    training batch (not the validation batch); it is called as ``batch_transform(x,
    generator)`` -- the form :func:`selfcal.training.fit` takes, e.g.
    :func:`selfcal.data.augment.random_crop_flip` -- with the run's augmentation generator (on
    the model's device, seeded from ``seed`` as the loop's), unless it takes one argument only
    (the older form, which draws from the global generators). ``inner_lr_schedule(i)``
    multiplies the inner optimizer's learning rate at outer iteration ``i`` (0-based; e.g. a
    step decay), its state carried over unchanged. ``seed`` fixes the shuffling and the random
    number generators during :meth:`fit` (dropout, augmentation; the global generators are
    restored afterwards); without it the shuffling is drawn from torch's global generator.
    The model's parameters are replaced only when the fit completes; a fit that raises (or is
    interrupted) also restores the BatchNorm running statistics it had updated, and the mode.
    ``progress`` shows a progress bar with the outer loss on stderr.
    ``callback(iteration, params)`` runs after each outer iteration (0-based) with the current
    parameters ``theta`` (a dict by name, on the model's device; read them, do not change
    them; the model's own parameters are replaced only at the end) -- e.g. to keep the
    checkpoint with the best validation score; returning ``True`` stops the fit there, which
    then completes with the iterations run so far.

    After :meth:`fit` (``I`` = the iterations run: ``outer_iterations`` unless ``callback``
    stopped the fit): ``weights_`` ``[n_train]``; ``outer_losses_`` ``[I]`` (validation outer
    loss at each ``theta_T``); ``weight_quantiles_`` ``[I + 1, len(quantile_levels_)]``
    (quantiles of the whole table after each iteration, see
    :class:`~selfcal.bilevel._batches.WeightRecord`); ``weight_history_`` ``[I + 1,
    len(history_rows_)]``, the weights of ``history_rows_`` (every row when ``n_train <=
    history_rows``, else a seeded sample of ``history_rows`` of them; ``None`` unless
    ``record_weights``); ``model_``, the model, whose parameters are replaced in place by the
    final ``theta``.

    Examples
    --------
    >>> from selfcal.bilevel import BO4SC
    >>> from selfcal.data import load_dataset
    >>> from selfcal.models import build_model
    >>> data = load_dataset("blobs-1.7", seed=0)  # 700 / 300 / 1000 rows, 5 classes
    >>> model = build_model("mlp", seed=0, n_features=2, n_classes=5, hidden=(16,))
    >>> bo = BO4SC(inner_steps=5, outer_iterations=10, weight_lr=300.0, seed=0)
    >>> bo = bo.fit(model, (data.train.x, data.train.y), (data.val.x, data.val.y))
    >>> tuple(bo.weights_.shape), tuple(bo.weight_history_.shape)  # one weight per row
    ((700,), (11, 700))
    >>> bool(bo.outer_losses_[-1] < bo.outer_losses_[0])  # the validation BCE went down
    True
    >>> bo.predict_confidence(data.test.x).shape  # the smooth confidence p_hat
    torch.Size([1000])
    """

    def __init__(
        self,
        *,
        batch_size: int | None = None,
        val_batch_size: int | None = None,
        inner_steps: int | None = None,
        outer_iterations: int = 100,
        inner_lr: float | None = None,
        weight_lr: float = core.DEFAULT_WEIGHT_LR,
        beta: float = 20.0,
        estimator: Estimator | None = None,
        inner_optimizer: Optimizer | None = None,
        constraint: core.Constraint = "clip",
        initial_weight: float = 1.0,
        record_weights: bool = True,
        history_rows: int = 1000,
        batch_transform: BatchTransform | Callable[[torch.Tensor], torch.Tensor] | None = None,
        inner_lr_schedule: Callable[[int], float] | None = None,
        progress: bool = False,
        seed: int | None = None,
        callback: Callable[[int, Params], bool | None] | None = None,
    ) -> None:
        self.batch_size = batch_size
        self.val_batch_size = val_batch_size
        self.inner_steps = inner_steps
        self.outer_iterations = outer_iterations
        self.inner_lr = inner_lr
        self.weight_lr = weight_lr
        self.beta = beta
        self.estimator = estimator
        self.inner_optimizer = inner_optimizer
        self.constraint = constraint
        self.initial_weight = initial_weight
        self.record_weights = record_weights
        self.history_rows = history_rows
        self.batch_transform = batch_transform
        self.inner_lr_schedule = inner_lr_schedule
        self.progress = progress
        self.seed = seed
        self.callback = callback

    # ------------------------------------------------------------- configuration
    def _config(self) -> core.BO4SCConfig:
        if self.estimator is not None and self.inner_steps is not None:
            raise ValueError("pass inner_steps or estimator, not both")
        if self.inner_optimizer is not None and self.inner_lr is not None:
            raise ValueError("pass inner_lr or inner_optimizer, not both")
        check_int("outer_iterations", self.outer_iterations)
        check_int("history_rows", self.history_rows)
        steps = core.DEFAULT_INNER_STEPS if self.inner_steps is None else self.inner_steps
        lr = core.DEFAULT_INNER_LR if self.inner_lr is None else self.inner_lr
        return core.BO4SCConfig(
            estimator=self.estimator if self.estimator is not None else AutogradUnrolled(steps),
            inner_optimizer=self.inner_optimizer if self.inner_optimizer is not None else Adam(lr),
            weight_lr=self.weight_lr,
            beta=self.beta,
            constraint=self.constraint,
            initial_weight=self.initial_weight,
        )

    @staticmethod
    def _params(model: nn.Module) -> Params:
        params: Params = {k: p for k, p in model.named_parameters() if p.requires_grad}
        if not params:
            raise ValueError("the model has no trainable parameters")
        return params

    @staticmethod
    def _sources(model: nn.Module, train: Any, val: Any, like: torch.Tensor) -> tuple[Rows, Rows]:
        """The training and validation rows (checked; tensors moved to the model's dtype)."""
        if isinstance(train, Dataset) or isinstance(val, Dataset):
            if not (isinstance(train, Dataset) and isinstance(val, Dataset)):
                raise ValueError("pass train and val both as Datasets or both as (x, y) pairs")
            train_rows, val_rows = (
                Rows(train, None, "train_dataset"),
                Rows(val, None, "val_dataset"),
            )
            if len(train_rows) < 1 or len(val_rows) < 1:
                raise ValueError("the training and validation datasets must not be empty")
        else:
            (x_train, y_train), (x_val, y_val) = as_pair(train, "train"), as_pair(val, "val")
            xt = feature_rows(x_train, "x_train", like)
            xv = feature_rows(x_val, "x_val", like)
            if xt.shape[1:] != xv.shape[1:]:
                raise ValueError(
                    f"x_train rows have shape {tuple(xt.shape[1:])} but x_val "
                    f"rows have {tuple(xv.shape[1:])}"
                )
            train_rows, val_rows = Rows(xt, y_train, "x_train"), Rows(xv, y_val, "x_val")
        n_classes = model_classes(model, train_rows.features(min(len(train_rows), 8), like))
        for rows in (train_rows, val_rows):
            rows.n_classes = n_classes
            if not rows.is_dataset:
                rows.y = validate_labels(rows.y, len(rows), n_classes, rows.x.device)
        return train_rows, val_rows

    def _batch_sizes(self, n_train: int, n_val: int, steps: int) -> tuple[int | None, int]:
        if self.batch_size is not None:
            check_int("batch_size", self.batch_size)
            if self.batch_size > n_train:
                raise ValueError(
                    f"batch_size ({self.batch_size}) exceeds the {n_train} training rows"
                )
            if steps < 1:
                raise ValueError(
                    "minibatch BO4SC needs an estimator with at least one inner "
                    "step (one minibatch per step)"
                )
        val_size = n_val if self.val_batch_size is None else self.val_batch_size
        check_int("val_batch_size", val_size)
        if val_size > n_val:
            raise ValueError(f"val_batch_size ({val_size}) exceeds the {n_val} validation rows")
        return self.batch_size, val_size

    # ------------------------------------------------------------------ public API
    def fit(self, model: nn.Module, train: Any, val: Any) -> BO4SC:
        """Train ``model`` in place by ``outer_iterations`` outer iterations on
        ``train = (x_train, y_train)`` and ``val = (x_val, y_val)`` (tensors or arrays), or on
        two map-style Datasets of ``(x, y)`` items; returns ``self``."""
        config = self._config()
        params = self._params(model)
        like = next(iter(params.values()))
        train, val = self._sources(model, train, val, like)
        batch_size, val_size = self._batch_sizes(len(train), len(val), config.estimator.steps)
        seed = self.seed if self.seed is not None else int(torch.randint(2**62, ()).item())
        transform = as_batch_transform(self.batch_transform)
        augment = bind_transform(transform, augmentation_generator(seed, like.device))
        buffers = {k: b.clone() for k, b in model.named_buffers()}
        with seeded_global_rng(seed, like.device), _mode(model, model.training):
            generator = shuffle_generator(seed)
            run = _Run(self, model, config, train, val, batch_size, val_size, generator, like)
            run.augment = augment
            try:
                state, record, losses = run.loop(core.bo4sc_init(params, len(train), config))
            except BaseException:  # an interrupted fit leaves the model as it found it
                with torch.no_grad():
                    for name, value in model.named_buffers():
                        value.copy_(buffers[name])
                raise
        with torch.no_grad():
            for name, value in state.params.items():
                params[name].copy_(value)
        self.model_ = model
        self.weights_ = state.weights
        self.outer_losses_ = torch.stack(losses)
        self.weight_history_ = torch.stack(record.history) if self.record_weights else None
        self.history_rows_ = record.rows
        self.weight_quantiles_ = torch.stack(record.quantiles)
        self.quantile_levels_ = record.levels
        self.beta_ = config.beta
        return self

    def predict_confidence(self, x: ArrayLike, smooth: bool = True) -> torch.Tensor:
        """Confidence of the fitted model (evaluation mode) on ``x``: the Boltzmann confidence
        ``p_hat`` used in training (``smooth=True``) or the hard maximum probability."""
        if not hasattr(self, "weights_"):
            raise NotFittedError("BO4SC is not fitted yet; call fit() first")
        like = next(iter(self._params(self.model_).values()))
        x = feature_rows(x, "x", like)
        probs = torch.softmax(predict_logits(self.model_, x), dim=-1)
        return core.boltzmann_confidence(probs, self.beta_) if smooth else probs.amax(dim=-1)


class _Run:
    """One :meth:`BO4SC.fit`: draws each iteration's batches and steps the functional core."""

    def __init__(
        self,
        owner: BO4SC,
        model: nn.Module,
        config: core.BO4SCConfig,
        train: Rows,
        val: Rows,
        batch_size: int | None,
        val_size: int,
        generator: torch.Generator,
        like: torch.Tensor,
    ) -> None:
        self.owner, self.model, self.config = owner, model, config
        self.augment: Callable[[torch.Tensor], torch.Tensor] = lambda batch: batch  # fit binds it
        self.train, self.val = train, val
        self.steps = config.estimator.steps
        self.device, self.dtype = like.device, like.dtype
        self.train_sampler = (
            None if batch_size is None else EpochSampler(len(train), batch_size, generator)
        )
        self.val_sampler = (
            None if val_size == len(val) else EpochSampler(len(val), val_size, generator)
        )
        self.all_train = (
            None
            if batch_size is not None
            else train.take(torch.arange(len(train)), like.device, like.dtype)
        )
        self.all_val = (
            None
            if self.val_sampler is not None
            else val.take(torch.arange(len(val)), like.device, like.dtype)
        )
        n, wanted = len(train), owner.history_rows
        self.history_rows = (
            torch.arange(n)
            if n <= wanted
            else torch.sort(torch.randperm(n, generator=generator)[:wanted]).values
        )

    def loop(
        self, state: core.BO4SCState
    ) -> tuple[core.BO4SCState, WeightRecord, list[torch.Tensor]]:
        record = WeightRecord(state.weights, self.history_rows, self.config.constraint == "clip")
        losses = []
        with _progress(self.owner.progress, self.owner.outer_iterations) as advance:
            for iteration in range(self.owner.outer_iterations):
                state, info, changed, before = self.step(state, self.config_at(iteration))
                record.record(state.weights, changed, before)
                losses.append(info.outer_loss)
                advance(info)
                callback = self.owner.callback
                if callback is not None and callback(iteration, state.params):
                    break
        return state, record, losses

    def config_at(self, iteration: int) -> core.BO4SCConfig:
        """The configuration of outer iteration ``iteration`` (the scheduled inner lr)."""
        schedule = self.owner.inner_lr_schedule
        if schedule is None:
            return self.config
        optimizer: Any = self.config.inner_optimizer
        scaled = dataclasses.replace(optimizer, lr=optimizer.lr * schedule(iteration))
        return dataclasses.replace(self.config, inner_optimizer=scaled)

    def step(
        self, state: core.BO4SCState, config: core.BO4SCConfig
    ) -> tuple[core.BO4SCState, core.BO4SCInfo | core.BO4SCBatchInfo, Any, torch.Tensor]:
        """One outer iteration; also the rows it may change (``None``: all) and their weights
        before it."""
        if self.val_sampler is None:
            x_val, y_val = self.all_val  # type: ignore[misc]
        else:
            x_val, y_val = self.val.take(self.val_sampler.draw(1)[0], self.device, self.dtype)
        if self.train_sampler is None:
            return self._full_batch_step(state, config, x_val, y_val)
        return self._minibatch_step(state, config, self.train_sampler, x_val, y_val)

    def _full_batch_step(
        self,
        state: core.BO4SCState,
        config: core.BO4SCConfig,
        x_val: torch.Tensor,
        y_val: torch.Tensor,
    ) -> tuple[core.BO4SCState, core.BO4SCInfo, None, torch.Tensor]:
        x, y = self.all_train  # type: ignore[misc]
        x = self._augment(x)
        core.update_running_stats(self.model, state.params, [x] * self.steps)
        new, info = core.bo4sc_step(self.model, state, core.BO4SCData(x, y, x_val, y_val), config)
        return new, info, None, state.weights

    def _minibatch_step(
        self,
        state: core.BO4SCState,
        config: core.BO4SCConfig,
        sampler: EpochSampler,
        x_val: torch.Tensor,
        y_val: torch.Tensor,
    ) -> tuple[core.BO4SCState, core.BO4SCBatchInfo, torch.Tensor, torch.Tensor]:
        rows = sampler.draw(self.steps)
        x, y = self.train.take(rows.reshape(-1), self.device, self.dtype)
        x = torch.stack([self._augment(b) for b in x.unflatten(0, rows.shape)])
        core.update_running_stats(self.model, state.params, x)
        rows = rows.to(self.device)
        changed = torch.unique(rows)
        before = state.weights[changed]
        batch = core.BO4SCBatch(x, y.view(rows.shape), rows, x_val, y_val)
        state, info = core.bo4sc_minibatch_step(self.model, state, batch, config)
        return state, info, changed, before

    def _augment(self, x: torch.Tensor) -> torch.Tensor:
        """The bound ``batch_transform`` (:meth:`BO4SC.fit`) on ``x``, which must keep its
        shape (the batches are stacked)."""
        out = self.augment(x)
        if out.shape != x.shape:
            raise ValueError("batch_transform must return a tensor of the batch's shape")
        return out


@contextlib.contextmanager
def _mode(model: nn.Module, training: bool) -> Iterator[None]:
    was_training = model.training
    model.train(training)
    try:
        yield
    finally:
        model.train(was_training)


@contextlib.contextmanager
def _progress(show: bool, total: int) -> Iterator[Callable[[Any], None]]:
    """``advance(info)`` after each outer iteration: a rich progress bar with the outer loss on
    stderr when ``show``, else nothing."""
    if not show:
        yield lambda info: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress(
        "BO4SC",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        "{task.fields[loss]}",
        console=Console(stderr=True),
    ) as bar:
        task = bar.add_task("outer", total=total, loss="")
        yield lambda info: bar.update(
            task, advance=1, loss=f"outer loss {float(info.outer_loss):.4f}"
        )
