"""Model registry and seeded construction.

Every architecture is one file that decorates its factory with :func:`register_model`;
:func:`build_model` constructs it by name. Importing :mod:`selfcal.models` imports those files,
so a new architecture is one new file plus one import line in ``models/__init__.py``.

Seeding choice: PyTorch layers draw their initial weights from the *global* RNG. Rather than
re-implementing every layer's initialisation with an explicit ``torch.Generator``, a seeded
construction runs under :func:`torch.random.fork_rng` with ``torch.manual_seed(seed)``: the
model gets PyTorch's own default initialisation, reproducibly, and the caller's global RNG
state is restored afterwards (construction happens on the CPU; move the model afterwards).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from selfcal._registry import Registry
from selfcal._validation import check_int

ModelFactory = Callable[..., nn.Module]

_MODELS: Registry[ModelFactory] = Registry("model")
register_model = _MODELS.register
"""Decorator: make ``factory(**kwargs) -> nn.Module`` buildable as ``build_model(name)``."""
available_models = _MODELS.available
"""Sorted names accepted by :func:`build_model` (a list)."""


@contextlib.contextmanager
def seeded_rng(seed: int) -> Iterator[None]:
    """Run a block with the CPU global RNG seeded to ``seed``, restoring the caller's state."""
    check_int("seed", seed, minimum=0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def build_model(name: str, *, seed: int | None = None, **kwargs: Any) -> nn.Module:
    """Construct the registered model ``name`` with ``kwargs``.

    With ``seed`` the initial weights are a deterministic function of the seed and the global
    RNG is left untouched (see module docstring); with ``seed=None`` the global RNG is used as
    PyTorch does by default."""
    factory = _MODELS.get(name)
    if seed is None:
        return factory(**kwargs)
    return init_model(lambda: factory(**kwargs), seed)


def init_model(model_or_factory: nn.Module | Callable[[], nn.Module], seed: int) -> nn.Module:
    """Deterministically initialise a model from ``seed`` without touching the global RNG.

    * a factory (zero-argument callable) is called under the seeded RNG;
    * an existing module is re-initialised in place by calling ``reset_parameters()`` on each
      submodule in ``modules()`` order (for modules built layer by layer, as :class:`MLP`, this
      is construction order, so both forms give the same weights). A submodule that owns
      parameters but has no ``reset_parameters`` raises :class:`ValueError`, since its weights
      could not be re-drawn.
    """
    if isinstance(model_or_factory, nn.Module):
        return _reset_in_place(model_or_factory, seed)
    if not callable(model_or_factory):
        raise TypeError("init_model needs an nn.Module or a zero-argument factory")
    with seeded_rng(seed):
        model = model_or_factory()
    if not isinstance(model, nn.Module):
        raise TypeError(f"the factory returned {type(model).__name__}, not an nn.Module")
    return model


def _reset_in_place(model: nn.Module, seed: int) -> nn.Module:
    for name, module in model.named_modules():
        owns_params = any(True for _ in module.parameters(recurse=False))
        if owns_params and not hasattr(module, "reset_parameters"):
            label = name or type(module).__name__
            raise ValueError(f"submodule {label!r} has parameters but no reset_parameters()")
    with seeded_rng(seed), torch.no_grad():
        for module in model.modules():
            reset = getattr(module, "reset_parameters", None)
            if callable(reset):
                reset()
    return model
