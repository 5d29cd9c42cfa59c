"""Dirichlet calibration (Kull et al., 2019): a multinomial logistic regression on the log of
the model's probabilities, fitted as structured matrix scaling (temperature scaling, then a
ridge-penalised departure from it)."""

from __future__ import annotations

import torch

from selfcal.posthoc._modules import AffineModule
from selfcal.posthoc.linear import MatrixScaling
from selfcal.posthoc.registry import register_calibrator
from selfcal.predictions import Predictions


@register_calibrator("dirichlet")
class DirichletCalibration(MatrixScaling):
    """Dirichlet calibration: ``softmax(W log p + b)`` on the model's log-probabilities, structured.

    Kull et al. (2019) model the class-conditional distributions of the probability vector
    ``p`` as Dirichlet distributions; the calibrated posterior is then
    ``softmax(W log p + b)``, a multinomial logistic regression on ``log p`` -- which is
    matrix scaling applied to ``log p`` instead of the logits. The fit is
    :class:`MatrixScaling`'s (methods §2.3): temperature scaling first (on ``log p``, the same
    ``T`` as on the logits), then on ``x = log(p) / T`` the map ``softmax((I + Delta) x + b)``
    minimising the mean NLL plus the ridge penalty

    ``diagonal_l2 C/N sum_k Delta_kk^2 + off_diagonal_l2 C(C-1)/N sum_{j != k} Delta_jk^2
    + bias_l2 C/N sum_k b_k^2``

    (Berta et al. 2026's structured scaling strengths, which grow with the number of classes
    and fade with the validation size), so ``W = (I + Delta) / T`` -- every map of Kull et al.'s
    family, and their unregularised optimum when every strength is 0. Their ODIR penalty
    (off-diagonal and intercept only, with strengths chosen by cross-validation) left the
    diagonal free: on separable scores it has no minimum. Newton's method with the exact
    Hessian converges to the float64 optimum; ``max_iter`` caps it with a
    :class:`~selfcal.exceptions.CalibrationNotConverged` warning.

    ``log p`` is ``log_softmax(z)`` for logits and ``log p`` for probabilities; exact zeros
    are read as half the smallest positive probability of the fitting rows, rows
    renormalised (``prob_floor_``, :func:`~selfcal.posthoc._scores.zero_floor`;
    ``dirichletcal`` reads them as ``log(tiny) = -708``, which decides its fit). Logits and
    their (zero-free) probabilities therefore give the same fit; and
    ``DirichletCalibration().fit(logits=z)`` equals ``MatrixScaling().fit(logits=log_softmax(z))``
    (the shift-invariance of the softmax does not carry over to ``W z``: matrix scaling of
    the raw logits is a different map unless ``W``'s rows sum alike).

    **Can change the predicted class.**

    Parameters
    ----------
    off_diagonal_l2 : ``lambda >= 0`` of the off-diagonal penalty (default 1).
    diagonal_l2 : ``lambda >= 0`` of the diagonal penalty (default 1).
    bias_l2 : ``lambda >= 0`` of the intercepts' penalty (default 1).
    max_iter : Newton iterations at most (default 100); L-BFGS gets 50 times more.
    kind : ``"logits"``, ``"probs"`` or ``None`` (default): what a positional score array holds.

    Attributes
    ----------
    weight_ : (C, C) float64 array (row ``k`` gives the new logit of class ``k``)
    bias_ : (C,) float64 array
    """

    def _scores(self, pred: Predictions) -> torch.Tensor:
        """``log p``: the model's log-probabilities (float64)."""
        return pred.log_probs

    def _score_rows(self, pred: Predictions, rows: slice) -> torch.Tensor:
        scores = pred.scores[rows]
        if pred.kind == "logits":
            return torch.log_softmax(scores.double(), dim=1)
        return pred.log_probs_of(scores)

    def _module(self, from_probs: bool) -> torch.nn.Module:
        return AffineModule(self.weight_, self.bias_, from_probs, on_log_probs=True)
