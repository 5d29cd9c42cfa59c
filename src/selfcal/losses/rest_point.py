"""Where gradient-weighted cross-entropy comes to rest: the population stationary point of a GRA
loss ``-sg(u(p, y)) log p_y`` when the label is drawn from the true posterior ``eta``.

The expected gradient with respect to the logits is ``E_y[u(p, y) (p - e_y)] =
p sum_y eta_y u_y - (eta_k u_k)_k`` with ``u_k = u(p, k)`` (the weight if the label were
``k``). It vanishes at

    ``p*_k = eta_k u(p*, k) / sum_j eta_j u(p*, j)``,

which is ``eta`` only when the weight is the same for every label. With the weight of the
*sampled* label -- what BSCE-GRA's reference code and selfcal compute, ``u = ||p - e_y||^gamma``
-- it is not: in the binary case ``u(p, k) = c (1 - p_k)^gamma`` for any norm, and the fixed
point is ``logit p* = logit eta / (1 + gamma)``, i.e. under-confident by the temperature
``1 / (1 + gamma)`` wherever the label is uncertain. ([GRA]'s appendix puts ``eta`` inside the
weight, ``sum_k (q_k - eta_k)^2``, which is label-free and gives ``q = eta``; that weight
cannot be computed from a sampled label.) When labels are deterministic (``eta`` one-hot),
``p* = eta`` for every weight, which is why memorising the training set hides the effect.
"""

from __future__ import annotations

import torch

from selfcal._validation import check_fraction
from selfcal.losses.weights import WeightFunction

REST_POINT_TOL = 1e-12
REST_POINT_MAX_ITER = 100_000


def label_weights(weight: WeightFunction, probs: torch.Tensor) -> torch.Tensor:
    """``(N, K)`` matrix of ``u(p_i, k)``: each row's weight under every possible label."""
    n, k = probs.shape
    return torch.stack(
        [
            weight(probs, torch.full((n,), c, dtype=torch.long, device=probs.device))
            for c in range(k)
        ],
        1,
    )


def gra_rest_point(
    eta: torch.Tensor,
    weight: WeightFunction,
    *,
    damping: float | None = None,
    tol: float = REST_POINT_TOL,
    max_iter: int = REST_POINT_MAX_ITER,
) -> torch.Tensor:
    """The population rest point ``p*`` of the GRA loss with ``weight`` for each row of
    ``eta`` (``(N, K)`` class posteriors; module doc), in float64.

    Solved by the damped fixed-point iteration ``log p <- (1 - a) log p + a log(eta u(p))``
    (renormalised), which for the binary focal / Brier weight is the linear map
    ``z <- z - a((1 + gamma) z - logit eta)`` on the logit: it converges for
    ``a < 2 / (1 + gamma)``, in one step at ``a = 1 / (1 + gamma)`` -- the default, with
    ``gamma = weight.gamma`` (5 for weights without one, FLSD-53's largest exponent).
    Raises ``ValueError`` if the iteration has not converged to ``tol`` (max-norm change of
    ``p``) after ``max_iter`` steps.
    """
    eta = torch.as_tensor(eta, dtype=torch.float64)
    if eta.ndim != 2 or eta.shape[1] < 2:
        raise ValueError(f"eta must be (N, K) with K >= 2, got shape {tuple(eta.shape)}")
    if bool((eta < 0).any()) or not torch.allclose(
        eta.sum(1), torch.ones(len(eta), dtype=eta.dtype)
    ):
        raise ValueError("every row of eta must be a probability vector")
    if damping is None:
        damping = 1.0 / (1.0 + float(getattr(weight, "gamma", 5.0)))
    check_fraction("damping", damping)
    tiny = torch.finfo(torch.float64).tiny
    log_eta = eta.clamp_min(tiny).log()
    log_p = log_eta.clone()
    for _ in range(max_iter):
        u = label_weights(weight, log_p.exp()).clamp_min(tiny)
        target = torch.log_softmax(log_eta + u.log(), dim=1)
        new = torch.log_softmax((1 - damping) * log_p + damping * target, dim=1)
        change = float((new.exp() - log_p.exp()).abs().max())
        log_p = new
        if change < tol:
            return log_p.exp()
    raise ValueError(
        f"the rest-point iteration did not converge in {max_iter} steps "
        f"(last change {change:.2e}); pass a smaller damping"
    )
