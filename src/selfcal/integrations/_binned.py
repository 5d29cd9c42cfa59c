"""The binned calibration errors of :mod:`selfcal.integrations.torchmetrics` -- :class:`ECE`,
:class:`MCE` and :class:`ClasswiseECE` -- whose states are the additive bin statistics of
selfcal's binning core (:mod:`selfcal.metrics.binning`), summed across processes."""

from __future__ import annotations

from typing import Any

import torch

from selfcal._validation import check_choice, check_int
from selfcal.integrations._metric import _F64, _CalibrationMetric
from selfcal.integrations._sketch import require_samples as _require_samples
from selfcal.metrics.binning import (
    BinStats,
    calibration_error,
    classwise_bins,
    top_label_bins,
    uniform_edges,
)
from selfcal.predictions import Predictions, ScoreKind


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
