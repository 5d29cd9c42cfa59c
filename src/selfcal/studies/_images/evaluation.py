"""Evaluation of the image studies: scores before and after the reference code's temperature
scaling, and the per-epoch curves."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from selfcal.methods import network_logits as logits
from selfcal.models.inference import predict_logits
from selfcal.studies._images.recipe import ImageProtocol


def scores(pred: Any, n_bins: int) -> dict[str, float]:
    """Error, NLL, Brier, ECE, MCE, AdaECE (equal-mass, "ACE") and classwise ECE."""
    import selfcal.metrics as M

    return {
        "error": float(M.error(pred)),
        "nll": float(M.nll(pred)),
        "brier": float(M.brier(pred)),
        "ece": float(M.ece(pred, n_bins=n_bins)),
        "mce": float(M.mce(pred, n_bins=n_bins)),
        "adaece": float(M.adaece(pred, n_bins=n_bins)),
        "classwise_ece": float(M.classwise_ece(pred, n_bins=n_bins)),
    }


def grid_temperature(z: torch.Tensor, y: torch.Tensor) -> float:
    """The reference code's temperature: grid 0.1 .. 10.0 by validation 15-bin ECE."""
    from selfcal.posthoc import TemperatureScaling

    return float(
        TemperatureScaling(method="grid", criterion="ece").fit(logits=z, labels=y).temperature_
    )


def evaluate(
    protocol: ImageProtocol, model: torch.nn.Module, data: Any
) -> tuple[dict[str, float], torch.Tensor]:
    """Validation scores (selection), test scores before and after temperature scaling
    (``_ts``), the temperature, and the training error (has the model memorised?). Returns
    the metrics and the test logits."""
    import selfcal.metrics as M
    from selfcal import Predictions

    z_val, z = logits(model, data.val.x), logits(model, data.test.x)
    val = Predictions.from_logits(z_val, data.val.y)
    temperature = grid_temperature(z_val, data.val.y)
    out = {
        "val_nll": float(M.nll(val)),
        "val_ece": float(M.ece(val, n_bins=protocol.n_bins)),
        "val_accuracy": float(M.accuracy(val)),
        "temperature": temperature,
        "train_error": float(M.error(logits=logits(model, data.train.x), labels=data.train.y)),
    }
    out.update(scores(Predictions.from_logits(z, data.test.y), protocol.n_bins))
    out.update(
        {
            f"{k}_ts": v
            for k, v in scores(
                Predictions.from_logits(z / temperature, data.test.y), protocol.n_bins
            ).items()
        }
    )
    out["accuracy"] = 1.0 - out["error"]
    return out, z


class Curves:
    """Per-epoch curves, every ``every`` epochs (and the last), for analysis only -- nothing
    reads them during training: the test ECE ([GRA] Fig. 5a, [MetaReg] Fig. 3a-b), the
    validation temperature (how over-confidence grows with training), and for a γ-Net the mean
    and (population) std of its γ on the test features ([MetaReg] Fig. 3c-d). Eval mode, no
    gradients; the model's mode, parameters and buffers are left as they were."""

    def __init__(self, data: Any, every: int, epochs: int, n_bins: int) -> None:
        self.data, self.every, self.epochs, self.n_bins = data, every, epochs, n_bins
        self.values: dict[str, list[float]] = {"epoch": [], "test_ece": [], "val_temperature": []}
        self.step: Any = None

    def due(self, epoch: int) -> bool:
        done = epoch + 1
        return done % self.every == 0 or done == self.epochs

    def follow(self, step: Any) -> None:
        """Also record the γ-Net of ``step`` (a :class:`~selfcal.bilevel.MetaStep`) on the
        test features ([MetaReg] Fig. 3c-d)."""
        self.step = step

    def after_epoch(self, epoch: int, model: torch.nn.Module, history: Any = None) -> bool:
        """:func:`selfcal.training.fit`'s ``on_epoch``: records, never stops."""
        if self.due(epoch):
            self._record(epoch, model)
            self._record_gamma(model)
        return False

    def _record_gamma(self, model: torch.nn.Module) -> None:
        from selfcal.bilevel import GammaNet

        meta = getattr(self.step, "meta_module", None)
        if isinstance(meta, GammaNet):
            gamma_net = meta

            def gammas(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
                features: torch.Tensor = m.features(x)  # type: ignore[operator]  # image models only
                return gamma_net(features)

            gamma = predict_logits(model, self.data.test.x, forward=gammas, out_device="cpu")
            self.values.setdefault("test_gamma_mean", []).append(float(gamma.double().mean()))
            self.values.setdefault("test_gamma_std", []).append(
                float(gamma.double().std(unbiased=False))
            )

    def _record(self, epoch: int, model: torch.nn.Module) -> None:
        import selfcal.metrics as M

        z = logits(model, self.data.test.x)
        self.values["epoch"].append(epoch + 1)
        self.values["test_ece"].append(
            float(M.ece(logits=z, labels=self.data.test.y, n_bins=self.n_bins))
        )
        self.values["val_temperature"].append(
            grid_temperature(logits(model, self.data.val.x), self.data.val.y)
        )

    def artefacts(self) -> dict[str, np.ndarray]:
        return {f"curve_{k}": np.asarray(v, np.float64) for k, v in self.values.items()}
