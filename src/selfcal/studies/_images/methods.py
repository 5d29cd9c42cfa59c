"""The methods a study trains -- each a :data:`~selfcal.methods.catalogue.MethodSpec` of the one
catalogue (:data:`selfcal.methods.catalogue.METHODS`) -- and how one of them trains: its step
strategy (:func:`~selfcal.methods.catalogue.method_step`) in the one training loop
(:func:`train_as`)."""

from __future__ import annotations

from typing import Any

import torch

from selfcal.methods import MethodSpec, get_method


def image_methods(*names: str) -> dict[str, MethodSpec]:
    """``name -> MethodSpec`` for ``names`` in order (a name or an alias of the catalogue:
    the meta-regularization study says ``ls``, ``flsd53``, ``flg-sece`` where the benchmark
    says ``label-smoothing``, ``flsd-53``, ``flγ-sece``), each with its own options."""
    return {name: get_method(name).spec for name in names}


def train_as(
    step: Any,
    model: torch.nn.Module,
    train: tuple,
    val: tuple | None,
    config: Any,
    on_epoch: Any = None,
    batch_transform: Any = None,
) -> Any:
    """Train ``model`` in place with the step strategy ``step`` in the one training loop
    (:func:`selfcal.training.fit`, with its ``on_epoch(epoch, model, history)`` callback); the
    history."""
    from selfcal.training import fit

    return fit(
        model,
        train,
        val,
        config=config,
        step=step,
        on_epoch=on_epoch,
        batch_transform=batch_transform,
    )
