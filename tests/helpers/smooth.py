"""What the smooth-metric tests share: random logits, the loop transcription of the soft
accuracy (read by SECE and DECE) and small inputs for gradient checks."""

from __future__ import annotations

import math

import numpy as np
import torch


def random_logits(rng, n, c, scale=None):
    scale = rng.uniform(0.3, 4.0) if scale is None else scale
    return rng.normal(size=(n, c)) * scale, rng.integers(0, c, n)


def spec_soft_accuracy(p, y, t_a):
    out = []
    for i in range(len(y)):
        rank = 0.5
        for ell in range(p.shape[1]):
            rank += 1.0 / (1.0 + math.exp(-t_a * (p[i, ell] - p[i, y[i]])))
        out.append(max(0.0, 2.0 - rank))
    return out


def grad_inputs(n=7, c=3, seed=0):
    rng = np.random.default_rng(seed)
    z, y = random_logits(rng, n, c, 2.0)
    return torch.from_numpy(z).requires_grad_(True), torch.from_numpy(y)
