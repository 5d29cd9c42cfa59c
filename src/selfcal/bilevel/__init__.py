"""Bilevel optimisation: hypergradients through differentiable inner training, and BO4SC.

Outer parameters ``phi`` shape the inner training loss ``g(theta, phi)``; an outer loss
``f(theta, phi)`` on held-out data is minimised over ``phi`` at the (approximate) inner
solution ``theta_T(phi)``, ``T`` steps of a differentiable optimizer from a warm start::

    F(phi) = f(theta_T(phi), phi)

Hypergradient estimators (swappable strategies, ``torch.func.vmap``-able but for the
``Autograd*`` twins):

* **Unrolled** (reverse mode through the steps; exact for the unrolled computation). With
  ``(theta_{k+1}, s_{k+1}) = Phi(theta_k, s_k, phi)`` one optimizer step (``s``: its state)::

      dF/dphi = d_phi f + sum_{k<T} (d_phi Phi_k)^T lambda_{k+1},
      lambda_T = grad_{theta, s} f(theta_T, phi),  lambda_k = (d_{theta, s} Phi_k)^T lambda_{k+1}

  ``OneStepLookahead`` keeps only the last term (``backprop_steps=1``);
  ``AutogradUnrolled`` / ``AutogradLookahead`` evaluate the same with plain
  ``torch.autograd`` (faster, not ``vmap``-able; the minibatch BO4SC's default).
* **Implicit** (implicit function theorem at a stationary ``theta_T``)::

      dF/dphi = d_phi f - d^2_{phi theta} g . [d^2_{theta theta} g]^{-1} grad_theta f

  with the linear system solved by conjugate gradient or a Neumann series from
  Hessian-vector products; memory does not grow with ``T``.

The engine is written directly on ``torch.func`` (``grad``, ``vjp``, ``functional_call``,
``vmap``): higher, betty and torchopt, the libraries that used to provide differentiable
optimizers, are unmaintained. torchopt serves only as a benchmark peer.

BO4SC (Sanguin et al., 2024) learns one weight per training sample so that a Boltzmann
smooth-max confidence fits the correctness of validation predictions; see
:mod:`selfcal.bilevel.bo4sc` (the functional core) and :class:`BO4SC` (the estimator).
γ-Net meta-regularization and Meta-Calibration's unit-wise L2 learn a regulariser of the
training loss by a one-step lookahead on a calibration meta-objective; see
:mod:`selfcal.bilevel.meta` (:func:`fit_meta`, :class:`MetaTrainer`, :class:`MetaStep`).
The differentiable inner optimizers (:class:`SGD`, :class:`Adam`) live in :mod:`selfcal.optim`,
below this package and :mod:`selfcal.training`, and are offered here under their names too.
"""

from selfcal.bilevel.bo4sc import (
    BO4SCBatch,
    BO4SCBatchInfo,
    BO4SCConfig,
    BO4SCData,
    BO4SCInfo,
    BO4SCState,
    bo4sc_init,
    bo4sc_inner_loss,
    bo4sc_minibatch_step,
    bo4sc_outer_loss,
    bo4sc_problem,
    bo4sc_step,
    boltzmann_confidence,
    project_weights,
    update_running_stats,
)
from selfcal.bilevel.bo4sc_estimator import BO4SC
from selfcal.bilevel.engine import BilevelProblem, Estimator, Hypergradient
from selfcal.bilevel.estimators import (
    AutogradLookahead,
    AutogradUnrolled,
    Implicit,
    OneStepLookahead,
    Unrolled,
)
from selfcal.bilevel.meta import (
    GammaNet,
    MetaBatch,
    MetaHistory,
    MetaLookahead,
    MetaOptions,
    MetaStep,
    MetaTrainer,
    UnitL2,
    fit_meta,
    meta_hypergradient,
    meta_objective,
    meta_problem,
)
from selfcal.bilevel.solvers import ConjugateGradient, Neumann
from selfcal.optim import SGD, Adam, AdamState, Optimizer, SGDState

__all__ = [
    "BO4SC",
    "SGD",
    "Adam",
    "AdamState",
    "AutogradLookahead",
    "AutogradUnrolled",
    "BO4SCBatch",
    "BO4SCBatchInfo",
    "BO4SCConfig",
    "BO4SCData",
    "BO4SCInfo",
    "BO4SCState",
    "BilevelProblem",
    "ConjugateGradient",
    "Estimator",
    "GammaNet",
    "Hypergradient",
    "Implicit",
    "MetaBatch",
    "MetaHistory",
    "MetaLookahead",
    "MetaOptions",
    "MetaStep",
    "MetaTrainer",
    "Neumann",
    "OneStepLookahead",
    "Optimizer",
    "SGDState",
    "UnitL2",
    "Unrolled",
    "bo4sc_init",
    "bo4sc_inner_loss",
    "bo4sc_minibatch_step",
    "bo4sc_outer_loss",
    "bo4sc_problem",
    "bo4sc_step",
    "boltzmann_confidence",
    "fit_meta",
    "meta_hypergradient",
    "meta_objective",
    "meta_problem",
    "project_weights",
    "update_running_stats",
]
