"""The training methods -- one catalogue for ``selfcal train`` and every study -- and how one of
them trains.

* :mod:`~selfcal.methods.catalogue`: every trainable :class:`Method` (:data:`METHODS`), with
  its hyperparameter candidates, its selection criterion and its step strategy in the one
  training loop (:func:`method_step`);
* :mod:`~selfcal.methods.recipe`: the :class:`Recipe` (backbone, optimizer, schedule) and what
  is built from one -- the backbone (:func:`build_network`), the
  :class:`~selfcal.training.TrainConfig` (:func:`train_config`) and minibatch BO4SC
  (:func:`recipe_bo4sc`);
* :mod:`~selfcal.methods.training`: one candidate trained in place as a method
  (:func:`train_method`) and its predictions (:func:`network_logits`).

Below both of its users: :mod:`selfcal.pipeline` (``selfcal train`` on one's own tables) and
:mod:`selfcal.studies` (the benchmark, the image studies, meta-regularization) import it, and
it imports neither; the candidates are selected by :mod:`selfcal.selection`.
"""

from __future__ import annotations

from selfcal.methods.catalogue import (
    ALIASES,
    METHODS,
    VAL_BCE,
    Method,
    MethodSpec,
    get_method,
    method_names,
    method_step,
)
from selfcal.methods.recipe import (
    TABULAR,
    Recipe,
    build_network,
    recipe_bo4sc,
    resolve_batch_size,
    train_config,
)
from selfcal.methods.training import network_logits, train_method

__all__ = [
    "ALIASES",
    "METHODS",
    "TABULAR",
    "VAL_BCE",
    "Method",
    "MethodSpec",
    "Recipe",
    "build_network",
    "get_method",
    "method_names",
    "method_step",
    "network_logits",
    "recipe_bo4sc",
    "resolve_batch_size",
    "train_config",
    "train_method",
]
