"""Run a model over data: :func:`predict_logits`, the one function every path of selfcal uses
to turn inputs into logits (the training loop's validation pass, checkpoints, BO4SC, the
pipeline and the studies).

What it guarantees, so callers need not: evaluation mode (dropout off, batch-norm running
statistics) restored to the model's mode afterwards even on error; no autograd graph; bounded
memory, ``batch_size`` rows at a time, so a validation split of an image model does not run out
of memory; inputs moved to the model's device, the logits on that device or ``out_device``.

Chunking moves no number at the default batch size: each row's eval-mode output depends on
that row only, and on these CPUs the logits of the MLPs and CNNs of the studies are
bit-identical whether the rows run in one batch or in chunks whose size is a multiple of 4 (the
CPU kernels' row blocking; other sizes can move the last bit of a row:
``tests/models/test_inference.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from selfcal._validation import check_optional_int

PREDICT_BATCH = 1000
"""Rows per forward pass by default: a CIFAR ResNet-18 needs about 1 GB of activations for
1,000 rows in evaluation mode. A multiple of 4, so chunking moves no number (see above); the
checkpoints scored validation sets in chunks of 1,000 rows before this function existed."""

Forward = Callable[[nn.Module, torch.Tensor], torch.Tensor]


def predict_logits(
    model: nn.Module,
    x: Any,
    batch_size: int | None = PREDICT_BATCH,
    *,
    params: Mapping[str, torch.Tensor] | None = None,
    forward: Forward | None = None,
    out_device: torch.device | str | None = None,
) -> torch.Tensor:
    """``model(x)`` in eval mode without gradients, ``batch_size`` rows at a time (``None``:
        all rows at once).

        ``params``: evaluate ``functional_call(model, params, (chunk,))`` instead -- a snapshot of
        the parameters, without loading it into the model. ``forward``: ``forward(model, chunk)``
        instead of ``model(chunk)`` (e.g. a model's features). Rows move to the device of the
        model's first parameter, or of ``params`` when given -- the model may then be a template on
    the ``meta`` device (``non_blocking``: asynchronous from pinned memory); each chunk's
        output moves to ``out_device`` (default: stays where it was computed) before the chunks
        are concatenated, so a GPU holds one chunk of logits at a time when ``out_device="cpu"``.
        The model's train/eval mode is restored afterwards."""
    x = as_tensor(x, "x")
    if x.ndim < 1 or x.shape[0] == 0:
        raise ValueError(f"x must have at least one row, got shape {tuple(x.shape)}")
    check_optional_int("batch_size", batch_size, minimum=1)
    source = params.values() if params else model.parameters()  # a template may live on "meta"
    device = next((p.device for p in source), x.device)
    run = _forward_of(model, params, forward)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            chunks = [x] if batch_size is None else x.split(batch_size)
            outs = [run(c.to(device, non_blocking=True)) for c in chunks]
            if out_device is not None:
                outs = [o.to(out_device) for o in outs]
            return outs[0] if len(outs) == 1 else torch.cat(outs)
    finally:
        model.train(was_training)


def _forward_of(
    model: nn.Module, params: Mapping[str, torch.Tensor] | None, forward: Forward | None
) -> Callable[[torch.Tensor], torch.Tensor]:
    if params is not None and forward is not None:
        raise ValueError("give params or forward, not both")
    if params is not None:
        snapshot = dict(params)
        return lambda chunk: torch.func.functional_call(model, snapshot, (chunk,))
    if forward is not None:
        return lambda chunk: forward(model, chunk)
    return model


def as_tensor(value: Any, name: str) -> torch.Tensor:
    """``value`` as a tensor (a tensor as it is); a one-line error naming ``name`` otherwise."""
    if isinstance(value, torch.Tensor):
        return value
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ValueError(f"{name} must be a tensor or array, got {type(value).__name__}") from err
