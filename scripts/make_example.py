"""Regenerate the bundled example predictions in ``src/selfcal/examples/``.

Trains a small MLP on scikit-learn's 8x8 digits (CPU, seeded, a few seconds) and writes the
validation and test logits with their labels to ``digits_val.npz`` and ``digits_test.npz``.
The network is trained long and without regularisation, so -- like most modern networks -- it
is over-confident, which makes it a useful example for ``selfcal evaluate`` and ``calibrate``.

Usage: ``python scripts/make_example.py [--out-dir DIR]``
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits

SEED = 0
OUT_DIR = Path(__file__).resolve().parents[1] / "src" / "selfcal" / "examples"
SPLIT = (0.2, 0.4, 0.4)  # train, validation, test (a small train split -> over-confident)
EPOCHS = 500
HIDDEN = 32


def split_data(seed: int = SEED) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Digits features scaled to [0, 1], shuffled and split into train / val / test."""
    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(seed).permutation(len(y))
    x = torch.tensor(x[order] / 16.0, dtype=torch.float32)
    y = torch.tensor(y[order], dtype=torch.long)
    n_train = int(SPLIT[0] * len(y))
    n_val = int(SPLIT[1] * len(y))
    cuts = (0, n_train, n_train + n_val, len(y))
    names = ("train", "val", "test")
    return {n: (x[a:b], y[a:b]) for n, a, b in zip(names, cuts[:-1], cuts[1:])}


def train(x: torch.Tensor, y: torch.Tensor, seed: int = SEED) -> torch.nn.Module:
    """Full-batch Adam on a 64-32-10 MLP, long enough to over-fit the training split."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(x.shape[1], HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 10)
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(EPOCHS):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return model.eval()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    data = split_data()
    model = train(*data["train"])
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for split in ("val", "test"):
        x, y = data[split]
        with torch.no_grad():
            logits = model(x).numpy().astype(np.float32)
        path = args.out_dir / f"digits_{split}.npz"
        np.savez_compressed(path, logits=logits, labels=y.numpy().astype(np.int64))
        acc = float((logits.argmax(1) == y.numpy()).mean())
        print(f"wrote {path} ({len(y)} rows, accuracy {acc:.3f}, {path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
