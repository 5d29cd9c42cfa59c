"""Dirichlet calibration (Kull et al., 2019): a multinomial logistic regression on the log of
the model's probabilities, with the ODIR regularisation."""

from __future__ import annotations

import torch

from selfcal.posthoc._modules import AffineModule
from selfcal.posthoc.linear import MatrixScaling
from selfcal.posthoc.registry import register_calibrator
from selfcal.predictions import Predictions


@register_calibrator("dirichlet")
class DirichletCalibration(MatrixScaling):
    """Dirichlet calibration with ODIR: ``softmax(W log p + b)`` on the model's log-probabilities.

    Kull et al. (2019) model the class-conditional distributions of the probability vector
    ``p`` as Dirichlet distributions; the calibrated posterior is then
    ``softmax(W log p + b)``, a multinomial logistic regression on ``log p`` -- which is
    matrix scaling applied to ``log p`` instead of the logits. The fit is
    :class:`MatrixScaling`'s: from ``W = I, b = 0`` (the identity map, since
    ``softmax(log p) = p``), by the mean NLL plus the ODIR penalty

    ``lambda / (C (C - 1)) sum_{j != k} W_jk^2 + mu / C sum_k b_k^2``

    (``lambda = off_diagonal_l2``, ``mu = bias_l2``; the paper's form -- the
    ``dirichletcal`` package's ``reg_norm=True`` -- on ``W`` as fitted, with no reference
    row; see methods §2.3). Newton's method with the exact Hessian converges to the float64
    optimum; ``max_iter`` caps it with a :class:`~selfcal.exceptions.CalibrationNotConverged`
    warning.

    ``log p`` is ``log_softmax(z)`` for logits and ``log(max(p, tiny))`` for probabilities
    (a zero probability becomes ``-708``, as in ``dirichletcal``, which clips at ``tiny``
    too). Logits and their probabilities therefore give the same fit; and
    ``DirichletCalibration().fit(logits=z)`` equals ``MatrixScaling().fit(logits=log_softmax(z))``
    (the shift-invariance of the softmax does not carry over to ``W z``: matrix scaling of
    the raw logits is a different map unless ``W``'s rows sum alike).

    **Can change the predicted class.**

    Parameters
    ----------
    off_diagonal_l2 : ``lambda >= 0`` (default 1).
    bias_l2 : ``mu >= 0`` (default 1).
    max_iter : Newton iterations at most (default 100); L-BFGS gets 50 times more.
    kind : ``"logits"`` (default) or ``"probs"``: what a positional score array holds.

    Attributes
    ----------
    weight_ : (C, C) float64 array (row ``k`` gives the new logit of class ``k``)
    bias_ : (C,) float64 array
    """

    def _features(self, pred: Predictions) -> torch.Tensor:
        """``log p``: the model's log-probabilities (float64)."""
        return pred.log_probs

    def _module(self, from_probs: bool) -> torch.nn.Module:
        return AffineModule(self.weight_, self.bias_, from_probs, on_log_probs=True)
