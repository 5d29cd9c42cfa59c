"""Small bilevel problems shared by the bilevel tests (float64, seeded)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from selfcal.bilevel import BilevelProblem
from selfcal.optim import Optimizer


def tanh_net(seed: int = 0, hidden: int = 6, classes: int = 3) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(2, hidden), nn.Tanh(), nn.Linear(hidden, classes)).double()


def classification_data(seed: int = 0, n_train: int = 24, n_val: int = 16, classes: int = 3):
    """``(x_train, y_train, x_val, y_val)``: Gaussian blobs around ``classes`` centres."""
    gen = torch.Generator().manual_seed(seed)
    centres = 2.0 * torch.randn(classes, 2, generator=gen, dtype=torch.float64)

    def sample(n: int):
        y = torch.randint(0, classes, (n,), generator=gen)
        return centres[y] + torch.randn(n, 2, generator=gen, dtype=torch.float64), y

    return (*sample(n_train), *sample(n_val))


def params_of(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: p.detach().clone() for k, p in model.named_parameters()}


def weighted_ce_problem(
    model: nn.Module, data, optimizer: Optimizer, ridge: float = 0.0
) -> BilevelProblem:
    """Inner: ``mean(w * CE) + ridge * |theta|^2`` on train; outer: mean CE on validation
    (smooth in theta, no direct dependence on w)."""
    x_train, y_train, x_val, y_val = data

    def inner_loss(theta, w):
        ce = F.cross_entropy(functional_call(model, theta, (x_train,)), y_train, reduction="none")
        penalty = sum(torch.sum(p * p) for p in theta.values())
        return torch.mean(w * ce) + ridge * penalty

    def outer_loss(theta, w):
        return F.cross_entropy(functional_call(model, theta, (x_val,)), y_val)

    return BilevelProblem(inner_loss, outer_loss, optimizer)


def central_differences(fn, x: torch.Tensor, h: float = 1e-6) -> torch.Tensor:
    """``(fn(x + h e_i) - fn(x - h e_i)) / 2h`` for every coordinate of the 1-D ``x``."""
    out = torch.empty_like(x)
    for i in range(x.numel()):
        step = torch.zeros_like(x)
        step[i] = h
        out[i] = (fn(x + step) - fn(x - step)) / (2 * h)
    return out


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))


# ------------------------------------------------------------- meta-learning (γ-Net, unit-wise L2)
META_LR_STEP = 0.3
"""The lookahead's (and the real SGD step's) learning rate in the meta tests."""


def tiny_meta_setup(method: str):
    """A 2-layer MLP (4 -> 5 -> head 3), 8 train and 8 meta-val samples, float64, and a meta
    module whose parameters are all active (γ-Net read-out and L2 coefficients non-zero)."""
    from selfcal.bilevel import GammaNet, UnitL2
    from selfcal.models import MLP

    torch.manual_seed(0)
    model = MLP(4, 3, hidden=(5,), activation="tanh").double()
    x, xm = torch.randn(8, 4, dtype=torch.float64), torch.randn(8, 4, dtype=torch.float64)
    y, ym = torch.randint(0, 3, (8,)), torch.randint(0, 3, (8,))
    if method == "gamma-net":
        meta = GammaNet(5, 3, tau=0.5).double()
        with torch.no_grad():
            meta.readout.weight.normal_(0, 0.5)
            meta.prototypes.mul_(3)
    else:
        meta = UnitL2(model.head).double()
        with torch.no_grad():
            for p in meta.parameters():
                p.uniform_(0.05, 0.4)
    return model, meta, (x, y), (xm, ym)


def meta_batch_for(model, train, meta_val, with_meta_features=True):
    from selfcal.bilevel import MetaBatch

    with torch.no_grad():
        features = model.features(train[0])
        meta_features = model.features(meta_val[0]) if with_meta_features else None
    return MetaBatch(*train, features, *meta_val, meta_features)


# ----------------------------------------------------------------------------- BO4SC estimator
def noisy_blobs(n_train=200, n_val=150, noise=0.2, seed=0):
    """3 well-separated blobs; a fraction ``noise`` of the training labels is flipped."""
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])

    def sample(n):
        y = rng.integers(0, 3, n)
        return (centres[y] + rng.normal(size=(n, 2))).astype(np.float32), y

    (x_train, y_train), (x_val, y_val) = sample(n_train), sample(n_val)
    flipped = rng.random(n_train) < noise
    y_train[flipped] = (y_train[flipped] + rng.integers(1, 3, flipped.sum())) % 3
    return x_train, y_train, x_val, y_val, flipped


def mlp(seed=0):
    """A 2-32-32-3 ReLU MLP, seeded."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 3)
    )
