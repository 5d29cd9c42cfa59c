"""[GRA]'s toy study: do sample-wise uncertainty metrics track the true calibration error?

Setup (methods §8.5, following the authors' notebook where the paper is vague):

* 5 classes, class ``k`` is ``N(mu_k, I)`` in 2-D with ``mu_k ~ U[-10, 10]^2`` (seeded);
  10,000 training, 1,000 validation and 1,000 test points per class, equal priors.
* A 2-layer MLP (2 -> 10 -> ReLU -> 5) trained with mean cross-entropy by plain SGD, lr 1,
  batch 1000, one pass over the reshuffled training set (the notebook's setup; the paper's
  "two-layer CNN, 5 epochs" is not what the code ran). **Choice:** the inputs are standardised
  with the training set's per-feature mean and standard deviation. The notebook's lr 1 comes
  from its 2-class data with means at +-1.5; on raw 5-class data with means up to +-10 the
  same step size diverges for some seeds and leaves most others at 20-80% accuracy with dead
  ReLUs, so that the "calibration error" is mostly that of a broken model.
* Ground truth: ``eta_k(x) = N(x; mu_k, I) / sum_j N(x; mu_j, I)`` (a softmax of
  ``-||x - mu_k||^2 / 2``), and the calibration error of the true class
  ``c(x) = eta_y(x) - p_y(x)`` -- signed, as in the notebook (the paper's eq. 1 writes a norm;
  ``pearson_abs`` is the correlation with ``|c(x)|``).
* Pearson correlation of ``c`` with each uncertainty metric, computed with the weight
  functions of :mod:`selfcal.losses`: FL ``(1 - p_y)^gamma`` (:class:`FocalWeight`), DFL
  ``(1 - p_y + p_j)^gamma`` (:class:`DualFocalWeight`, ``p_j`` the largest probability below
  ``p_y``), gBS ``||y - p||_2^gamma`` (:class:`BrierWeight`, norm 2: with norm 1 it is
  ``2^gamma (1 - p_y)^gamma``, a multiple of FL with the same correlation).
* Every metric is evaluated at every exponent of the protocol's grid on the validation and the
  test points; the paper "grid-searched the hyperparameter of each method" without saying on
  what, so here each metric's exponent is selected per seed on the *validation* points
  (highest correlation) and reported on the test points -- the grid search without the
  optimism of choosing on the points that are scored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from selfcal.experiments import RunResult, RunSpec
from selfcal.studies.gra_toy.protocol import GraToyProtocol


@dataclass(frozen=True)
class ToyData:
    """Inputs (float32, raw) and labels of each split, and the class means."""

    x: dict[str, torch.Tensor]
    y: dict[str, torch.Tensor]
    means: torch.Tensor


def make_toy_data(seed: int, protocol: GraToyProtocol) -> ToyData:
    """Draw the class means, then the train, validation and test points, from
    ``numpy.random.default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    k = protocol.n_classes
    means = rng.uniform(-protocol.mean_range, protocol.mean_range, size=(k, 2))
    x, y = {}, {}
    for split, per_class in (
        ("train", protocol.train_per_class),
        ("val", protocol.val_per_class),
        ("test", protocol.test_per_class),
    ):
        labels = np.repeat(np.arange(k), per_class)
        points = means[labels] + rng.standard_normal((k * per_class, 2))
        x[split] = torch.from_numpy(points.astype(np.float32))
        y[split] = torch.from_numpy(labels)
    return ToyData(x, y, torch.from_numpy(means))


def true_posterior(x: torch.Tensor, means: torch.Tensor) -> torch.Tensor:
    """``eta(x)`` for equal-prior unit-covariance Gaussians: ``softmax_k(-||x - mu_k||^2 / 2)``
    (float64; the Gaussian normalising constants cancel)."""
    sq_dist = torch.cdist(x.double(), means.double()).square()
    return torch.softmax(-0.5 * sq_dist, dim=1)


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of two 1-D samples (NaN if either is constant)."""
    a, b = a - a.mean(), b - b.mean()
    denominator = float(np.sqrt((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / denominator) if denominator > 0 else float("nan")


def weight_function(metric: str, gamma: float, protocol: GraToyProtocol) -> Any:
    from selfcal.losses import BrierWeight, DualFocalWeight, FocalWeight

    if metric == "fl":
        return FocalWeight(gamma)
    if metric == "dfl":
        return DualFocalWeight(gamma)
    return BrierWeight(gamma, protocol.gbs_norm)


def train_toy_model(seed: int, protocol: GraToyProtocol, data: ToyData) -> dict[str, torch.Tensor]:
    """The notebook's model trained on the seed's data; float64 probabilities per split."""
    from selfcal.models import build_model
    from selfcal.training import TrainConfig, fit, predict_logits

    model = build_model(
        "mlp", n_features=2, n_classes=protocol.n_classes, hidden=(protocol.hidden,), seed=seed
    )
    config = TrainConfig(
        epochs=protocol.epochs,
        optimizer="sgd",
        lr=protocol.lr,
        momentum=0.0,
        batch_size=protocol.batch_size,
        seed=seed,
    )
    train = data.x["train"]
    shift, scale = (train.mean(0), train.std(0)) if protocol.standardize else (0.0, 1.0)
    fit(model, ((train - shift) / scale, data.y["train"]), config=config)
    return {
        split: torch.softmax(predict_logits(model, (x - shift) / scale).double(), 1)
        for split, x in data.x.items()
    }


def execute(protocol: GraToyProtocol, group: list[RunSpec]) -> list[RunResult]:
    """One seed's candidates (metric x exponent): one model, every correlation."""
    seed = group[0].seed
    data = make_toy_data(seed, protocol)
    probs = train_toy_model(seed, protocol, data)
    error = {}
    for split in ("val", "test"):
        labels = data.y[split][:, None]
        eta = true_posterior(data.x[split], data.means)
        error[split] = (eta.gather(1, labels) - probs[split].gather(1, labels))[:, 0].numpy()
    test = probs["test"]
    shared = {
        "test_accuracy": float((test.argmax(1) == data.y["test"]).double().mean()),
        "calibration_error": float(error["test"].mean()),
        "abs_calibration_error": float(np.abs(error["test"]).mean()),
    }
    results = []
    for spec in group:
        weight = weight_function(
            spec.method, float(cast(float, spec.hparams["hp.gamma"])), protocol
        )
        u = {split: weight(probs[split], data.y[split]).numpy() for split in ("val", "test")}
        results.append(
            RunResult(
                metrics={
                    "val_pearson": pearson(error["val"], u["val"]),
                    "pearson": pearson(error["test"], u["test"]),
                    "pearson_abs": pearson(np.abs(error["test"]), u["test"]),
                    **shared,
                }
            )
        )
    return results
