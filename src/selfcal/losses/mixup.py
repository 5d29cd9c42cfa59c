"""Mixup (Zhang et al. 2018) as used in the calibration literature ([MetaReg]: alpha = 1).

``lam ~ Beta(alpha, alpha)`` (``lam = 1``, no mixing, when ``alpha = 0``), a random permutation
``pi`` of the batch, ``x_mixed = lam x + (1 - lam) x[pi]``, and the loss
``lam * loss(z, y) + (1 - lam) * loss(z, y[pi])`` on the logits ``z`` of ``x_mixed``.
One ``lam`` per batch, as in the reference mixup code.

Randomness comes from one ``torch.Generator``: a uniform draw mapped through the inverse Beta
CDF (:func:`scipy.special.betaincinv`) gives ``lam``, then ``torch.randperm`` gives ``pi`` --
so a seeded generator makes the whole batch transform reproducible. Both draw on the
generator's device (a CUDA generator works too); :func:`selfcal.training.fit` uses them with
its augmentation generator (``fit(..., mixup_alpha=1.0)``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from selfcal._validation import check_nonnegative, check_real

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def sample_mixup_lambda(alpha: float, generator: torch.Generator | None = None) -> float:
    """``lam ~ Beta(alpha, alpha)`` by inverse-CDF sampling of one uniform draw (1.0 if
    ``alpha == 0``)."""
    alpha = check_nonnegative("alpha", alpha)
    if alpha == 0:
        return 1.0
    from scipy.special import betaincinv

    uniform = float(
        torch.rand((), generator=generator, dtype=torch.float64, device=_device(generator))
    )
    return float(betaincinv(alpha, alpha, uniform))


def mixup_batch(
    x: torch.Tensor,
    y: torch.Tensor,
    alpha: float,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """``(x_mixed, y_a, y_b, lam)``: ``y_a = y``, ``y_b = y[pi]``; ``x`` must be floating with
    one row per label. With ``generator=None`` the global RNG is used."""
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise ValueError("x and y must be torch tensors")
    if x.ndim < 1 or x.shape[0] == 0 or y.ndim != 1 or y.shape[0] != x.shape[0]:
        raise ValueError(
            f"x (N, ...) and y (N,) must have the same N >= 1, got shapes "
            f"{tuple(x.shape)} and {tuple(y.shape)}"
        )
    if not x.is_floating_point():
        raise ValueError(f"x must be floating point to be mixed, got dtype {x.dtype}")
    lam = sample_mixup_lambda(alpha, generator)
    perm = torch.randperm(x.shape[0], generator=generator, device=_device(generator))
    perm = perm.to(x.device)
    x_mixed = lam * x + (1 - lam) * x[perm]
    return x_mixed, y, y[perm.to(y.device)], lam


def _device(generator: torch.Generator | None) -> torch.device | None:
    """Where ``generator`` draws (``None``: the global RNG on the default device)."""
    return None if generator is None else generator.device


def mixup_loss(
    loss_fn: LossFn, logits: torch.Tensor, y_a: torch.Tensor, y_b: torch.Tensor, lam: float
) -> torch.Tensor:
    """``lam * loss_fn(logits, y_a) + (1 - lam) * loss_fn(logits, y_b)``; ``lam`` in [0, 1].

    ``lam == 1`` calls ``loss_fn`` once and returns exactly ``loss_fn(logits, y_a)``."""
    check_real("lam", lam, 0.0, 1.0)
    if lam == 1:
        return loss_fn(logits, y_a)
    return lam * loss_fn(logits, y_a) + (1 - lam) * loss_fn(logits, y_b)
