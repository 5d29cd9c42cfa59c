"""Shared helpers for the loss tests (importable thanks to conftest.py): independent reference
formulas (numpy per-sample values, written from the papers' definitions without any selfcal
code) and random batches."""

from __future__ import annotations

import numpy as np
import torch


def make_batch(seed: int, n: int = 24, c: int = 5, scale: float = 3.0):
    """Float64 logits (as numpy) and labels, with a mix of confident and confused rows."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    z = rng.normal(size=(n, c)) * scale
    z[np.arange(n), y] += rng.uniform(-2, 4, n)
    return z, y


def as_torch(z: np.ndarray, y: np.ndarray, grad: bool = True):
    logits = torch.tensor(z, dtype=torch.float64, requires_grad=grad)
    return logits, torch.tensor(y)


def softmax_np(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def p_true_np(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    return softmax_np(z)[np.arange(len(y)), y]


def ce_np(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    return -np.log(p_true_np(z, y))


def runner_up_np(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Largest probability strictly below p_y (0 if none), by a plain loop."""
    out = np.zeros(len(y))
    for i in range(len(y)):
        below = [p[i, k] for k in range(p.shape[1]) if p[i, k] < p[i, y[i]]]
        out[i] = max(below) if below else 0.0
    return out


def focal_weight_np(z, y, gamma):
    return (1 - p_true_np(z, y)) ** gamma


def flsd53_weight_np(z, y):
    p_y = p_true_np(z, y)
    return np.where(p_y < 0.2, (1 - p_y) ** 5, (1 - p_y) ** 3)


def dfl_weight_np(z, y, gamma):
    p = softmax_np(z)
    return (1 - p[np.arange(len(y)), y] + runner_up_np(p, y)) ** gamma


def brier_weight_np(z, y, gamma, norm):
    residual = softmax_np(z) - np.eye(z.shape[1])[y]
    return np.linalg.norm(residual, ord=norm, axis=1) ** gamma


def brier_np(z, y):
    return ((softmax_np(z) - np.eye(z.shape[1])[y]) ** 2).sum(axis=1)


def reduce_np(per_sample: np.ndarray, reduction: str):
    if reduction == "sum":
        return per_sample.sum()
    if reduction == "mean":
        return per_sample.mean()
    return per_sample
