"""torchmetrics ``Metric`` classes for selfcal's binned calibration errors, NLL and Brier score.

Each class keeps as its state the **additive statistics** that the one-shot selfcal metric is
computed from, all float64, registered with ``add_state(..., dist_reduce_fx="sum")`` so that
torchmetrics' reduction across processes is a plain sum and loses nothing:

* :class:`ECE`, :class:`MCE` -- the top-label :class:`~selfcal.metrics.binning.BinStats` of
  :func:`~selfcal.metrics.binning.top_label_bins` over ``M`` equal-width bins: ``count``,
  ``confidence_sum`` and ``accuracy_sum``, each ``(M,)``;
* :class:`ClasswiseECE` -- the ``(C, M)`` statistics of
  :func:`~selfcal.metrics.binning.classwise_bins`;
* :class:`Brier`, :class:`NLL` -- the sum of the per-sample scores and the number of samples;
* :class:`RefinementLoss`, :class:`CalibrationLoss` -- a recalibrator is fitted on all the
  data, so every sample's scores and label are kept;
* :class:`AdaECE` -- equal-mass edges depend on the ranks of all confidences, so either every
  confidence and correctness is kept (``mode="exact"``, ``dist_reduce_fx="cat"``) or a
  fixed-size histogram of the confidences on a fine grid (``mode="sketch"``, ``"sum"``) from
  which the edges are approximated with a certified error bound (below).

``compute()`` applies :func:`~selfcal.metrics.binning.calibration_error` (or the mean) to the
accumulated statistics, so it equals the one-shot selfcal metric on the concatenation of every
batch of every process: bin counts exactly, sums up to float64 summation order
(``tests/integrations/test_torchmetrics.py``). ``ece``, ``mce`` and ``classwise_ece`` bin
``(e_m, e_{m+1}]`` with bin 0 closed (methods §1.1, §1.2, §1.4), ``adaece`` uses the reference
code's equal-mass edges (methods §1.3), ``nll`` and ``brier`` are those of methods §1.5.

Inputs follow selfcal's contract (:mod:`selfcal.predictions`): the scores are never guessed.
Every class takes ``kind="logits" | "probs"`` at construction, as selfcal's calibrators do: what
a *positional* score tensor holds. Then torchmetrics' calling convention works --
``metric(preds, target)``, ``metric.update(preds, target)`` or ``update(preds=..., target=...)``
-- and so does a positional ``torchmetrics.MetricCollection`` mixing these classes with
torchmetrics' own (which take ``(preds, target)`` too):

>>> import torch
>>> from torchmetrics import MetricCollection
>>> from torchmetrics.classification import MulticlassAccuracy
>>> from selfcal.integrations.torchmetrics import ECE, NLL
>>> logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 3.0]], dtype=torch.float64)
>>> labels = torch.tensor([0, 1, 1, 1])
>>> round(float(ECE(kind="logits")(logits, labels)), 4)
0.1572
>>> accuracy = MulticlassAccuracy(num_classes=2, average="micro")
>>> collection = MetricCollection(
...     {"ece": ECE(kind="logits"), "nll": NLL(kind="logits"), "accuracy": accuracy}
... )
>>> collection.update(logits[:2], labels[:2])
>>> collection.update(logits[2:], labels[2:])
>>> {name: round(float(value), 4) for name, value in collection.compute().items()}
{'accuracy': 0.75, 'ece': 0.1572, 'nll': 0.4505}

Without ``kind`` the scores are named: ``update(logits=z, labels=y)``, ``update(probs=p,
labels=y)``, or a validated :class:`~selfcal.predictions.Predictions` as the one positional
argument (it says what it holds, whatever ``kind`` is); positional scores then raise a
``ValueError``. A ``kind`` is taken as stated: scores passed as logits that look like
probabilities are still read as logits. Every input is checked (a ``ValueError`` names the
problem and the first offending row). Results are float64 0-d tensors on the metric's device;
states live on that device too (``metric.to(device)``), so a device without float64 (Apple
MPS) cannot hold them.

**Where torchmetrics' own ``MulticlassCalibrationError`` differs** (pinned in
``tests/integrations/test_torchmetrics.py``): it bins ``[lower, upper)`` with an extra bin for
a confidence of exactly 1.0, so a confidence on an edge lands one bin higher; it casts
confidences to float32 and sums in float32, which drifts on large inputs; and its state is
every confidence (memory growing with the number of samples) where :class:`ECE`'s is ``3 M``
numbers. Where no confidence sits on an edge or at 1.0, and the inputs are float32-exact, the
two agree to 1e-6 (1e-5 beyond a few hundred samples, from its float32 sums). Its
``BinaryCalibrationError`` scores the positive class, which is :class:`ClasswiseECE` on two
classes, not :class:`ECE`.

**The AdaECE sketch** (``AdaECE(mode="sketch")``): a histogram of the confidences on a fine
grid, from which the equal-mass edges are rounded to the grid, with a certified bound on the
difference from the exact AdaECE (:mod:`selfcal.integrations._sketch`, where the bound is
derived).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, get_args

import torch

from selfcal.integrations import _missing_dependency
from selfcal.integrations._sketch import SKETCH_GRID, adaece_from_sketch

try:
    from torchmetrics import Metric
except ImportError as error:
    raise ImportError(
        _missing_dependency("selfcal.integrations.torchmetrics", "torchmetrics")
    ) from error

from selfcal._validation import check_choice, check_int
from selfcal.integrations._sketch import require_samples as _require_samples
from selfcal.metrics.binning import (
    BinStats,
    bin_statistics,
    calibration_error,
    classwise_bins,
    confidence_bins,
    top_label_bins,
    uniform_edges,
)
from selfcal.metrics.scores import brier, nll
from selfcal.predictions import ArrayLike, Predictions, ScoreKind, as_predictions

__all__ = [
    "ADAECE_MODES",
    "ECE",
    "MCE",
    "NLL",
    "SKETCH_GRID",
    "AdaECE",
    "Brier",
    "CalibrationLoss",
    "ClasswiseECE",
    "RefinementLoss",
    "adaece_from_sketch",
]

ADAECE_MODES = ("exact", "sketch")
"""``mode`` of :class:`AdaECE`: keep every confidence, or a fixed-size histogram of them."""

_F64 = torch.float64
_KINDS: tuple[ScoreKind, ...] = get_args(ScoreKind)


class _CalibrationMetric(Metric):
    """What every class here shares: the input contract, float64 states, no gradients.

    ``kind`` (``"logits"``, ``"probs"`` or ``None``) is what a positional score tensor holds.
    Subclasses implement ``_accumulate(pred)`` and ``compute()``."""

    is_differentiable = False
    higher_is_better = False
    full_state_update = False
    plot_lower_bound = 0.0

    def __init__(self, *, kind: ScoreKind | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kind = None if kind is None else check_choice("kind", kind, _KINDS)

    def update(
        self,
        preds: Predictions | ArrayLike | None = None,
        target: ArrayLike | None = None,
        *,
        logits: ArrayLike | None = None,
        probs: ArrayLike | None = None,
        labels: ArrayLike | None = None,
    ) -> None:
        """Add one batch: ``update(preds, target)`` (torchmetrics' names; ``preds`` read as
        this metric's ``kind``), ``update(logits=z, labels=y)``, ``update(probs=p, labels=y)``
        or ``update(pred)`` with a validated :class:`~selfcal.predictions.Predictions`
        (checked as every selfcal input is; the scores are never guessed)."""
        pred = self._predictions(preds, target, logits, probs, labels)
        with torch.no_grad():
            self._accumulate(pred)

    def _predictions(
        self,
        preds: Predictions | ArrayLike | None,
        target: ArrayLike | None,
        logits: ArrayLike | None,
        probs: ArrayLike | None,
        labels: ArrayLike | None,
    ) -> Predictions:
        """Resolve :meth:`update`'s arguments into validated predictions."""
        if target is not None and labels is not None:
            raise ValueError("pass the labels once: positionally / as target=, or as labels=")
        labels = target if labels is None else labels
        if preds is None or isinstance(preds, Predictions):
            return as_predictions(preds, labels=labels, logits=logits, probs=probs)
        if logits is not None or probs is not None:
            raise ValueError(
                "pass the scores once: positionally / as preds= (read as the metric's kind), "
                "or as logits=... / probs=..."
            )
        if self.kind is None:
            raise ValueError(
                f"{type(self).__name__} got scores without a kind: construct it with "
                "kind='logits' or kind='probs' (selfcal never guesses), or pass logits=... / "
                "probs=... by name"
            )
        return as_predictions(labels=labels, **{self.kind: preds})

    def _accumulate(self, pred: Predictions) -> None:
        raise NotImplementedError

    def _add(self, name: str, delta: torch.Tensor) -> None:
        """``state += delta`` (out of place: states may be inference tensors under Lightning)."""
        state = getattr(self, name)
        setattr(self, name, state + delta.detach().to(device=state.device, dtype=_F64))


# ----------------------------------------------------------------------- binned errors
class _BinnedMetric(_CalibrationMetric):
    """Bin statistics ``count``, ``confidence_sum``, ``accuracy_sum`` of shape ``shape``
    (float64 sum states), added by :meth:`_bins` for each batch."""

    count: torch.Tensor
    confidence_sum: torch.Tensor
    accuracy_sum: torch.Tensor

    def __init__(self, n_bins: int, shape: tuple[int, ...], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.n_bins = n_bins
        for name in ("count", "confidence_sum", "accuracy_sum"):
            self.add_state(name, torch.zeros(shape, dtype=_F64), dist_reduce_fx="sum")

    def _bins(self, pred: Predictions) -> BinStats:
        raise NotImplementedError

    def _accumulate(self, pred: Predictions) -> None:
        stats = self._bins(pred)
        self._add("count", stats.count)
        self._add("confidence_sum", stats.confidence_sum)
        self._add("accuracy_sum", stats.accuracy_sum)

    @property
    def bin_stats(self) -> BinStats:
        """The accumulated (local, unsynchronised) bin statistics."""
        edges = uniform_edges(self.n_bins, self.count.device)
        return BinStats(edges, self.count, self.confidence_sum, self.accuracy_sum)


class _TopLabelBins(_BinnedMetric):
    """Top-label bin statistics over ``n_bins`` equal-width bins."""

    def __init__(self, n_bins: int = 15, *, kind: ScoreKind | None = None, **kwargs: Any) -> None:
        n_bins = check_int("n_bins", n_bins)
        super().__init__(n_bins, (n_bins,), kind=kind, **kwargs)

    def _bins(self, pred: Predictions) -> BinStats:
        return top_label_bins(pred, self.n_bins)

    def _error(self, norm: str) -> torch.Tensor:
        _require_samples(self.count.sum())
        return calibration_error(self.bin_stats, norm)


class ECE(_TopLabelBins):
    """Expected calibration error with equal-width bins, accumulated over batches and processes.

    ``ECE = sum_m (|B_m| / N) |acc(B_m) - conf(B_m)|`` over ``M = n_bins`` bins ``((m-1)/M,
    m/M]`` (bin 0 closed at 0), as :func:`selfcal.metrics.ece` (methods §1.1); ``norm="l2"``
    gives the RMS calibration error and ``norm="max"`` the MCE. The state is the top-label bin
    statistics (``count``, ``confidence_sum``, ``accuracy_sum``, each ``(M,)`` float64, summed
    across processes), so ``compute()`` equals ``selfcal.metrics.ece`` on all the data.

    Example: the four predictions of :func:`selfcal.metrics.ece`'s example, in two batches,
    give its value; 1,000 logits in four batches, positional (read as ``kind="logits"``), give
    the one-shot ECE:

    >>> import numpy as np
    >>> import torch
    >>> from selfcal.integrations.torchmetrics import ECE
    >>> from selfcal.metrics import ece
    >>> metric = ECE(n_bins=15)
    >>> metric.update(probs=torch.tensor([[0.9, 0.1], [0.8, 0.2]]), labels=torch.tensor([0, 1]))
    >>> metric.update(probs=torch.tensor([[0.3, 0.7], [0.6, 0.4]]), labels=torch.tensor([1, 0]))
    >>> round(float(metric.compute()), 4)
    0.4
    >>> metric = ECE(n_bins=15, kind="logits")
    >>> rng = np.random.default_rng(0)
    >>> logits, labels = 3 * rng.normal(size=(1000, 4)), rng.integers(0, 4, 1000)
    >>> for z, y in zip(np.array_split(logits, 4), np.array_split(labels, 4)):
    ...     metric.update(torch.from_numpy(z), torch.from_numpy(y))
    >>> value = metric.compute()
    >>> value.dtype, round(float(value), 4)
    (torch.float64, 0.5204)
    >>> abs(float(value) - ece(logits=logits, labels=labels)) < 1e-12
    True
    """

    def __init__(
        self, n_bins: int = 15, norm: str = "l1", *, kind: ScoreKind | None = None, **kwargs: Any
    ) -> None:
        super().__init__(n_bins, kind=kind, **kwargs)
        self.norm = check_choice("norm", norm, ("l1", "l2", "max"))

    def compute(self) -> torch.Tensor:
        """``sum_m (count_m / N) |acc_m - conf_m|`` over the bins of every batch and process,
        with ``acc_m = accuracy_sum_m / count_m``, ``conf_m = confidence_sum_m / count_m`` and
        ``N = sum_m count_m`` (``norm="l2"``: ``sqrt(sum_m (count_m / N) (acc_m -
        conf_m)^2)``; ``norm="max"``: ``max_m |acc_m - conf_m|`` over the non-empty bins). A
        ``ValueError`` if no sample has been added."""
        return self._error(self.norm)


class MCE(_TopLabelBins):
    """Maximum calibration error ``max_m |acc(B_m) - conf(B_m)|`` over the non-empty
    equal-width bins, accumulated over batches and processes (:func:`selfcal.metrics.mce`,
    methods §1.2). Same state as :class:`ECE`."""

    def compute(self) -> torch.Tensor:
        """``max_m |accuracy_sum_m - confidence_sum_m| / count_m`` over the bins with
        ``count_m > 0``, from every batch and process. A ``ValueError`` if no sample has been
        added."""
        return self._error("max")


class ClasswiseECE(_BinnedMetric):
    """Classwise ECE, accumulated over batches and processes: for each class ``j``, bin
    ``p_{.j}`` into equal-width bins against ``1[y = j]``; ``(1/C) sum_j sum_b (|B_b|/N)
    |acc_jb - conf_jb|`` (:func:`selfcal.metrics.classwise_ece`, methods §1.4; class
    probabilities of exactly 0 are counted in bin 0).

    ``n_classes`` (or torchmetrics' name ``num_classes``; both given must agree) fixes the
    state's shape, ``(C, M)`` float64 ``count``, ``confidence_sum`` and ``accuracy_sum``
    (summed across processes); a batch with another number of score columns is a
    ``ValueError``. It is **required**, not read from the first batch: a state created at the
    first ``update`` would be missing on a process that receives no batch (the collective sum
    would not match), from a ``load_state_dict`` before the first batch, and from the state
    bookkeeping of torchmetrics' ``forward``. Without it the constructor raises ``ValueError:
    ClasswiseECE needs n_classes=C ...``."""

    def __init__(
        self,
        n_classes: int | None = None,
        n_bins: int = 15,
        norm: str = "l1",
        *,
        num_classes: int | None = None,
        kind: ScoreKind | None = None,
        **kwargs: Any,
    ) -> None:
        classes = _class_count(n_classes, num_classes)
        n_bins = check_int("n_bins", n_bins)
        super().__init__(n_bins, (classes, n_bins), kind=kind, **kwargs)
        self.n_classes = classes
        self.norm = check_choice("norm", norm, ("l1", "l2", "max"))

    def _bins(self, pred: Predictions) -> BinStats:
        if pred.n_classes != self.n_classes:
            raise ValueError(
                f"the scores have {pred.n_classes} classes but n_classes={self.n_classes}"
            )
        return classwise_bins(pred, self.n_bins)

    def compute(self) -> torch.Tensor:
        """``(1/C) sum_j sum_m (count_jm / N) |acc_jm - conf_jm|`` over the bins of every
        batch and process, with ``acc_jm = accuracy_sum_jm / count_jm`` (the fraction of bin
        ``m`` of class ``j`` whose label is ``j``), ``conf_jm = confidence_sum_jm / count_jm``
        and ``N = sum_m count_jm`` (``norm="l2"`` / ``"max"``: each class's RMS / maximum
        gap, averaged over the classes). A ``ValueError`` if no sample has been added."""
        _require_samples(self.count[0].sum())
        return calibration_error(self.bin_stats, self.norm).mean(-1)


def _class_count(n_classes: int | None, num_classes: int | None) -> int:
    """``n_classes``, or its torchmetrics alias ``num_classes`` (both given must agree)."""
    if n_classes is None and num_classes is None:
        raise ValueError(
            "ClasswiseECE needs n_classes=C (the number of score columns; torchmetrics' "
            "num_classes= is accepted too): its (C, M) state must exist before the first batch"
        )
    if n_classes is None:
        return check_int("num_classes", num_classes, minimum=2)
    if num_classes is not None and num_classes != n_classes:
        raise ValueError(
            f"n_classes={n_classes!r} and num_classes={num_classes!r} disagree; pass one "
            "(num_classes is torchmetrics' name for n_classes)"
        )
    return check_int("n_classes", n_classes, minimum=2)


# ----------------------------------------------------------------------- AdaECE
class AdaECE(_CalibrationMetric):
    """Adaptive (equal-mass) ECE, accumulated over batches and processes
    (:func:`selfcal.metrics.adaece`, methods §1.3): the ECE sum over bins whose edges are
    equal-mass quantiles of all the confidences, every sample counted once.

    The edges depend on the ranks of all confidences, so there are two modes:

    * ``mode="exact"`` (default) keeps every top-label confidence and correctness (two float64
      numbers per sample, list states gathered with ``dist_reduce_fx="cat"``); ``compute()``
      equals ``selfcal.metrics.adaece`` on all the data (same edges, sums up to float64
      summation order);
    * ``mode="sketch"`` keeps a histogram of the confidences on ``grid_size`` equal cells with
      each cell's count, confidence sum and number of correct predictions (``3 grid_size``
      float64 numbers, summed across processes); the equal-mass edges are rounded up to the
      grid (see the module docstring) and :meth:`error_bound` gives a certified bound on
      ``|sketch - exact|`` (L1 norm only).
    """

    confidence: list[torch.Tensor]
    correct: list[torch.Tensor]
    cell_count: torch.Tensor
    cell_confidence_sum: torch.Tensor
    cell_accuracy_sum: torch.Tensor

    def __init__(
        self,
        n_bins: int = 15,
        norm: str = "l1",
        mode: str = "exact",
        grid_size: int = SKETCH_GRID,
        *,
        kind: ScoreKind | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(kind=kind, **kwargs)
        self.n_bins = check_int("n_bins", n_bins)
        self.norm = check_choice("norm", norm, ("l1", "l2"))
        self.mode = check_choice("mode", mode, ADAECE_MODES)
        self.grid_size = check_int("grid_size", grid_size)
        if self.mode == "exact":
            self.add_state("confidence", [], dist_reduce_fx="cat")
            self.add_state("correct", [], dist_reduce_fx="cat")
            return
        if self.norm != "l1":
            raise ValueError(
                "mode='sketch' needs norm='l1' (its error bound is derived for the L1 norm); "
                f"got norm={norm!r}"
            )
        for name in ("cell_count", "cell_confidence_sum", "cell_accuracy_sum"):
            self.add_state(name, torch.zeros(self.grid_size, dtype=_F64), dist_reduce_fx="sum")

    def _accumulate(self, pred: Predictions) -> None:
        if self.mode == "exact":
            self.confidence.append(pred.confidence.detach().to(_F64))
            self.correct.append(pred.correct.to(_F64))
            return
        edges = uniform_edges(self.grid_size, pred.device)
        cells = bin_statistics(pred.confidence.detach(), pred.correct, edges)
        self._add("cell_count", cells.count)
        self._add("cell_confidence_sum", cells.confidence_sum)
        self._add("cell_accuracy_sum", cells.accuracy_sum)

    @property
    def sketch(self) -> BinStats:
        """The accumulated (local, unsynchronised) grid cells of ``mode="sketch"``."""
        if self.mode != "sketch":
            raise ValueError("only mode='sketch' keeps a histogram of the confidences")
        edges = uniform_edges(self.grid_size, self.cell_count.device)
        return BinStats(edges, self.cell_count, self.cell_confidence_sum, self.cell_accuracy_sum)

    def compute(self) -> torch.Tensor:
        """``sum_m (|B_m| / N) |acc(B_m) - conf(B_m)|`` (``norm="l2"``: ``sqrt(sum_m (|B_m| /
        N) (acc(B_m) - conf(B_m))^2)``) over ``M = n_bins`` equal-mass bins of the top-label
        confidences of every batch and process; ``mode="exact"``: the edges of
        :func:`selfcal.metrics.adaece` from every confidence; ``mode="sketch"``: those edges
        rounded up to the grid (:func:`adaece_from_sketch`; :meth:`error_bound` bounds the
        difference). A ``ValueError`` if no sample has been added."""
        if self.mode == "sketch":
            return adaece_from_sketch(self.sketch, self.n_bins)[0]
        conf, correct = _cat(self.confidence), _cat(self.correct)
        _require_samples(torch.tensor(conf.shape[0]))
        return calibration_error(confidence_bins(conf, correct, self.n_bins, "quantile"), self.norm)

    def sync(
        self,
        dist_sync_fn: Callable[..., Any] | None = None,
        process_group: Any | None = None,
        should_sync: bool = True,
        distributed_available: Callable[..., Any] | None = None,
    ) -> None:
        """torchmetrics' synchronisation, after giving an empty list state (a process that
        received no batch) an empty float64 tensor: torchmetrics would gather an empty tensor
        of its default dtype (float32) there, and the gather needs one dtype on every
        process."""
        if self.mode == "exact":
            for state in (self.confidence, self.correct):
                if isinstance(state, list) and not state:
                    state.append(torch.empty(0, dtype=_F64, device=self.device))
        super().sync(dist_sync_fn, process_group, should_sync, distributed_available)

    def error_bound(self) -> torch.Tensor:
        """A bound on ``|compute() - exact AdaECE|``: 0 in ``mode="exact"``; in
        ``mode="sketch"`` the certified bound of the module docstring, from the sketch of every
        process (synchronised as ``compute()`` is)."""
        if self.mode == "exact":
            return torch.zeros((), dtype=_F64, device=self.device)
        with self.sync_context(dist_sync_fn=self.dist_sync_fn, should_sync=self.sync_on_compute):
            return adaece_from_sketch(self.sketch, self.n_bins)[1]


def _cat(state: list[torch.Tensor] | torch.Tensor) -> torch.Tensor:
    """A list state, concatenated (after a synchronisation it is already one tensor)."""
    if isinstance(state, torch.Tensor):
        return state.to(_F64)
    return torch.cat(state).to(_F64) if state else torch.empty(0, dtype=_F64)


# ----------------------------------------------------------------------- proper scores
class _MeanScore(_CalibrationMetric):
    """A per-sample score's sum and the number of samples (float64 sum states)."""

    higher_is_better = False
    total: torch.Tensor
    count: torch.Tensor

    def __init__(self, *, kind: ScoreKind | None = None, **kwargs: Any) -> None:
        super().__init__(kind=kind, **kwargs)
        self.add_state("total", torch.zeros((), dtype=_F64), dist_reduce_fx="sum")
        self.add_state("count", torch.zeros((), dtype=_F64), dist_reduce_fx="sum")

    def _batch_mean(self, pred: Predictions) -> torch.Tensor:
        raise NotImplementedError

    def _accumulate(self, pred: Predictions) -> None:
        n = pred.n_samples
        self._add("total", self._batch_mean(pred) * n)
        self._add("count", torch.tensor(float(n), dtype=_F64))

    def compute(self) -> torch.Tensor:
        """``total / count = (1/N) sum_i s_i`` over the ``N`` samples of every batch and
        process, with ``s_i = sum_k (p_ik - 1[y_i = k])^2`` (:class:`Brier`) or ``s_i = -log
        p_{i, y_i}`` (:class:`NLL`). A ``ValueError`` if no sample has been added."""
        _require_samples(self.count)
        return self.total / self.count


class Brier(_MeanScore):
    """Multi-class Brier score ``(1/N) sum_i sum_k (p_ik - 1[y_i = k])^2``, accumulated over
    batches and processes (:func:`selfcal.metrics.brier`, methods §1.5: summed over classes,
    so twice scikit-learn's ``brier_score_loss`` on a binary problem). State: the sum of the
    per-sample scores and the number of samples (float64, summed across processes)."""

    def _batch_mean(self, pred: Predictions) -> torch.Tensor:
        return brier.core(pred)


class NLL(_MeanScore):
    """Negative log-likelihood ``-(1/N) sum_i log p_{i, y_i}`` (natural log), accumulated over
    batches and processes (:func:`selfcal.metrics.nll`, methods §1.5; a zero true-class
    probability given as ``probs=`` is clamped to the smallest float64). State: the sum of the
    per-sample losses and the number of samples (float64, summed across processes)."""

    def _batch_mean(self, pred: Predictions) -> torch.Tensor:
        return nll.core(pred)


# ------------------------------------------------------------- refinement / calibration loss
class RefinementLoss(_CalibrationMetric):
    """Refinement loss ``L(g(p), y)`` of every batch and process together
    (:func:`selfcal.metrics.refinement_loss`: the ``loss`` after ``recalibrator`` ``g``, fitted
    on the same rows or cross-fitted over ``folds``; Berta et al., 2025). The recalibrator is
    fitted on all the data, so every sample's scores (float64, the kind it was given in) and
    label are kept (list states gathered with ``dist_reduce_fx="cat"``); one kind for all
    batches. ``compute()`` equals the selfcal function on all the data."""

    scores: list[torch.Tensor]
    labels: list[torch.Tensor]
    _part = "refinement"

    def __init__(
        self,
        loss: str = "nll",
        recalibrator: str = "ts",
        folds: int | None = None,
        seed: int = 0,
        *,
        kind: ScoreKind | None = None,
        **kwargs: Any,
    ) -> None:
        from selfcal.metrics.refinement import LOSSES
        from selfcal.posthoc import build_calibrator

        super().__init__(kind=kind, **kwargs)
        self.loss = check_choice("loss", loss, tuple(LOSSES))
        build_calibrator(recalibrator)  # an unknown name is a ValueError naming the known ones
        self.recalibrator = recalibrator
        self.folds = None if folds is None else check_int("folds", folds, minimum=2)
        self.seed = check_int("seed", seed, minimum=0)
        self.scores_kind: str | None = None
        self.add_state("scores", [], dist_reduce_fx="cat")
        self.add_state("labels", [], dist_reduce_fx="cat")

    def _accumulate(self, pred: Predictions) -> None:
        if self.scores_kind not in (None, pred.kind):
            raise ValueError(
                f"{type(self).__name__} got {pred.kind} after {self.scores_kind}: one kind of "
                "scores for all batches"
            )
        self.scores_kind = pred.kind
        self.scores.append(pred.scores.detach().to(_F64))
        self.labels.append(pred.require_labels().to(_F64))

    def reset(self) -> None:
        super().reset()
        self.scores_kind = None

    def compute(self) -> torch.Tensor:
        from selfcal.metrics.refinement import calibration_loss, refinement_loss

        scores, labels = _cat(self.scores), _cat(self.labels)
        _require_samples(torch.tensor(labels.shape[0]))
        scores = scores.reshape(labels.shape[0], -1)
        if self.scores_kind == "probs":
            pred = Predictions.from_probs(scores, labels.long())
        else:
            pred = Predictions.from_logits(scores, labels.long())
        fn = refinement_loss if self._part == "refinement" else calibration_loss
        options = {"recalibrator": self.recalibrator, "folds": self.folds, "seed": self.seed}
        return fn.core(pred, loss=self.loss, **options)


class CalibrationLoss(RefinementLoss):
    """Calibration loss ``L(p, y) - L(g(p), y)`` of every batch and process together
    (:func:`selfcal.metrics.calibration_loss`): what the recalibrator takes off the loss.
    Options and states as :class:`RefinementLoss`."""

    _part = "calibration"
