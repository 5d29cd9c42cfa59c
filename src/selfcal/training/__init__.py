"""The training loop: :class:`TrainConfig` in, :class:`History` out.

``fit(model, (x, y), (x_val, y_val), config=TrainConfig(epochs=200, lr=1e-2))`` trains in place
with Adam or SGD, MultiStepLR, optional clipping, early stopping on validation NLL (or
accuracy) and best-epoch restoring. How each minibatch trains is a step strategy
(:mod:`selfcal.training.steps`): a loss of :mod:`selfcal.losses` (``loss_fn=``), mixup
(``mixup_alpha > 0``: ``lam x + (1 - lam) x[pi]``, loss ``lam loss(z, y) + (1 - lam)
loss(z, y[pi])``), or a meta-learned regulariser (:class:`selfcal.bilevel.MetaStep`, which
:func:`selfcal.bilevel.fit_meta` uses). A ``batch_transform(x, generator)`` (data
augmentation) transforms the training minibatches. :func:`fit_batched` trains many
independent full-batch Adam problems at once with ``torch.func.vmap`` (the same steps).
:class:`BestCheckpoint` keeps the lowest-validation-NLL parameters beside a run that goes on.
Every way selfcal trains a network runs :func:`fit` but BO4SC's bilevel outer loop
(:class:`selfcal.bilevel.BO4SC`), which shares its random streams and batch-transform protocol
(:mod:`selfcal.training.seeding`).
"""

from selfcal.models.inference import predict_logits  # the one model-over-data function
from selfcal.training.batched import fit_batched
from selfcal.training.checkpoint import BestCheckpoint
from selfcal.training.config import TrainConfig
from selfcal.training.history import History
from selfcal.training.loop import BatchTransform, fit, make_optimizer, prepare_run
from selfcal.training.steps import LossStep, MixupStep, Run, TrainStep

__all__ = [
    "BatchTransform",
    "BestCheckpoint",
    "History",
    "LossStep",
    "MixupStep",
    "Run",
    "TrainConfig",
    "TrainStep",
    "fit",
    "fit_batched",
    "make_optimizer",
    "predict_logits",
    "prepare_run",
]
