"""What minibatch BO4SC needs around its functional core: training rows from tensors or a
map-style ``Dataset``, epochs of shuffled minibatches, a record of the weight table whose
size does not grow with the number of rows times the number of iterations, and the
batch-transform forms it accepts (:func:`as_batch_transform`)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset, default_collate

from selfcal._inputs import as_features, as_labels
from selfcal.models.inference import predict_logits
from selfcal.predictions import ArrayLike
from selfcal.training.seeding import BatchTransform

QUANTILE_LEVELS = (0.0, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 1.0)
"""The weight-table quantiles recorded after every outer iteration."""
QUANTILE_RESOLUTION = 1000
"""Recorded quantiles are rounded down to a multiple of ``1 / QUANTILE_RESOLUTION``."""


class Rows:
    """Rows ``(x_i, y_i)`` of a training or validation set, fetched by index: from tensors
    (``x[idx]``) or from a map-style ``Dataset`` whose items are ``(x, y)`` pairs (collated
    with ``default_collate``). Batches are moved to ``device`` / ``dtype``; labels are checked
    against ``n_classes`` (a dataset's batch by batch, as they are read)."""

    def __init__(self, x: Any, y: Any, name: str) -> None:
        self.x, self.y, self.name = x, y, name
        self.is_dataset = isinstance(x, Dataset)
        self.n_classes: int | None = None

    def __len__(self) -> int:
        return len(self.x)

    def take(
        self, idx: torch.Tensor, device: torch.device, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Features and labels of rows ``idx`` (1-D), on ``device``."""
        if self.is_dataset:
            x, y = default_collate([self._item(int(i)) for i in idx])
        else:
            x, y = self.x[idx.to(self.x.device)], self.y[idx.to(self.y.device)]
        x = torch.as_tensor(x).to(device=device, dtype=dtype)
        if self.is_dataset:  # the one feature and label rules, batch by batch as rows are read
            x = as_features(x, f"{self.name} x")
            assert self.n_classes is not None, "n_classes is set before any row is taken"
            y = as_labels(y, x.shape[0], self.n_classes, device=device, name=f"{self.name} labels")
            return x, y.values
        return x, torch.as_tensor(y).to(device)

    def features(self, count: int, like: torch.Tensor) -> torch.Tensor:
        """The features of the first ``count`` rows (to probe the model's output shape)."""
        if self.is_dataset:
            x = default_collate([self._item(i)[0] for i in range(count)])
        else:
            x = self.x[:count]
        return torch.as_tensor(x).to(device=like.device, dtype=like.dtype)

    def _item(self, i: int) -> tuple[Any, Any]:
        item = self.x[i]
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ValueError(
                f"{self.name}: a Dataset item must be an (x, y) pair, got {type(item).__name__}"
            )
        return item[0], item[1]


class EpochSampler:
    """Minibatches of ``batch_size`` row indices drawn epoch by epoch: each epoch is a fresh
    permutation of the ``n`` rows from ``generator``, cut into full batches (the last
    ``n mod batch_size`` rows of a permutation are skipped, so every batch has the same size
    and a row is drawn at most once an epoch)."""

    def __init__(self, n: int, batch_size: int, generator: torch.Generator) -> None:
        self.n, self.batch_size, self.generator = n, batch_size, generator
        self._order = torch.empty(0, dtype=torch.long)
        self._next = 0

    def draw(self, count: int) -> torch.Tensor:
        """The next ``count`` batches, ``[count, batch_size]``."""
        batches = []
        for _ in range(count):
            if self._next + self.batch_size > len(self._order):
                self._order = torch.randperm(self.n, generator=self.generator)
                self._next = 0
            batches.append(self._order[self._next : self._next + self.batch_size])
            self._next += self.batch_size
        return torch.stack(batches)


class WeightRecord:
    """The weight history kept during a fit: the weights of a fixed sample of ``rows`` after
    every iteration, and the :data:`QUANTILE_LEVELS` quantiles of the whole table (the
    quantile ``q`` of ``N`` weights is the ``max(1, ceil(q N))``-th smallest).

    With weights clipped to ``[0, 1]`` the quantiles come from a histogram of the table in
    ``QUANTILE_RESOLUTION`` bins updated only at the rows that changed, so a record costs
    ``O(changed rows)``, whatever the table's length (each quantile is the exact one rounded
    down to a multiple of ``1 / QUANTILE_RESOLUTION``; 0 and 1 are exact). Unclipped weights
    have no bounded range: their quantiles are computed from the whole table (``O(N log N)``
    an iteration)."""

    def __init__(self, weights: torch.Tensor, rows: torch.Tensor, clipped: bool) -> None:
        self.rows, self.clipped = rows, clipped
        self.levels = torch.tensor(QUANTILE_LEVELS, dtype=torch.float64)
        self.counts = torch.zeros(QUANTILE_RESOLUTION + 1, dtype=torch.long)
        if clipped:
            bins = self._bins(weights)
            self.counts.index_add_(0, bins, torch.ones_like(bins))
        self.history = [weights[rows].detach().cpu()]
        self.quantiles = [self._quantiles(weights)]

    def _bins(self, values: torch.Tensor) -> torch.Tensor:
        scaled = torch.floor(values.detach().double().cpu() * QUANTILE_RESOLUTION)
        return scaled.clamp(0, QUANTILE_RESOLUTION).long()

    def record(
        self,
        weights: torch.Tensor,
        changed: torch.Tensor | None = None,
        before: torch.Tensor | None = None,
    ) -> None:
        """After an iteration: ``before`` holds the old weights of rows ``changed`` (``None``:
        every row may have changed, ``before`` is the old table)."""
        if self.clipped and before is not None:
            after = weights if changed is None else weights[changed]
            old, new = self._bins(before), self._bins(after)
            self.counts.index_add_(0, old, -torch.ones_like(old))
            self.counts.index_add_(0, new, torch.ones_like(new))
        self.history.append(weights[self.rows].detach().cpu())
        self.quantiles.append(self._quantiles(weights))

    def _quantiles(self, weights: torch.Tensor) -> torch.Tensor:
        ranks = torch.clamp(torch.ceil(self.levels * weights.numel()), min=1).long()
        if not self.clipped:
            return torch.sort(weights.detach().double().cpu()).values[ranks - 1]
        cumulative = torch.cumsum(self.counts, 0)
        return torch.searchsorted(cumulative, ranks).double() / QUANTILE_RESOLUTION


# ----------------------------------------------------------------------------- input checks
def as_pair(data: Any, name: str) -> tuple[Any, Any]:
    """``(x, y)`` from a pair (tuple or list of two)."""
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise ValueError(f"{name} must be a pair (x, y) or a Dataset, got {type(data).__name__}")
    return data[0], data[1]


def model_classes(model: nn.Module, x: torch.Tensor) -> int:
    """The model's number of classes, from its eval-mode output on a few rows."""
    logits = predict_logits(model, x, batch_size=None)
    if logits.ndim != 2 or logits.shape[0] != x.shape[0] or logits.shape[1] < 2:
        raise ValueError(
            f"the model must return logits of shape (N, C) with C >= 2, got "
            f"{tuple(logits.shape)} for {x.shape[0]} rows"
        )
    return int(logits.shape[1])


def feature_rows(x: ArrayLike, name: str, like: torch.Tensor) -> torch.Tensor:
    """``x`` as a tensor of the model's dtype (on its own device), with rows and finite: the one
    feature rule (:func:`selfcal._inputs.as_features`)."""
    return as_features(x, name, dtype=like.dtype)


def as_batch_transform(transform: Any) -> BatchTransform | None:
    """``transform`` in the training loop's form ``(x, generator) -> x``
    (:data:`~selfcal.training.seeding.BatchTransform`). A callable that cannot take two
    positional arguments is the older one-argument form ``transform(x) -> x``: it is wrapped to
    ignore the generator, and so draws from the global generators as it always did. ``None``
    and anything not callable are returned as they are (the binding rejects the latter)."""
    if transform is None or not callable(transform):
        return transform
    try:
        signature = inspect.signature(transform)
    except (TypeError, ValueError):  # no signature to read (a builtin): the loop's form
        return transform
    try:
        signature.bind(None, None)
    except TypeError:
        one_argument: Callable[[torch.Tensor], torch.Tensor] = transform
        return lambda x, generator: one_argument(x)
    return transform
