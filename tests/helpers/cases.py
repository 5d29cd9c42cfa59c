"""Randomized prediction sets covering the cases that break calibration code: binary, C = 100,
ties, confidences of exactly 0 and 1, empty bins, a single sample (the ``case`` fixture of the
conftest draws from them)."""

from __future__ import annotations

import numpy as np
import torch

N_CASES = 200


def make_case(seed: int) -> dict:
    """One random case: ``{"probs" or "logits": array, "labels": array, "tag": str}``."""
    rng = np.random.default_rng(seed)
    c = int(rng.choice([2, 3, 5, 10, 100]))
    n = int(rng.choice([1, 7, 40, 300, 2000]))
    tag = ["smooth", "ties", "saturated", "few", "edges"][seed % 5]
    y = rng.integers(0, c, n)
    if tag == "smooth":
        z = rng.normal(size=(n, c)) * rng.uniform(0.1, 6)
        z[np.arange(n), y] += rng.uniform(0, 4)
        return {"logits": z, "labels": y, "tag": tag}
    if tag == "ties":  # coarse logits: tied confidences and tied argmax
        z = rng.integers(-2, 3, size=(n, c)).astype(float)
        return {"logits": z, "labels": y, "tag": tag}
    if tag == "saturated":  # exact 0/1 probabilities mixed with ordinary rows
        p = rng.dirichlet(np.full(c, 0.3), size=n)
        onehot = rng.uniform(size=n) < 0.5
        p[onehot] = np.eye(c)[rng.integers(0, c, onehot.sum())]
        return {"probs": p, "labels": y, "tag": tag}
    if tag == "few":  # very few samples: most bins empty
        n = int(rng.integers(1, 6))
        z = rng.normal(size=(n, c)) * 3
        return {"logits": z, "labels": rng.integers(0, c, n), "tag": tag}
    # confidences exactly on equal-width bin edges m/15 (and 1.0)
    conf = rng.integers(max(1, int(np.ceil(15 / c))), 16, n) / 15
    rest = (1 - conf)[:, None] * rng.dirichlet(np.ones(c - 1), size=n)
    rest = np.minimum(rest, conf[:, None])  # keep the top class on top
    rest *= ((1 - conf) / np.maximum(rest.sum(1), 1e-300))[:, None]
    top = rng.integers(0, c, n)
    p = np.empty((n, c))
    for i in range(n):
        p[i] = np.insert(rest[i], top[i], conf[i])
    return {"probs": p, "labels": y, "tag": tag}


def case_kwargs(case: dict) -> dict:
    return {k: v for k, v in case.items() if k != "tag"}


def case_probs(case: dict) -> np.ndarray:
    if "probs" in case:
        return case["probs"]
    return torch.softmax(torch.tensor(case["logits"], dtype=torch.float64), 1).numpy()
