"""The plain training loop: :class:`TrainConfig` in, :class:`History` out.

``fit(model, (x, y), (x_val, y_val), config=TrainConfig(epochs=200, lr=1e-2))`` trains in place
with Adam or SGD, MultiStepLR, optional clipping, early stopping on validation NLL and
best-epoch restoring; losses of :mod:`selfcal.losses` plug in as ``loss_fn``, a
``batch_transform(x, generator)`` (data augmentation) transforms the training minibatches, and
``mixup_alpha > 0`` trains with mixup (``lam x + (1 - lam) x[pi]``, loss
``lam loss(z, y) + (1 - lam) loss(z, y[pi])``).
"""

from selfcal.training.config import TrainConfig
from selfcal.training.history import History
from selfcal.training.loop import BatchTransform, fit, make_optimizer, predict_logits

__all__ = [
    "BatchTransform",
    "History",
    "TrainConfig",
    "fit",
    "make_optimizer",
    "predict_logits",
]
