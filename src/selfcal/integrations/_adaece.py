"""The adaptive (equal-mass) ECE of :mod:`selfcal.integrations.torchmetrics`, :class:`AdaECE`:
every confidence kept (``mode="exact"``) or a histogram of them on a fine grid with a
certified error bound (``mode="sketch"``, :mod:`selfcal.integrations._sketch`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from selfcal._validation import check_choice, check_int
from selfcal.integrations._metric import _F64, _CalibrationMetric, _cat
from selfcal.integrations._sketch import SKETCH_GRID, adaece_from_sketch
from selfcal.integrations._sketch import require_samples as _require_samples
from selfcal.metrics.binning import (
    BinStats,
    bin_statistics,
    calibration_error,
    confidence_bins,
    uniform_edges,
)
from selfcal.predictions import Predictions, ScoreKind

ADAECE_MODES = ("exact", "sketch")
"""``mode`` of :class:`AdaECE`: keep every confidence, or a fixed-size histogram of them."""


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
      grid (see the docstring of :mod:`selfcal.integrations.torchmetrics`) and
      :meth:`error_bound` gives a certified bound on ``|sketch - exact|`` (L1 norm only).
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
        ``mode="sketch"`` the certified bound of the docstring of
        :mod:`selfcal.integrations.torchmetrics`, from the sketch of every process
        (synchronised as ``compute()`` is)."""
        if self.mode == "exact":
            return torch.zeros((), dtype=_F64, device=self.device)
        with self.sync_context(dist_sync_fn=self.dist_sync_fn, should_sync=self.sync_on_compute):
            return adaece_from_sketch(self.sketch, self.n_bins)[1]
