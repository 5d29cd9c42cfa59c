"""A Lightning callback that logs selfcal's calibration metrics every validation epoch and can
fit temperature scaling on the validation logits at the end of training.

**How it gets the predictions.** The callback reads what the ``LightningModule``'s
``validation_step`` returns -- the ``outputs`` argument of ``on_validation_batch_end`` -- which
must be a mapping with ``"labels"`` and exactly one of ``"logits"`` or ``"probs"`` (selfcal
never guesses which scores it is given)::

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        return {"logits": logits, "labels": y}

This is the least intrusive design: one ``return`` line in the module, no second forward pass
and no assumption on the structure of a batch or of the model. Anything else returned is a
``ValueError`` that says what to return. The batches of every validation dataloader are
pooled; the sanity-check batches Lightning runs before training are ignored. The metrics are
created at the first validation batch and synchronised in collective calls, so under DDP every
process must see at least one validation batch (Lightning's distributed sampler gives each the
same number).

**What it logs.** At the end of each validation epoch, for each name in ``metrics``,
``f"{prefix}{name}"`` (``val_ece``, ``val_mce``, ``val_adaece``, ``val_classwise_ece``,
``val_brier`` and ``val_nll`` by default; ``val_refinement_loss`` and ``val_calibration_loss``
when named (the 0.1 names ``nll_refinement`` / ``nll_calibration`` are accepted and logged
under these), which keep every validation score and fit temperature scaling each epoch) with
``LightningModule.log``, so the values reach every logger and ``trainer.callback_metrics``
(``EarlyStopping`` and ``ModelCheckpoint`` can monitor them: ``monitor="val_refinement_loss"``
stops or checkpoints by the NLL after temperature scaling, as Berta et al. (2025) recommend).
The metrics are those of :mod:`selfcal.integrations.torchmetrics`, whose states are
synchronised across processes when they are computed, so each value is the metric on the whole
validation set of every process, equal to the one-shot ``selfcal.metrics`` function (bin counts
exactly, sums up to float64 summation order). The value is logged as a float64 tensor with
``sync_dist=True, reduce_fx="max"``: it is already identical on every process, and the maximum
of identical numbers keeps it exact (a mean would round it). ``history`` keeps the float64
values of every validation epoch.

**Temperature scaling.** With ``fit_temperature=True`` the callback also keeps the validation
scores of each validation run (in float64, gathered across processes), and at the end of
training (``on_train_end``) fits :class:`~selfcal.posthoc.TemperatureScaling` on those of the
last validation run -- with Lightning's default schedule, the logits of the final model --
stores it as ``temperature_scaling`` and logs ``f"{prefix}ts_temperature"`` and
``f"{prefix}ts_ece"``, the ECE after scaling on the same validation set (fitted and measured
on the same data, so an optimistic number). Lightning does not allow ``LightningModule.log``
in ``on_train_end``, so these two go straight to ``trainer.loggers`` (``log_metrics`` at the
final ``global_step``) and to ``ts_metrics``.

Needs the ``lightning`` extra (``pip install "selfcal[lightning]"``).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from selfcal.integrations import _missing_dependency

try:
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import Callback
    from lightning.pytorch.utilities.types import STEP_OUTPUT
    from torchmetrics import Metric as TorchMetric
except ImportError as error:
    raise ImportError(_missing_dependency("selfcal.integrations.lightning", "lightning")) from error

from selfcal._validation import check_choice, check_int, check_optional_int
from selfcal.evaluation import KEY_ALIASES
from selfcal.exceptions import DegenerateCalibration
from selfcal.integrations.torchmetrics import (
    ADAECE_MODES,
    ECE,
    MCE,
    NLL,
    AdaECE,
    Brier,
    CalibrationLoss,
    ClasswiseECE,
    RefinementLoss,
)
from selfcal.metrics import ece
from selfcal.posthoc import TemperatureScaling
from selfcal.predictions import Predictions, ScoreKind, validate_scores

__all__ = ["DEFAULT_METRICS", "METRICS", "CalibrationCallback"]

DEFAULT_METRICS = ("ece", "mce", "adaece", "classwise_ece", "brier", "nll")
"""The metrics :class:`CalibrationCallback` logs by default: additive states (``adaece``:
one confidence per sample), nothing refitted."""
METRICS = (*DEFAULT_METRICS, "refinement_loss", "calibration_loss")
"""The metrics :class:`CalibrationCallback` can log; the two refinement metrics keep every
validation score (``N x C`` float64) and fit temperature scaling each validation epoch, so
they are named when wanted."""

SCORE_KEYS: tuple[ScoreKind, ...] = ("logits", "probs")


class _ValidationScores(TorchMetric):
    """The scores and labels of a validation run, gathered across processes (float64 list
    states with ``dist_reduce_fx="cat"``)."""

    full_state_update = False
    scores: list[torch.Tensor]
    labels: list[torch.Tensor]

    def __init__(self, n_classes: int) -> None:
        super().__init__()
        self.n_classes = n_classes
        self.add_state("scores", [], dist_reduce_fx="cat")
        self.add_state("labels", [], dist_reduce_fx="cat")

    def update(self, scores: torch.Tensor, labels: torch.Tensor) -> None:
        self.scores.append(scores.detach().to(torch.float64))
        self.labels.append(labels.detach().to(torch.float64))

    def sync(
        self,
        dist_sync_fn: Any = None,
        process_group: Any = None,
        should_sync: bool = True,
        distributed_available: Any = None,
    ) -> None:
        """As :meth:`selfcal.integrations.torchmetrics.AdaECE.sync`: a process without a batch
        contributes empty float64 tensors of the right shapes."""
        if isinstance(self.scores, list) and not self.scores:
            empty = torch.empty(0, self.n_classes, dtype=torch.float64, device=self.device)
            self.scores.append(empty)
            self.labels.append(empty[:, 0])
        super().sync(dist_sync_fn, process_group, should_sync, distributed_available)

    def compute(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(scores, labels)`` of every process (no rows if no batch was seen)."""
        empty = torch.empty(0, self.n_classes, dtype=torch.float64, device=self.device)
        return _rows(self.scores, empty), _rows(self.labels, empty[:, 0]).long()


def _rows(state: list[torch.Tensor] | torch.Tensor, empty: torch.Tensor) -> torch.Tensor:
    """A list state concatenated (after a synchronisation it is already one tensor)."""
    if isinstance(state, torch.Tensor):
        return state
    return torch.cat(state) if state else empty


class CalibrationCallback(Callback):
    """Log selfcal's calibration metrics every validation epoch; optionally fit temperature
    scaling on the validation logits at the end of training.

    The ``LightningModule``'s ``validation_step`` returns ``{"logits": logits, "labels": y}``
    (or ``{"probs": p, "labels": y}``); see the module docstring for the design, what is logged
    and how values are synchronised across processes.

    Parameters
    ----------
    metrics : names among :data:`METRICS` (:data:`DEFAULT_METRICS` by default), logged as
        ``f"{prefix}{name}"``.
    n_bins : number of bins of every binned metric (15).
    adaece_mode : ``"exact"`` (keeps every confidence) or ``"sketch"`` (a fixed-size
        histogram with a certified error bound), as in
        :class:`~selfcal.integrations.torchmetrics.AdaECE`.
    num_classes : the number of classes (the shape of the classwise state); ``None`` reads it
        from the first validation batch.
    prefix : prepended to every logged name (``"val_"``).
    fit_temperature : fit :class:`~selfcal.posthoc.TemperatureScaling` on the last validation
        run's scores when training ends.

    Attributes
    ----------
    history : list of dict
        One entry per validation epoch (sanity checks excluded): ``"epoch"`` and the float64
        value of each metric, under its logged name.
    temperature_scaling : TemperatureScaling or None
        The calibrator fitted at the end of training (``fit_temperature=True``).
    ts_metrics : dict
        ``f"{prefix}ts_temperature"`` and ``f"{prefix}ts_ece"`` once it is fitted.
    """

    def __init__(
        self,
        metrics: Sequence[str] = DEFAULT_METRICS,
        *,
        n_bins: int = 15,
        adaece_mode: str = "exact",
        num_classes: int | None = None,
        prefix: str = "val_",
        fit_temperature: bool = False,
    ) -> None:
        super().__init__()
        if isinstance(metrics, str) or not metrics:
            raise ValueError(f"metrics must be a non-empty sequence of names, got {metrics!r}")
        self.metric_names = tuple(
            check_choice("metrics", KEY_ALIASES.get(name, name), METRICS) for name in metrics
        )
        self.n_bins = check_int("n_bins", n_bins)
        self.adaece_mode = check_choice("adaece_mode", adaece_mode, ADAECE_MODES)
        self.num_classes = check_optional_int("num_classes", num_classes, minimum=2)
        if not isinstance(prefix, str):
            raise ValueError(f"prefix must be a string, got {prefix!r}")
        self.prefix = prefix
        self.fit_temperature = bool(fit_temperature)
        self.history: list[dict[str, float]] = []
        self.temperature_scaling: TemperatureScaling | None = None
        self.ts_metrics: dict[str, float] = {}
        self._metrics: dict[str, TorchMetric] = {}
        self._scores: _ValidationScores | None = None
        self._kind: ScoreKind | None = None

    # ------------------------------------------------------------------ building the metrics
    def _build(self, n_classes: int, device: torch.device) -> None:
        """Create the metrics (and the score store) for ``n_classes`` on ``device``."""
        if self.num_classes is None:
            self.num_classes = n_classes
        factories = {
            "ece": lambda: ECE(self.n_bins),
            "mce": lambda: MCE(self.n_bins),
            "adaece": lambda: AdaECE(self.n_bins, mode=self.adaece_mode),
            "classwise_ece": lambda: ClasswiseECE(n_classes, self.n_bins),
            "brier": Brier,
            "nll": NLL,
            "refinement_loss": RefinementLoss,
            "calibration_loss": CalibrationLoss,
        }
        self._metrics = {name: factories[name]().to(device) for name in self.metric_names}
        if self.fit_temperature:
            self._scores = _ValidationScores(n_classes).to(device)

    def _read_outputs(self, outputs: STEP_OUTPUT) -> tuple[ScoreKind, torch.Tensor, Any]:
        """``(kind, scores, labels)`` from what ``validation_step`` returned."""
        if not isinstance(outputs, Mapping):
            raise ValueError(
                "CalibrationCallback reads the validation predictions from what validation_step "
                'returns: return {"logits": logits, "labels": labels} (or "probs" instead of '
                f'"logits"); got {type(outputs).__name__}'
            )
        given = [key for key in SCORE_KEYS if key in outputs]
        if len(given) != 1 or "labels" not in outputs:
            raise ValueError(
                'validation_step must return a mapping with "labels" and exactly one of "logits" '
                f'or "probs" (selfcal never guesses which); got keys {list(outputs)}'
            )
        kind = given[0]
        if self._kind is not None and kind != self._kind:
            raise ValueError(
                f'validation_step returned "{kind}" after returning "{self._kind}" in an earlier '
                "batch; return the same kind of scores every time"
            )
        scores = outputs[kind]
        if not isinstance(scores, torch.Tensor):
            raise ValueError(f'outputs["{kind}"] must be a torch tensor, got {type(scores)}')
        return kind, scores.detach(), outputs["labels"]

    # ------------------------------------------------------------------ Lightning hooks
    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        for metric in self._metrics.values():
            metric.reset()
        if self._scores is not None:
            self._scores.reset()

    def on_validation_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: STEP_OUTPUT,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if trainer.sanity_checking:
            return
        kind, scores, labels = self._read_outputs(outputs)
        if not self._metrics:  # (N, C) scores, a binary column expanded to two
            n_classes = validate_scores(scores, kind).shape[1]
            self._build(self.num_classes or n_classes, scores.device)
        self._kind = kind
        build = Predictions.from_logits if kind == "logits" else Predictions.from_probs
        pred = build(scores, labels)  # validated once for every metric
        for metric in self._metrics.values():
            metric.update(pred)
        if self._scores is not None:
            self._scores.update(pred.scores, pred.require_labels())

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not self._metrics:
            return
        if not any(metric.update_called for metric in self._metrics.values()):
            return
        values: dict[str, float] = {}
        for name, metric in self._metrics.items():
            key = f"{self.prefix}{name}"
            with warnings.catch_warnings():  # a degenerate TS fit is T = 1, as documented
                warnings.simplefilter("ignore", DegenerateCalibration)
                value = metric.compute().to(torch.float64)
            pl_module.log(
                key,
                value,
                on_step=False,
                on_epoch=True,
                sync_dist=True,
                reduce_fx="max",
                batch_size=1,
                add_dataloader_idx=False,
            )
            values[key] = float(value)
        self.history.append({"epoch": float(trainer.current_epoch), **values})

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._scores is None or self._kind is None:
            return
        with warnings.catch_warnings():  # torchmetrics warns when no batch was seen
            warnings.simplefilter("ignore", UserWarning)
            scores, labels = self._scores.compute()
        if scores.shape[0] == 0:
            return
        scores, labels = scores.clone(), labels.clone()  # ordinary (not inference) tensors
        kind = self._kind
        ts = TemperatureScaling().fit(**{kind: scores}, labels=labels)
        calibrated = ts.predict_proba(**{kind: scores})
        self.temperature_scaling = ts
        self.ts_metrics = {
            f"{self.prefix}ts_temperature": float(ts.temperature_),
            f"{self.prefix}ts_ece": float(ece(probs=calibrated, labels=labels, n_bins=self.n_bins)),
        }
        for logger in trainer.loggers:
            logger.log_metrics(dict(self.ts_metrics), step=trainer.global_step)
