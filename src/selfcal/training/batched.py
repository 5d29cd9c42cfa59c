"""Many independent full-batch trainings at once: :func:`fit_batched`.

A fast path of the training loop for small networks: ``P`` problems (seeds, learning rates,
datasets of one shape) are stacked and trained with :func:`torch.func.vmap`, one trajectory per
problem. A vmap of ``P`` tiny problems costs little more than one, where ``P`` calls of
:func:`selfcal.training.fit` cost ``P`` times as much. It covers one protocol only -- full-batch
Adam on mean cross-entropy, no schedule, no validation inside the loop -- and takes the same
steps as :func:`~selfcal.training.fit` with ``TrainConfig(optimizer="adam", batch_size=None)``
(a test checks the two agree to float rounding).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from selfcal._validation import check_int
from selfcal.optim import Adam, AdamState, Params


def fit_batched(
    model: nn.Module,
    params: Mapping[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    lr: torch.Tensor,
    *,
    epochs: int,
    every: int = 1,
) -> list[Params]:
    """Full-batch Adam on mean cross-entropy for ``P`` stacked problems at once.

    ``model`` is the template of the computation (its own parameters are not used; it may live
    on the ``meta`` device); ``params`` ``{name: (P, ...)}`` are the problems' initial
    parameters (e.g. :func:`selfcal.models.stack_models`), ``x`` ``(P, n, ...)`` and ``y``
    ``(P, n)`` their training data, ``lr`` ``(P,)`` their learning rates. Each epoch is one
    Adam step (betas 0.9 / 0.999, eps 1e-8, no weight decay) on
    ``mean_i CE(model(x_pi), y_pi)``. Returns the stacked parameters after every ``every``
    epochs (``epochs // every`` snapshots, the last after epoch ``every * (epochs // every)``).
    """
    check_int("epochs", epochs)
    check_int("every", every)
    sizes = {t.shape[0] for t in (*params.values(), x, y, lr)}
    if len(sizes) != 1:
        raise ValueError(
            f"params, x, y and lr must share their first (problem) dimension, got {sizes}"
        )

    def step(
        theta: Params, state: AdamState, x: torch.Tensor, y: torch.Tensor, lr: torch.Tensor
    ) -> tuple[Params, AdamState]:
        g = grad(lambda th: F.cross_entropy(functional_call(model, th, (x,)), y))(theta)
        return Adam(lr, eps_root=0.0).step(theta, g, state)

    theta = dict(params)
    state = vmap(lambda th: Adam(1e-3).init(th))(theta)
    vstep = vmap(step)
    snapshots = []
    for epoch in range(1, epochs + 1):
        theta, state = vstep(theta, state, x, y, lr)
        if epoch % every == 0:
            snapshots.append(theta)
    return snapshots
