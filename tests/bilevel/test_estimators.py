"""Hypergradient estimators against finite differences, closed forms, plain autograd, and
each other; vmap against a loop."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers.bilevel import (
    central_differences,
    classification_data,
    params_of,
    relative_error,
    tanh_net,
    weighted_ce_problem,
)
from torch import nn
from torch.func import functional_call, vmap

from selfcal.bilevel import (
    SGD,
    Adam,
    AutogradLookahead,
    AutogradUnrolled,
    BilevelProblem,
    ConjugateGradient,
    Implicit,
    Neumann,
    OneStepLookahead,
    Unrolled,
)
from selfcal.bilevel._tree import tree_leaves


def unrolled_objective(problem, theta, state, steps):
    """``w -> f(theta_T(w), w)``, plain forward evaluation (for finite differences)."""

    def objective(w):
        theta_t, _ = problem.run_inner(theta, w, state, steps)
        return problem.outer_loss(theta_t, w)

    return objective


def weights(n: int = 24, seed: int = 1) -> torch.Tensor:
    return 0.5 + torch.rand(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize(
    "optimizer",
    [
        SGD(lr=0.3, momentum=0.9, weight_decay=1e-3),
        Adam(lr=0.05, eps_root=1e-12, weight_decay=1e-3),
    ],
    ids=["sgd", "adam"],
)
def test_unrolled_equals_finite_differences(optimizer):
    model, data = tanh_net(), classification_data()
    base = weighted_ce_problem(model, data, optimizer)
    # add a direct dependence of f on w, so both terms of dF/dw are exercised
    problem = BilevelProblem(
        base.inner_loss, lambda th, w: base.outer_loss(th, w) + 0.01 * torch.sum(w**3), optimizer
    )
    theta, w = params_of(model), weights()
    state = optimizer.init(theta)
    # warm start: a few steps in, so the optimizer state is not at its initial zeros
    theta, state = problem.run_inner(theta, w, state, 3)
    result = Unrolled(steps=6)(problem, w, theta, state)
    expected = central_differences(unrolled_objective(problem, theta, state, 6), w)
    assert relative_error(result.grad, expected) < 1e-6
    torch.testing.assert_close(result.outer_loss, unrolled_objective(problem, theta, state, 6)(w))


def autograd_truncated_hypergradient(problem, w, theta, state, steps, backprop_steps):
    """Independent route: ``torch.autograd`` with ``create_graph`` and an explicit
    ``detach()`` of parameters and optimizer state after the first ``steps - backprop_steps``
    steps."""
    w = w.clone().requires_grad_()
    theta = {k: v.clone().requires_grad_() for k, v in theta.items()}
    for k in range(steps):
        if k == steps - backprop_steps:
            theta = {name: v.detach().requires_grad_() for name, v in theta.items()}
            state = type(state)(*(s.detach() for s in state))
        loss = problem.inner_loss(theta, w)
        grads = torch.autograd.grad(loss, list(theta.values()), create_graph=True)
        grads = dict(zip(theta, grads, strict=True))
        theta, state = problem.inner_optimizer.step(theta, grads, state)
    return torch.autograd.grad(problem.outer_loss(theta, w), w)[0]


def test_backprop_steps_truncation_equals_explicit_detach():
    model, data, optimizer = tanh_net(), classification_data(), Adam(lr=0.05)
    problem = weighted_ce_problem(model, data, optimizer)
    theta, w = params_of(model), weights()
    state = optimizer.init(theta)
    truncated = Unrolled(steps=5, backprop_steps=2)(problem, w, theta, state).grad
    expected = autograd_truncated_hypergradient(problem, w, theta, state, 5, 2)
    torch.testing.assert_close(truncated, expected, atol=1e-12, rtol=1e-9)
    full = Unrolled(steps=5)(problem, w, theta, state).grad
    torch.testing.assert_close(
        full,
        autograd_truncated_hypergradient(problem, w, theta, state, 5, 5),
        atol=1e-12,
        rtol=1e-9,
    )
    assert relative_error(truncated, full) > 1e-3  # truncation really drops terms


def test_one_step_lookahead_is_last_step_backprop_and_matches_closed_form():
    model, data, optimizer = tanh_net(), classification_data(), SGD(lr=0.3)
    problem = weighted_ce_problem(model, data, optimizer)
    theta, w = params_of(model), weights()
    state = optimizer.init(theta)
    torch.testing.assert_close(
        OneStepLookahead(steps=4)(problem, w, theta, state).grad,
        Unrolled(steps=4, backprop_steps=1)(problem, w, theta, state).grad,
    )
    # SGD lookahead: theta' = theta - lr grad g(theta, w); dF/dw = -lr (d^2 g/dw dtheta)^T
    # grad f(theta'); the mixed term by autograd on <grad_theta g, v>
    result = OneStepLookahead()(problem, w, theta, state)
    grad_f = torch.func.grad(problem.outer_loss)(result.theta, w)
    w_leaf = w.clone().requires_grad_()
    inner_grad = torch.func.grad(problem.inner_loss)(theta, w_leaf)
    along = sum(torch.sum(inner_grad[k] * grad_f[k]) for k in theta)
    expected = -0.3 * torch.autograd.grad(along, w_leaf)[0]
    torch.testing.assert_close(result.grad, expected, atol=1e-12, rtol=1e-9)


@pytest.mark.parametrize(
    "optimizer",
    [
        SGD(lr=0.3),
        SGD(lr=0.3, momentum=0.9, weight_decay=1e-3),
        Adam(lr=0.05, eps_root=1e-12, weight_decay=1e-3),
    ],
    ids=["sgd", "sgd-momentum", "adam"],
)
@pytest.mark.parametrize("steps", [1, 3])
def test_autograd_lookahead_equals_one_step_lookahead(optimizer, steps):
    """The plain-autograd fast path against the torch.func reference, optimizer state in the
    differentiated step included (momentum buffer, Adam moments after a warm start), with
    a direct dependence of f on w; results carry no graph."""
    model, data = tanh_net(), classification_data()
    base = weighted_ce_problem(model, data, optimizer)
    problem = BilevelProblem(
        base.inner_loss, lambda th, w: base.outer_loss(th, w) + 0.01 * torch.sum(w**3), optimizer
    )
    theta, w = params_of(model), weights()
    theta, state = problem.run_inner(theta, w, optimizer.init(theta), 2)
    theta = {k: v.requires_grad_() for k, v in theta.items()}
    fast = AutogradLookahead(steps)(problem, w.requires_grad_(), theta, state)
    reference = OneStepLookahead(steps)(problem, w, theta, state)
    assert float(fast.grad.abs().max()) > 1e-6
    for got, want in zip(tree_leaves(tuple(fast)), tree_leaves(tuple(reference)), strict=True):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-10)
        assert got.grad_fn is None and not got.requires_grad


@pytest.mark.parametrize(
    "optimizer",
    [SGD(lr=0.3, momentum=0.9, weight_decay=1e-3), Adam(lr=0.05, eps_root=1e-12)],
    ids=["sgd-momentum", "adam"],
)
@pytest.mark.parametrize("steps, backprop", [(1, None), (4, None), (4, 2)])
@pytest.mark.parametrize("stochastic", [False, True], ids=["one-loss", "loss-per-step"])
def test_autograd_unrolled_is_unrolled_bit_for_bit(optimizer, steps, backprop, stochastic):
    """The plain-autograd unrolled estimator (the minibatch BO4SC's default) takes the same
    operations as the torch.func reference: the same hypergradient, iterate, optimizer
    state and outer loss, bit for bit, through every differentiated step (a different loss
    per step included); results carry no graph. ``AutogradLookahead`` is its
    ``backprop_steps=1``."""
    model, data = tanh_net(), classification_data()
    base = weighted_ce_problem(model, data, optimizer)
    inner = (
        [lambda th, w, k=k: (1 + 0.1 * k) * base.inner_loss(th, w) for k in range(steps)]
        if stochastic
        else base.inner_loss
    )
    problem = BilevelProblem(
        inner, lambda th, w: base.outer_loss(th, w) + 0.01 * torch.sum(w**3), optimizer
    )
    theta, w = params_of(model), weights()
    state = optimizer.init(theta)
    fast = AutogradUnrolled(steps, backprop)(problem, w, theta, state)
    reference = Unrolled(steps, backprop)(problem, w, theta, state)
    assert float(fast.grad.abs().max()) > 1e-6
    for got, want in zip(tree_leaves(tuple(fast)), tree_leaves(tuple(reference)), strict=True):
        assert torch.equal(got, want)
        assert got.grad_fn is None and not got.requires_grad
    if backprop is None and steps == 1:
        lookahead = AutogradLookahead(1)(problem, w, theta, state)
        assert all(
            torch.equal(a, b)
            for a, b in zip(tree_leaves(tuple(lookahead)), tree_leaves(tuple(fast)), strict=True)
        )


def test_autograd_lookahead_gives_zero_for_an_unused_outer_parameter():
    model, data, optimizer = tanh_net(), classification_data(), SGD(lr=0.3)
    base = weighted_ce_problem(model, data, optimizer)
    problem = BilevelProblem(
        lambda th, phi: base.inner_loss(th, phi["w"]),
        lambda th, phi: base.outer_loss(th, phi["w"]),
        optimizer,
    )
    theta = params_of(model)
    phi = {"w": weights(), "unused": torch.ones(3, dtype=torch.float64)}
    fast = AutogradLookahead()(problem, phi, theta, optimizer.init(theta))
    reference = OneStepLookahead()(problem, phi, theta, optimizer.init(theta))
    torch.testing.assert_close(fast.grad, reference.grad, atol=1e-12, rtol=1e-10)
    assert torch.equal(fast.grad["unused"], torch.zeros(3, dtype=torch.float64))


# --------------------------------------------------------------- implicit estimators
def ridge_problem(seed: int = 0, n: int = 20, dim: int = 4, ridge: float = 0.3):
    """Weighted ridge regression: ``g = (1/n) sum w_i (x_i.theta - y_i)^2 + ridge |theta|^2``,
    ``f`` = validation mean squared error. ``theta*(w)`` has a closed form."""
    gen = torch.Generator().manual_seed(seed)
    x, xv = (torch.randn(m, dim, generator=gen, dtype=torch.float64) for m in (n, 15))
    true = torch.randn(dim, generator=gen, dtype=torch.float64)
    y = x @ true + 0.5 * torch.randn(n, generator=gen, dtype=torch.float64)
    yv = xv @ true

    def inner_loss(theta, w):
        return torch.mean(w * (x @ theta["t"] - y) ** 2) + ridge * torch.sum(theta["t"] ** 2)

    def outer_loss(theta, w):
        return torch.mean((xv @ theta["t"] - yv) ** 2)

    def closed_form_objective(w):
        gram = x.T @ (w[:, None] * x) / n + ridge * torch.eye(dim, dtype=torch.float64)
        return outer_loss({"t": torch.linalg.solve(gram, x.T @ (w * y) / n)}, w)

    return inner_loss, outer_loss, closed_form_objective, dim


@pytest.mark.parametrize(
    "solver",
    [ConjugateGradient(iterations=4), Neumann(alpha=0.2, iterations=400)],
    ids=["cg", "neumann"],
)
def test_implicit_equals_closed_form_ridge_hypergradient(solver):
    inner_loss, outer_loss, closed_form, dim = ridge_problem()
    optimizer = SGD(lr=0.2)
    problem = BilevelProblem(inner_loss, outer_loss, optimizer)
    theta = {"t": torch.zeros(dim, dtype=torch.float64)}
    w = weights(20)
    result = Implicit(steps=300, solver=solver)(problem, w, theta, optimizer.init(theta))
    w_leaf = w.clone().requires_grad_()
    expected = torch.autograd.grad(closed_form(w_leaf), w_leaf)[0]
    assert relative_error(result.grad, expected) < 1e-8


def logistic_problem(optimizer, ridge=0.3):
    """L2-regularised multinomial logistic regression (strongly convex inner problem)."""
    model = nn.Linear(2, 3).double()
    data = classification_data(seed=3)
    nn.init.zeros_(model.weight), nn.init.zeros_(model.bias)
    return model, weighted_ce_problem(model, data, optimizer, ridge=ridge)


@pytest.mark.parametrize(
    "solver",
    [ConjugateGradient(iterations=12), Neumann(alpha=0.5, iterations=80)],
    ids=["cg", "neumann"],
)
def test_implicit_matches_unrolled_to_convergence(solver):
    optimizer = SGD(lr=0.5)
    model, problem = logistic_problem(optimizer)
    theta, w = params_of(model), weights()
    state = optimizer.init(theta)
    unrolled = Unrolled(steps=80)(problem, w, theta, state)
    implicit = Implicit(steps=80, solver=solver)(problem, w, theta, state)
    assert relative_error(implicit.grad, unrolled.grad) < 1e-8  # measured: ~1e-14
    for k in theta:
        torch.testing.assert_close(implicit.theta[k], unrolled.theta[k])


def test_neumann_implicit_at_the_optimum_equals_unrolled_gd_exactly():
    """From a warm start at theta*, K unrolled GD steps of size a give exactly
    -(d^2 g/dw dtheta)^T a sum_{j<K} (I - a H)^j grad f: a Neumann series of K - 1 terms."""
    optimizer = SGD(lr=0.5)
    model, problem = logistic_problem(optimizer)
    theta, w = params_of(model), weights()
    theta_star, state = problem.run_inner(theta, w, optimizer.init(theta), 400)
    unrolled = Unrolled(steps=7)(problem, w, theta_star, state)
    implicit = Implicit(steps=0, solver=Neumann(alpha=0.5, iterations=6))(
        problem, w, theta_star, state
    )
    torch.testing.assert_close(implicit.grad, unrolled.grad, atol=1e-12, rtol=1e-8)


# ------------------------------------------------------------------ robustness
def dead_relu_net() -> nn.Module:
    """ReLU net whose hidden unit 0 is dead for every input (bias -1000, zero weights)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 3)).double()
    with torch.no_grad():
        model[0].weight[0] = 0.0
        model[0].bias[0] = -1000.0
    return model


@pytest.mark.parametrize("estimator", [Unrolled(3), OneStepLookahead(2)])
def test_hypergradient_finite_with_dead_relus_only_with_eps_root(estimator):
    model, data = dead_relu_net(), classification_data()
    theta, w = params_of(model), weights()
    finite = Adam(lr=0.05, eps_root=1e-12)
    problem = weighted_ce_problem(model, data, finite)
    result = estimator(problem, w, theta, finite.init(theta))
    assert torch.isfinite(result.grad).all()
    assert float(result.grad.abs().max()) > 0
    plain = Adam(lr=0.05, eps_root=0.0)  # the construction really reaches v = 0
    problem = weighted_ce_problem(model, data, plain)
    assert torch.isnan(estimator(problem, w, theta, plain.init(theta)).grad).any()


ESTIMATORS = [
    Unrolled(3),
    Unrolled(3, backprop_steps=1),
    OneStepLookahead(2),
    Implicit(3, ConjugateGradient(5, damping=0.1)),
    Implicit(3, Neumann(0.1, 5)),
]
IDS = ["unrolled", "truncated", "lookahead", "implicit-cg", "implicit-neumann"]


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=IDS)
def test_returned_warm_start_and_gradient_carry_no_graph(estimator):
    model, data, optimizer = tanh_net(), classification_data(), Adam(lr=0.05)
    problem = weighted_ce_problem(model, data, optimizer)
    theta = {k: v.requires_grad_() for k, v in params_of(model).items()}
    w = weights().requires_grad_()
    result = estimator(problem, w, theta, optimizer.init(theta))
    for leaf in tree_leaves(tuple(result)):
        assert leaf.grad_fn is None and not leaf.requires_grad


STACK_MODEL = tanh_net()


def stacked_problem(x_train, y_train, x_val, y_val, lr):
    """One member of a vmapped batch: the closures are built inside the vmapped function."""
    return weighted_ce_problem(STACK_MODEL, (x_train, y_train, x_val, y_val), Adam(lr=lr))


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=IDS)
def test_vmap_over_stacked_problems_equals_loop(estimator):
    datasets = [classification_data(seed=s) for s in range(3)]
    data = tuple(torch.stack(parts) for parts in zip(*datasets, strict=True))
    thetas = [params_of(tanh_net(seed=s)) for s in range(3)]
    theta = {k: torch.stack([t[k] for t in thetas]) for k in thetas[0]}
    w = torch.stack([weights(seed=s) for s in range(3)])
    lrs = torch.tensor([0.01, 0.05, 0.1], dtype=torch.float64)

    def one(theta_, w_, lr, *data_):
        problem = stacked_problem(*data_, lr)
        return estimator(problem, w_, theta_, problem.inner_optimizer.init(theta_))

    batched = vmap(one)(theta, w, lrs, *data)
    for i in range(3):
        single = one(thetas[i], w[i], lrs[i], *(d[i] for d in data))
        for got, want in zip(tree_leaves(tuple(batched)), tree_leaves(tuple(single)), strict=True):
            torch.testing.assert_close(got[i], want, atol=1e-12, rtol=1e-9)


def test_dict_outer_parameters():
    """phi may be a dict of tensors (e.g. a gamma-Net's parameters): per-sample log-weights
    and a global scale here, checked against finite differences."""
    model, data, optimizer = tanh_net(), classification_data(), SGD(lr=0.3)
    x_train, y_train, x_val, y_val = data

    def inner_loss(theta, phi):
        ce = F.cross_entropy(functional_call(model, theta, (x_train,)), y_train, reduction="none")
        return phi["scale"] * torch.mean(torch.exp(phi["log_w"]) * ce)

    def outer_loss(theta, phi):
        return F.cross_entropy(functional_call(model, theta, (x_val,)), y_val)

    problem = BilevelProblem(inner_loss, outer_loss, optimizer)
    theta = params_of(model)
    phi = {"log_w": 0.1 * weights(), "scale": torch.tensor(1.5, dtype=torch.float64)}
    result = Unrolled(4)(problem, phi, theta, optimizer.init(theta))
    objective = unrolled_objective(problem, theta, optimizer.init(theta), 4)
    fd_scale = central_differences(
        lambda s: objective({"log_w": phi["log_w"], "scale": s[0]}), phi["scale"].reshape(1)
    )
    fd_w = central_differences(
        lambda lw: objective({"log_w": lw, "scale": phi["scale"]}), phi["log_w"]
    )
    assert relative_error(result.grad["log_w"], fd_w) < 1e-6
    assert relative_error(result.grad["scale"].reshape(1), fd_scale) < 1e-6


@pytest.mark.parametrize(
    "make",
    [
        lambda: Unrolled(0),
        lambda: Unrolled(3, backprop_steps=4),
        lambda: Unrolled(3, backprop_steps=0),
        lambda: OneStepLookahead(0),
        lambda: AutogradLookahead(0),
        lambda: AutogradUnrolled(3, backprop_steps=4),
        lambda: Implicit(-1),
        lambda: Unrolled(2.0),
    ],
)
def test_bad_estimator_settings_raise(make):
    with pytest.raises(ValueError):
        make()
