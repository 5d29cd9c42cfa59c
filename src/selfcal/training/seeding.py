"""The random streams of a training run, and its batch-transform protocol: one set of rules for
both ways selfcal trains a network, the training loop (:func:`selfcal.training.fit`) and BO4SC's
outer loop (:class:`selfcal.bilevel.BO4SC`).

A run seeded ``seed`` draws from three streams:

* the *global* generators, seeded with ``seed`` inside :func:`torch.random.fork_rng`
  (:func:`seeded_global_rng`), for randomness inside the model (dropout) and a step's own
  initialisation; the caller's RNG state is restored afterwards;
* the *shuffling* stream (:func:`shuffle_generator`), a CPU ``torch.Generator`` seeded with
  ``seed``: the minibatch order;
* the *augmentation* stream (:func:`augmentation_generator`), a ``torch.Generator`` on the
  device of the batches, seeded from :class:`numpy.random.SeedSequence` ``([seed, 1])``: its
  stream is independent of the shuffling stream, so the shuffling is the same with or without
  augmentation. A ``batch_transform(x_batch, generator) -> x_batch`` (:data:`BatchTransform`,
  e.g. :func:`selfcal.data.augment.random_crop_flip`) draws from it, bound by
  :func:`bind_transform`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import numpy as np
import torch

BatchTransform = Callable[[torch.Tensor, torch.Generator], torch.Tensor]
"""``batch_transform(x_batch, generator) -> x_batch``: a training batch's augmentation, drawing
its randomness from ``generator`` (the run's augmentation stream); it must keep the rows."""


@contextlib.contextmanager
def seeded_global_rng(seed: int, device: torch.device) -> Iterator[None]:
    """Seed the global RNG(s) for in-model randomness; restore the caller's state after."""
    devices = list(range(torch.cuda.device_count())) if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def shuffle_generator(seed: int) -> torch.Generator:
    """The shuffling stream of a run seeded ``seed``: a CPU generator seeded with ``seed``."""
    return torch.Generator().manual_seed(seed)


def augmentation_generator(seed: int, device: torch.device) -> torch.Generator:
    """The augmentation stream of a run seeded ``seed`` (see the module doc): a generator on
    ``device`` seeded from ``SeedSequence([seed, 1])``, independent of the shuffling stream."""
    derived = int(np.random.SeedSequence([seed, 1]).generate_state(1, dtype=np.uint64)[0])
    return torch.Generator(device=device).manual_seed(derived)


def bind_transform(
    transform: BatchTransform | None, generator: torch.Generator
) -> Callable[[torch.Tensor], torch.Tensor]:
    """Bind ``transform`` (identity if ``None``) to ``generator`` and check what it returns."""
    if transform is None:
        return lambda batch: batch
    if not callable(transform):
        raise ValueError(f"batch_transform must be callable, got {type(transform).__name__}")

    def augment(batch: torch.Tensor) -> torch.Tensor:
        out = transform(batch, generator)
        if not isinstance(out, torch.Tensor) or out.shape[:1] != batch.shape[:1]:
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(
                f"batch_transform must return a tensor with the batch's {batch.shape[0]} rows, "
                f"got {shape}"
            )
        return out

    return augment
