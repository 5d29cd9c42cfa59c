"""BO4SC: bilevel optimisation for self-calibration (Sanguin et al., AICS 2024; methods §4).

Outer variables: one weight ``w_i`` per training sample. Inner variables: the network
parameters ``theta``. With logits ``z``, ``p = softmax(z)``:

* inner loss ``g(w, theta) = (1/n_train) sum_i w_i CE(z(x_i; theta), y_i)`` -- normalised by
  ``n_train``, not by ``sum w``;
* outer loss ``f = mean_j BCE(clamp(p_hat_j, eps, 1 - eps), y^B_j)`` on validation data, with
  the smooth confidence ``p_hat = boltz_beta(p)`` (:func:`boltzmann_confidence`) and the
  correctness label ``y^B_j = 1[argmax_k z_jk = y_j]`` of the current model (a label: no
  gradient flows through it). ``f`` depends on ``w`` only through ``theta``.

One outer iteration (Algorithm 1, warm-started): ``T`` differentiable inner steps (Adam by
default) from the current ``(theta, optimizer state)``, the hypergradient ``dF/dw`` by the
chosen estimator (exact unrolled reverse mode by default, as the paper's torchopt code), then
``w <- Pi(w - eta_w dF/dw)`` with ``Pi`` the clip to ``[0, 1]`` (``constraint="clip"``) or the
identity (``"none"``), and the detached ``theta_T`` and optimizer state carried over.

Minibatch BO4SC (for networks and data the full batch does not fit): ``w`` is a table with one
entry per training row; an outer iteration trains the ``T`` inner steps on ``T`` minibatches
(rows ``r_k``, ``g_k = (1/B) sum_{i in r_k} w_i CE_i``) and scores the outer loss on a
validation batch; ``dF/dw`` reaches only the rows drawn in that iteration (a row drawn twice
gets the sum of its two entries) and only those rows are updated. Full batch is the case of
one batch holding every row at every step.

Models: the inner steps run the model in training mode (dropout active, BatchNorm normalising
by batch statistics) and the outer loss in evaluation mode (the model as it is deployed,
BatchNorm reading its running statistics as constants). Running statistics are not updated
inside the differentiated steps (a ``torch.func`` transform cannot mutate a buffer);
:func:`update_running_stats` updates them, without gradients, from the iteration's training
batches at its warm start, before the hypergradient -- the same exponential averages plain
training keeps, computed ``T`` steps earlier.

Two faces:

* a functional core -- :class:`BO4SCState`, :class:`BO4SCData` / :class:`BO4SCBatch`,
  :class:`BO4SCConfig`, :func:`bo4sc_init`, :func:`bo4sc_step` (full batch, with fixed shapes
  and no data-dependent control flow, so ``vmap``-able over seeds / hyperparameters) and
  :func:`bo4sc_minibatch_step`;
* the estimator-style :class:`~selfcal.bilevel.bo4sc_estimator.BO4SC` for a user's own
  ``nn.Module`` and data.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call
from torch.nn.modules.batchnorm import _BatchNorm

from selfcal._validation import check_choice, check_hyper, check_int, check_real
from selfcal.bilevel.engine import BilevelProblem, Estimator
from selfcal.bilevel.estimators import Unrolled
from selfcal.optim import Adam, Hyper, Optimizer, Params

Constraint = Literal["clip", "none"]
CONSTRAINTS: tuple[str, ...] = ("clip", "none")

DEFAULT_INNER_STEPS = 10
"""``T``: the paper's Fig. 3 has "1 epoch unit = 10 training epochs" (methods §4.5)."""
DEFAULT_INNER_LR = 1e-2
DEFAULT_WEIGHT_LR = 10.0
"""``eta_w``: ``dF/dw_i`` is ``O(1/n_train)`` full batch (``O(1/B)`` by minibatches), so the
step must be large -- larger than the top of the paper's grid (methods §4.5), which barely
moves the weights. The studies select it on validation from a stated grid;
``tests/bilevel/test_bo4sc.py`` checks that ``eta_w = 10`` gives flipped labels low weights."""


# ---------------------------------------------------------------------------- losses
def boltzmann_confidence(probs: torch.Tensor, beta: Hyper) -> torch.Tensor:
    """Smooth maximum of a probability vector (Boltzmann operator, Asadi & Littman 2017)::

        boltz_beta(p) = sum_k p_k e^{beta p_k} / sum_k e^{beta p_k} = <softmax(beta p), p>

    over the last dimension. It lies between ``mean(p) = 1/K`` (``beta -> 0``) and ``max(p)``
    (``beta -> inf``) and is differentiable, with ``d boltz / d p_k = s_k (1 + beta (p_k -
    boltz))``, ``s = softmax(beta p)``. ``softmax`` subtracts the row maximum, so large
    ``beta`` does not overflow. Values of ``probs`` are not checked (that would be
    data-dependent control flow, which ``vmap`` forbids).
    """
    if not isinstance(probs, torch.Tensor) or not probs.is_floating_point():
        raise ValueError("probs must be a floating-point torch tensor")
    if probs.ndim < 1 or probs.shape[-1] < 1:
        raise ValueError(
            f"probs must have a non-empty last (class) dimension, got shape {tuple(probs.shape)}"
        )
    check_hyper("beta", beta, 0.0)
    return torch.sum(torch.softmax(beta * probs, dim=-1) * probs, dim=-1)


def bo4sc_inner_loss(
    logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """``g = (1/n) sum_i w_i CE(z_i, y_i)`` (normalised by ``n``, not by ``sum w``)."""
    return torch.mean(weights * F.cross_entropy(logits, labels, reduction="none"))


def bo4sc_outer_loss(
    logits: torch.Tensor, labels: torch.Tensor, beta: Hyper, clamp_eps: float = 1e-6
) -> torch.Tensor:
    """``f = mean_j BCE(clamp(boltz_beta(softmax(z_j)), eps, 1 - eps), 1[argmax z_j = y_j])``.

    The correctness target is piecewise constant in ``z`` (no gradient flows through it). The
    clamp keeps the logarithms finite; outside ``[eps, 1 - eps]`` its gradient is zero.
    """
    probs = torch.softmax(logits, dim=-1)
    correct = (logits.argmax(dim=-1) == labels).to(probs.dtype)
    conf = boltzmann_confidence(probs, beta).clamp(clamp_eps, 1 - clamp_eps)
    return -torch.mean(correct * torch.log(conf) + (1 - correct) * torch.log1p(-conf))


# ------------------------------------------------------------------ functional core
class BO4SCData(NamedTuple):
    """Training and validation tensors (stack them along a new first axis to ``vmap``)."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor


class BO4SCBatch(NamedTuple):
    """One minibatch outer iteration's data: ``T`` training minibatches stacked,
    ``x_train [T, B, ...]`` / ``y_train [T, B]``, the rows they hold in the weight table
    ``rows [T, B]``, and the validation batch ``x_val`` / ``y_val``."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    rows: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor


class BO4SCState(NamedTuple):
    """Network parameters, inner-optimizer state and per-sample weights ``w``."""

    params: Params
    opt_state: Any
    weights: torch.Tensor


class BO4SCInfo(NamedTuple):
    """Per-iteration diagnostics: the outer loss at ``theta_T`` (before the weight update)
    and the hypergradient ``dF/dw``."""

    outer_loss: torch.Tensor
    weight_grad: torch.Tensor


class BO4SCBatchInfo(NamedTuple):
    """:class:`BO4SCInfo` of a minibatch iteration: ``weight_grad[j]`` is ``dF/dw`` of table
    row ``rows[j]`` (the distinct rows drawn, sorted)."""

    outer_loss: torch.Tensor
    weight_grad: torch.Tensor
    rows: torch.Tensor


@dataclass(frozen=True)
class BO4SCConfig:
    """How one outer iteration runs.

    ``estimator`` carries the number of inner steps ``T`` and the hypergradient method;
    ``inner_optimizer`` carries the inner learning rate. ``weight_lr`` (``eta_w``), ``beta``
    and the inner optimizer's hyperparameters may be 0-d tensors, so a caller can build the
    config inside a ``vmap``-ed function and batch over them.
    """

    estimator: Estimator = field(default_factory=lambda: Unrolled(DEFAULT_INNER_STEPS))
    inner_optimizer: Optimizer = field(default_factory=lambda: Adam(DEFAULT_INNER_LR))
    weight_lr: Hyper = DEFAULT_WEIGHT_LR
    beta: Hyper = 20.0
    constraint: Constraint = "clip"
    initial_weight: float = 1.0
    clamp_eps: float = 1e-6

    def __post_init__(self) -> None:
        check_choice("constraint", self.constraint, CONSTRAINTS)
        check_hyper("beta", self.beta, 0.0)
        check_hyper("weight_lr", self.weight_lr, 0.0)
        low, high = (0.0, 1.0) if self.constraint == "clip" else (-math.inf, math.inf)
        check_real("initial_weight", self.initial_weight, low, high)
        check_real("clamp_eps", self.clamp_eps, 0.0, 0.5, low_open=True, high_open=True)


def bo4sc_init(params: Params, n_train: int, config: BO4SCConfig) -> BO4SCState:
    """The starting state: detached copies of ``params``, a fresh optimizer state and
    ``w = initial_weight`` for each of the ``n_train`` samples."""
    check_int("n_train", n_train)
    params = {k: p.detach().clone() for k, p in params.items()}
    first = next(iter(params.values()))
    weights = torch.full((n_train,), config.initial_weight, dtype=first.dtype, device=first.device)
    return BO4SCState(params, config.inner_optimizer.init(params), weights)


def running_stat_layers(model: nn.Module) -> list[_BatchNorm]:
    """The BatchNorm layers of ``model`` that keep running statistics."""
    return [m for m in model.modules() if isinstance(m, _BatchNorm) and m.track_running_stats]


@contextlib.contextmanager
def _frozen_running_stats(layers: list[_BatchNorm]) -> Iterator[None]:
    """BatchNorm layers normalise by batch statistics in training mode without updating
    their running statistics (which a ``torch.func`` transform cannot mutate)."""
    for layer in layers:
        layer.track_running_stats = False
    try:
        yield
    finally:
        for layer in layers:
            layer.track_running_stats = True


def _forward(
    model: nn.Module, theta: Params, x: torch.Tensor, training: bool, layers: list[_BatchNorm]
) -> torch.Tensor:
    """``model(x)`` with parameters ``theta``, in training or evaluation mode (the module doc:
    BatchNorm running statistics are read in evaluation mode and never written)."""
    model.train(training)
    with _frozen_running_stats(layers if training else []):
        return functional_call(model, theta, (x,))


def bo4sc_problem(
    model: nn.Module, data: BO4SCData | BO4SCBatch, config: BO4SCConfig
) -> BilevelProblem:
    """The bilevel problem of BO4SC for ``model`` on ``data``. Full batch (:class:`BO4SCData`):
    ``phi`` = the weights of every row, one inner loss. Minibatch (:class:`BO4SCBatch`): ``phi``
    = the drawn rows' weights ``[T, B]``, inner step ``k`` on batch ``k`` with weights
    ``phi[k]``."""
    layers = running_stat_layers(model)

    def batch_loss(x: torch.Tensor, y: torch.Tensor, weights: Any) -> Any:
        def inner_loss(theta: Params, phi: torch.Tensor) -> torch.Tensor:
            return bo4sc_inner_loss(_forward(model, theta, x, True, layers), y, weights(phi))

        return inner_loss

    def outer_loss(theta: Params, phi: torch.Tensor) -> torch.Tensor:
        logits = _forward(model, theta, data.x_val, False, layers)
        return bo4sc_outer_loss(logits, data.y_val, config.beta, config.clamp_eps)

    if isinstance(data, BO4SCBatch):
        inner: Any = [
            batch_loss(x, y, lambda phi, k=k: phi[k])
            for k, (x, y) in enumerate(zip(data.x_train, data.y_train, strict=True))
        ]
    else:
        inner = batch_loss(data.x_train, data.y_train, lambda phi: phi)
    return BilevelProblem(inner, outer_loss, config.inner_optimizer)


def project_weights(weights: torch.Tensor, constraint: Constraint) -> torch.Tensor:
    """``Pi``: clip to ``[0, 1]`` (``"clip"``, the spec's reading of Fig. 3) or identity."""
    return weights.clamp(0.0, 1.0) if constraint == "clip" else weights


def bo4sc_step(
    model: nn.Module, state: BO4SCState, data: BO4SCData, config: BO4SCConfig
) -> tuple[BO4SCState, BO4SCInfo]:
    """One outer iteration: ``T`` inner steps from the warm start, the hypergradient, and
    ``w <- Pi(w - eta_w dF/dw)``. Pure in the tensors (``model`` is only evaluated through
    ``torch.func.functional_call`` with the state's parameters), so it can be ``vmap``-ed; it
    leaves the model in evaluation mode (the outer loss's), which :class:`BO4SC` restores."""
    problem = bo4sc_problem(model, data, config)
    result = config.estimator(problem, state.weights, state.params, state.opt_state)
    weights = project_weights(state.weights - config.weight_lr * result.grad, config.constraint)
    new_state = BO4SCState(result.theta, result.opt_state, weights.detach())
    return new_state, BO4SCInfo(result.outer_loss, result.grad.detach())


def bo4sc_minibatch_step(
    model: nn.Module, state: BO4SCState, batch: BO4SCBatch, config: BO4SCConfig
) -> tuple[BO4SCState, BO4SCBatchInfo]:
    """One minibatch outer iteration: the estimator's ``T`` inner steps on the ``T`` batches
    from the warm start, ``dF/dw`` for the drawn rows (summed over a row's repeats), and
    ``w_r <- Pi(w_r - eta_w dF/dw_r)`` for those rows only. The weight table is updated in
    place (work proportional to ``T B``, not to the table's length); the returned state holds
    the same table. ``config.estimator`` must run ``T`` steps."""
    problem = bo4sc_problem(model, batch, config)
    result = config.estimator(problem, state.weights[batch.rows], state.params, state.opt_state)
    rows, inverse = torch.unique(batch.rows.reshape(-1), return_inverse=True)
    grad = torch.zeros(rows.shape, dtype=result.grad.dtype, device=rows.device)
    grad = grad.index_add_(0, inverse, result.grad.reshape(-1))
    state.weights[rows] = project_weights(
        state.weights[rows] - config.weight_lr * grad, config.constraint
    )
    return (
        BO4SCState(result.theta, result.opt_state, state.weights),
        BO4SCBatchInfo(result.outer_loss, grad, rows),
    )


@torch.no_grad()
def update_running_stats(
    model: nn.Module, params: Params, batches: torch.Tensor | Sequence[torch.Tensor]
) -> None:
    """The BatchNorm running statistics after a training-mode forward pass of each batch in
    ``batches`` (``[T, B, ...]``) with parameters ``params`` (no gradients; nothing to do for a
    model without BatchNorm). The model is left in training mode."""
    if not running_stat_layers(model):
        return
    model.train()
    for x in batches:
        functional_call(model, params, (x,))
