"""Stateless (``torch.func``) views of a model, for training many models at once.

``stack_models`` turns M models of one architecture into dictionaries of stacked tensors
(leading dimension M); ``functional_logits`` evaluates a model with given tensors; and
``batched_logits`` maps it over the stack with :func:`torch.func.vmap`, so M seeds (or M
inner problems of a bilevel method) run as one batched computation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import torch
from torch import nn

Tensors = dict[str, torch.Tensor]


def stack_models(models: Sequence[nn.Module]) -> tuple[Tensors, Tensors]:
    """``(params, buffers)``: each entry stacks the models' tensors along a new dim 0.

    Wraps :func:`torch.func.stack_module_state`; the stacked parameters are fresh leaves that
    require grad (the models themselves are not modified). All models must share one
    architecture (the same tensor names, shapes and dtypes) and the same train/eval mode."""
    models = list(models)
    if not models:
        raise ValueError("stack_models needs at least one model")
    reference = _signature(models[0])
    for i, model in enumerate(models[1:], start=1):
        if _signature(model) != reference:
            raise ValueError(f"model {i} does not have the architecture of model 0")
        if model.training != models[0].training:
            raise ValueError(f"model {i} is not in the train/eval mode of model 0")
    params, buffers = torch.func.stack_module_state(models)
    return dict(params), dict(buffers)


def functional_logits(
    model: nn.Module,
    params: Mapping[str, torch.Tensor],
    x: torch.Tensor,
    buffers: Mapping[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """``model(x)`` computed with ``params`` (and ``buffers``) in place of the model's own.

    ``model`` serves only as the template of the computation. Buffers default to the model's
    own. Names are checked strictly: a missing or unknown tensor name raises."""
    tensors = dict(model.named_buffers()) if buffers is None else dict(buffers)
    tensors.update(params)
    _check_names(model, tensors)
    return torch.func.functional_call(model, tensors, (x,))


def batched_logits(
    model: nn.Module,
    params: Mapping[str, torch.Tensor],
    x: torch.Tensor,
    buffers: Mapping[str, torch.Tensor] | None = None,
    *,
    shared_input: bool = True,
    randomness: Literal["error", "different", "same"] = "error",
) -> torch.Tensor:
    """Logits ``(M, N, C)`` of M stacked models (from :func:`stack_models`) via ``vmap``.

    ``shared_input=True``: every model sees the same ``x`` of shape ``(N, ...)``; otherwise
    ``x`` is ``(M, N, ...)``, one batch per model. ``randomness`` is passed to
    :func:`torch.func.vmap` (``"different"`` gives each model its own dropout mask)."""
    buffers = {} if buffers is None else dict(buffers)

    def one(p: Tensors, b: Tensors, inputs: torch.Tensor) -> torch.Tensor:
        return functional_logits(model, p, inputs, b or None)  # {}: the model's own buffers

    in_dims = (0, 0, None if shared_input else 0)
    return torch.func.vmap(one, in_dims=in_dims, randomness=randomness)(dict(params), buffers, x)


def _check_names(model: nn.Module, tensors: Mapping[str, torch.Tensor]) -> None:
    expected = {name for name, _ in model.named_parameters()}
    expected |= {name for name, _ in model.named_buffers()}
    missing, unknown = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
    if missing or unknown:
        raise ValueError(
            f"params/buffers do not match the model: missing {missing}, unknown {unknown}"
        )


def _signature(model: nn.Module) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
    named = list(model.named_parameters()) + list(model.named_buffers())
    return [(name, tuple(t.shape), t.dtype) for name, t in named]
