"""BSCE-GRA's rest point, checked by training (:func:`selfcal.losses.gra_rest_point`).

Two classes in one dimension, ``x | y ~ N(+-mu, 1)`` with equal priors: the Bayes posterior is
logistic, ``logit eta(x) = 2 mu x``, and the population rest point of BSCE-GRA (any norm) is
``logit p* = 2 mu x / (1 + gamma)`` -- still linear. A linear two-logit model can represent it
exactly, so trained to convergence on many samples (full-batch Adam on the mean loss, no weight
decay) its slope ``w_1 - w_0`` should end near ``2 mu / (1 + gamma)``; cross-entropy's near
``2 mu``. Metrics: ``slope_ratio`` (learned slope / ``2 mu``), ``predicted_ratio``
(``1 / (1 + gamma)``; 1 for CE), and on a grid of ``x`` the mean ``|p - p*|`` and ``|p - eta|``.
"""

from __future__ import annotations

import torch

from selfcal.experiments import RunResult, RunSpec
from selfcal.studies.bsce_gra.protocol import BsceGraProtocol

MU = 1.0
LEARNING_RATE = 0.2
GRID = torch.linspace(-3.0, 3.0, 601, dtype=torch.float64)


def method_name(gamma: float | None) -> str:
    """``"ce"`` or ``"bsce-gra-<gamma>"`` (one run per exponent; nothing is selected)."""
    return "ce" if gamma is None else f"bsce-gra-{gamma:g}"


def gamma_of(method: str) -> float | None:
    return None if method == "ce" else float(method.removeprefix("bsce-gra-"))


def binary_check(protocol: BsceGraProtocol, spec: RunSpec) -> RunResult:
    from selfcal.losses import BrierWeight, build_loss, gra_rest_point

    gamma = gamma_of(spec.method)
    gen = torch.Generator().manual_seed(spec.seed)
    n = protocol.rest_point_samples
    y = torch.arange(2).repeat_interleave(n)
    x = (torch.randn(2 * n, generator=gen, dtype=torch.float64) + MU * (2 * y - 1))[:, None]
    model = torch.nn.Linear(1, 2).double()
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
    loss = (
        build_loss("ce", reduction="mean")
        if gamma is None
        else build_loss("bsce-gra", gamma=gamma, norm=2, reduction="mean")
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    for _ in range(protocol.rest_point_steps):
        optimizer.zero_grad()
        loss(model(x), y).backward()
        optimizer.step()
    with torch.no_grad():
        slope = float(model.weight[1, 0] - model.weight[0, 0])
        p = torch.softmax(model(GRID[:, None]), 1)
    eta = torch.sigmoid(2 * MU * GRID)
    eta2 = torch.stack([1 - eta, eta], 1)
    p_star = eta2 if gamma is None else gra_rest_point(eta2, BrierWeight(gamma, 2))
    return RunResult(
        metrics={
            "slope_ratio": slope / (2 * MU),
            "predicted_ratio": 1.0 if gamma is None else 1.0 / (1.0 + gamma),
            "p_minus_rest_point": float((p - p_star).abs()[:, 1].mean()),
            "p_minus_eta": float((p[:, 1] - eta).abs().mean()),
        }
    )
