"""The methods the image studies train, once (:data:`IMAGE_METHODS`), and how one of them
trains: its step strategy (:func:`method_step`) in the one training loop (:func:`train_as`)."""

from __future__ import annotations

from typing import Any

import torch

MethodSpec = tuple[str, str, dict[str, Any]]
"""``(kind, loss or meta method, fixed options)``: ``"loss"``, ``"mixup"``, ``"meta"``
(:func:`method_step`) or ``"bo4sc"`` (the benchmark's bilevel training)."""

IMAGE_METHODS: dict[str, MethodSpec] = {
    "ce": ("loss", "ce", {}),
    "brier": ("loss", "brier", {}),
    "mmce": ("loss", "mmce", {}),
    "ls": ("loss", "ls", {}),
    "mixup": ("mixup", "ce", {"alpha": 1.0}),
    "focal": ("loss", "focal", {}),
    "flsd53": ("loss", "flsd53", {}),
    "dfl": ("loss", "dfl", {}),
    "bsce": ("loss", "bsce", {}),
    "bsce-gra": ("loss", "bsce-gra", {}),
    "ce-dece": ("meta", "unit-l2", {"meta_objective": "dece"}),
    "ce-sece": ("meta", "unit-l2", {"meta_objective": "sece"}),
    "flg": ("meta", "gamma-net", {"meta_objective": "ce"}),
    "flg-dece": ("meta", "gamma-net", {"meta_objective": "dece"}),
    "flg-sece": ("meta", "gamma-net", {"meta_objective": "sece"}),
    "bo4sc": ("bo4sc", "bo4sc", {}),
}
"""Every method the image studies train, once (``flg``: see the meta-reg protocol)."""
METHOD_ALIASES = {"label-smoothing": "ls", "flsd-53": "flsd53", "flγ-sece": "flg-sece"}
"""The benchmark's names of methods of :data:`IMAGE_METHODS`."""


def image_methods(*names: str) -> dict[str, MethodSpec]:
    """``name -> MethodSpec`` of :data:`IMAGE_METHODS` (or of the entry an alias of
    :data:`METHOD_ALIASES` stands for) for ``names`` in order, each with its own options."""
    specs = {name: IMAGE_METHODS[METHOD_ALIASES.get(name, name)] for name in names}
    return {name: (kind, loss, dict(fixed)) for name, (kind, loss, fixed) in specs.items()}


def method_step(
    entry: tuple[str, str, dict[str, Any]], options: dict[str, Any], meta_val: tuple
) -> Any:
    """The training step of the method ``entry = (kind, name, fixed options)`` with the
    candidate's ``options`` added (:mod:`selfcal.training.steps`): ``"loss"`` -- a
    :class:`~selfcal.training.LossStep` on ``build_loss(name, **fixed, **options)``;
    ``"mixup"`` -- a :class:`~selfcal.training.MixupStep` on the loss ``name`` with
    ``alpha = fixed["alpha"]``; ``"meta"`` -- a :class:`~selfcal.bilevel.MetaStep` with
    ``method=name`` on ``meta_val``."""
    kind, name, fixed = entry
    if kind == "meta":
        from selfcal.bilevel import MetaStep

        return MetaStep(meta_val, method=name, **fixed, **options)
    from selfcal.losses import build_loss
    from selfcal.training import LossStep, MixupStep

    if kind == "mixup":
        return MixupStep(build_loss(name), fixed["alpha"])
    return LossStep(build_loss(name, **fixed, **options))


def train_as(
    step: Any,
    model: torch.nn.Module,
    train: tuple,
    val: tuple | None,
    config: Any,
    on_epoch: Any = None,
    batch_transform: Any = None,
) -> Any:
    """Train ``model`` in place with the step strategy ``step`` (:func:`method_step`) in the one
    training loop (:func:`selfcal.training.fit`, with its ``on_epoch(epoch, model, history)``
    callback); the history."""
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
