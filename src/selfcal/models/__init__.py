"""Classifier architectures, a name registry, seeded construction and ``torch.func`` helpers.

``build_model("mlp", n_features=2, n_classes=3, seed=0)`` builds a registered model with a
deterministic initialisation; :func:`predict_logits` runs a model over data (eval mode, no
gradients, in chunks). To add an architecture, write one file that decorates its
factory with :func:`register_model` and import that file here.
"""

from selfcal.models.cnn import CNN1d, CNN2d  # registers "cnn1d", "cnn2d"
from selfcal.models.densenet import DenseNet  # registers "densenet121"
from selfcal.models.functional import batched_logits, functional_logits, stack_models
from selfcal.models.inference import predict_logits
from selfcal.models.mlp import MLP  # importing the file registers "mlp"
from selfcal.models.registry import (
    available_models,
    build_model,
    init_model,
    register_model,
    seeded_rng,
)
from selfcal.models.resnet import CifarResNet  # registers "resnet18", "resnet50", "resnet110"
from selfcal.models.wide_resnet import WideResNet  # registers "wide_resnet", "wide_resnet26_10"

__all__ = [
    "MLP",
    "CNN1d",
    "CNN2d",
    "CifarResNet",
    "DenseNet",
    "WideResNet",
    "available_models",
    "batched_logits",
    "build_model",
    "functional_logits",
    "init_model",
    "predict_logits",
    "register_model",
    "seeded_rng",
    "stack_models",
]
