"""Differentiable optimizers against torch.optim, and their derivatives."""

from __future__ import annotations

import pytest
import torch
from torch.func import jacrev, vmap

from selfcal.optim import SGD, Adam


def quadratic_problem(dtype=torch.float64, seed: int = 0):
    """Parameters and a loss with non-trivial, changing gradients (a small least squares
    with a tanh feature), so moments evolve over the 20 steps."""
    gen = torch.Generator().manual_seed(seed)
    params = {
        "a": torch.randn(3, 4, generator=gen, dtype=dtype),
        "b": torch.randn(4, generator=gen, dtype=dtype),
    }
    x = torch.randn(10, 3, generator=gen, dtype=dtype)
    target = torch.randn(10, 4, generator=gen, dtype=dtype)

    def loss(p):
        return torch.mean((torch.tanh(x @ p["a"]) + p["b"] - target) ** 2)

    return params, loss


def torch_trajectory(make_optim, params, loss, steps=20):
    leaves = {k: v.clone().requires_grad_() for k, v in params.items()}
    optim = make_optim(list(leaves.values()))
    out = []
    for _ in range(steps):
        optim.zero_grad()
        loss(leaves).backward()
        optim.step()
        out.append({k: v.detach().clone() for k, v in leaves.items()})
    return out


def functional_trajectory(opt, params, loss, steps=20):
    state, out = opt.init(params), []
    for _ in range(steps):
        params, state = opt.step(params, torch.func.grad(loss)(params), state)
        out.append(params)
    return out


def assert_same_trajectory(ours, theirs, atol):
    for mine, ref in zip(ours, theirs, strict=True):
        for k in ref:
            torch.testing.assert_close(mine[k], ref[k], atol=atol, rtol=0)


@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-12), (torch.float32, 1e-6)])
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"betas": (0.5, 0.9), "eps": 1e-3},
        {"weight_decay": 0.1},
    ],
)
def test_adam_matches_torch_optim(dtype, atol, kwargs):
    params, loss = quadratic_problem(dtype)
    ours = functional_trajectory(Adam(lr=0.05, eps_root=0.0, **kwargs), params, loss)
    ref = torch_trajectory(
        lambda p: torch.optim.Adam(p, lr=0.05, foreach=False, **kwargs), params, loss
    )
    assert_same_trajectory(ours, ref, atol)


@pytest.mark.parametrize("kwargs", [{}, {"momentum": 0.9}, {"momentum": 0.5, "weight_decay": 0.05}])
def test_sgd_matches_torch_optim(kwargs):
    params, loss = quadratic_problem()
    ours = functional_trajectory(SGD(lr=0.1, **kwargs), params, loss)
    ref = torch_trajectory(lambda p: torch.optim.SGD(p, lr=0.1, **kwargs), params, loss)
    assert_same_trajectory(ours, ref, 1e-12)


@pytest.mark.parametrize("max_norm", [0.05, 100.0])
def test_sgd_clipping_matches_clip_grad_norm_then_torch_sgd(max_norm):
    """``SGD(max_norm=c)`` = ``clip_grad_norm_(params, c)`` before ``torch.optim.SGD.step``
    (0.05 clips every step of this problem, 100 none)."""
    params, loss = quadratic_problem()
    leaves = {k: v.clone().requires_grad_() for k, v in params.items()}
    optim = torch.optim.SGD(list(leaves.values()), lr=0.1, momentum=0.9, weight_decay=0.01)
    ours = SGD(0.1, momentum=0.9, weight_decay=0.01, max_norm=max_norm)
    mine, state = params, ours.init(params)
    for _ in range(20):
        optim.zero_grad()
        loss(leaves).backward()
        torch.nn.utils.clip_grad_norm_(list(leaves.values()), max_norm)
        optim.step()
        mine, state = ours.step(mine, torch.func.grad(loss)(mine), state)
        for k in leaves:
            torch.testing.assert_close(mine[k], leaves[k].detach(), atol=1e-12, rtol=0)


def test_eps_root_changes_the_update_by_its_size_only():
    params, loss = quadratic_problem()
    plain = functional_trajectory(Adam(lr=0.05, eps_root=0.0), params, loss)
    rooted = functional_trajectory(Adam(lr=0.05, eps_root=1e-12), params, loss)
    diff = max(
        float((a[k] - b[k]).abs().max()) for a, b in zip(plain, rooted, strict=True) for k in a
    )
    assert 0 < diff < 1e-6


def test_tensor_hyperparameters_equal_floats_and_vmap_over_lr():
    params, loss = quadratic_problem()
    as_float = functional_trajectory(Adam(lr=0.05, betas=(0.8, 0.99)), params, loss, 5)
    f64 = torch.float64
    as_tensor = functional_trajectory(
        Adam(
            lr=torch.tensor(0.05, dtype=f64),
            betas=(torch.tensor(0.8, dtype=f64), torch.tensor(0.99, dtype=f64)),
        ),
        params,
        loss,
        5,
    )
    assert_same_trajectory(as_tensor, as_float, 1e-12)

    lrs = torch.tensor([0.01, 0.05, 0.2], dtype=torch.float64)
    batched = vmap(lambda lr: functional_trajectory(Adam(lr=lr), params, loss, 5)[-1])(lrs)
    for i, lr in enumerate(lrs.tolist()):
        single = functional_trajectory(Adam(lr=lr), params, loss, 5)[-1]
        for k in single:
            torch.testing.assert_close(batched[k][i], single[k], atol=1e-12, rtol=0)


def step_jacobian(opt, grads_value: float):
    """d theta_1 / d grad of one step, at a gradient that is ``grads_value`` everywhere."""
    params = {"w": torch.ones(3, dtype=torch.float64)}
    state = opt.init(params)

    def update(g):
        return opt.step(params, {"w": g}, state)[0]["w"]

    return jacrev(update)(torch.full((3,), grads_value, dtype=torch.float64))


def test_adam_step_derivative_is_finite_at_zero_gradient_only_with_eps_root():
    """A parameter behind a dead ReLU has g = 0, so v = 0 and d sqrt(v)/dv = inf."""
    assert torch.isnan(step_jacobian(Adam(lr=0.1, eps_root=0.0), 0.0)).any()
    jac = step_jacobian(Adam(lr=0.1, eps_root=1e-12), 0.0)
    assert torch.isfinite(jac).all()
    # through mu only: -lr * (1 - b1) / (1 - b1) / (sqrt(eps_root) + eps) on the diagonal
    expected = -0.1 / (1e-6 + 1e-8)
    torch.testing.assert_close(jac, expected * torch.eye(3, dtype=torch.float64))


def test_sgd_init_state():
    params = {"w": torch.ones(2)}
    assert SGD(0.1).init(params).momentum == {}
    torch.testing.assert_close(SGD(0.1, momentum=0.9).init(params).momentum["w"], torch.zeros(2))


@pytest.mark.parametrize(
    "make",
    [
        lambda: Adam(lr=-0.1),
        lambda: Adam(lr=float("nan")),
        lambda: Adam(lr=0.1, betas=(1.0, 0.999)),
        lambda: Adam(lr=0.1, betas=(0.9,)),
        lambda: Adam(lr=0.1, eps_root=-1.0),
        lambda: Adam(lr=torch.ones(2)),
        lambda: SGD(lr=0.1, momentum=1.0),
        lambda: SGD(lr=0.1, weight_decay=-1e-3),
        lambda: SGD(lr="0.1"),
    ],
)
def test_bad_hyperparameters_raise(make):
    with pytest.raises(ValueError):
        make()


def test_bad_params_raise():
    with pytest.raises(ValueError, match="non-empty dict"):
        Adam(0.1).init({})
    with pytest.raises(ValueError, match="one dtype"):
        Adam(0.1).init({"a": torch.ones(2), "b": torch.ones(2, dtype=torch.float64)})
