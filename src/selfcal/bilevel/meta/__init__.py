"""Meta-regularization: a regulariser of the training loss learned by a one-step lookahead on a
calibration meta-objective, on the bilevel engine -- γ-Net + SECE / DECE ([MetaReg], methods §6)
and Meta-Calibration's learnable unit-wise L2 (CE-DECE, CE-SECE; [MC], methods §5.2).

* :mod:`~selfcal.bilevel.meta.objectives`: the meta-objectives (SECE, DECE, CE + DECE, CE);
* :mod:`~selfcal.bilevel.meta.modules`: the meta modules (:class:`GammaNet`, :class:`UnitL2`),
  each with its own training loss;
* :mod:`~selfcal.bilevel.meta.problem` and :mod:`~selfcal.bilevel.meta.lookahead`: the bilevel
  problem of one meta step and its hypergradient;
* :mod:`~selfcal.bilevel.meta.reference_quirks`: the Meta-Calibration code's quirks, replicated
  only on request;
* :mod:`~selfcal.bilevel.meta.trainer`: :class:`MetaStep` (the step strategy of
  :func:`selfcal.training.fit`), :class:`MetaTrainer` and :func:`fit_meta`.
"""

from selfcal.bilevel.meta.lookahead import MetaLookahead, meta_hypergradient, meta_problem
from selfcal.bilevel.meta.modules import GammaNet, MetaModule, UnitL2, make_meta_module
from selfcal.bilevel.meta.objectives import META_OBJECTIVES, meta_objective
from selfcal.bilevel.meta.problem import MetaBatch
from selfcal.bilevel.meta.trainer import MetaHistory, MetaOptions, MetaStep, MetaTrainer, fit_meta

__all__ = [
    "META_OBJECTIVES",
    "GammaNet",
    "MetaBatch",
    "MetaHistory",
    "MetaLookahead",
    "MetaModule",
    "MetaOptions",
    "MetaStep",
    "MetaTrainer",
    "UnitL2",
    "fit_meta",
    "make_meta_module",
    "meta_hypergradient",
    "meta_objective",
    "meta_problem",
]
