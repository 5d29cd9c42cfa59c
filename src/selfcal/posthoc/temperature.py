"""Temperature scaling (Guo et al., 2017): ``p = softmax(z / T)`` with one scalar ``T > 0``.

Two fitting rules:

* ``method="nll"`` -- the exact minimiser of the validation NLL, by a safeguarded Newton
  iteration on the inverse temperature ``beta = 1/T`` (see :func:`fit_inverse_temperature`).
* ``method="grid"`` -- the grid search of the [FLC]/[MC]/[GRA] reference code:
  ``T = 0.1, 0.2, ..., 10.0`` built by repeated ``+= 0.1``, keeping the first ``T`` with the
  lowest validation 15-bin ECE (``criterion="ece"``) or NLL (``criterion="nll"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from selfcal._inputs import Predictions
from selfcal.metrics import ece, nll
from selfcal.posthoc._base import Calibrator, check_choice, scores_as_logits

LOG_BETA_BOUNDS = (-10.0, 10.0)
"""Search interval for ``log(1/T)`` (as scikit-learn's ``_TemperatureScaling``):
``T in [e^-10, e^10]``; a minimum outside it is returned at the nearer bound."""

CHUNK_ELEMENTS = 1 << 18
"""Scores per chunk in a Newton pass (keeps the exponentials in cache)."""

WARM_START_ROWS = 8192
"""Rows of the strided subsample that gives the Newton iteration its starting point."""


@dataclass(frozen=True)
class _Shifted:
    """Row-max-shifted logits ``s = z - max_k z_k <= 0`` (float64) and the true-class entry
    ``s_y``. For ``beta > 0`` the row maximum of ``beta z`` is ``beta max z``, so the shift is
    fixed once for every ``beta``."""

    s: torch.Tensor
    s_true: torch.Tensor

    @classmethod
    def build(cls, logits: torch.Tensor, labels: torch.Tensor) -> _Shifted:
        s = logits.to(torch.float64, copy=True)
        s -= s.amax(1, keepdim=True)
        return cls(s, s.gather(1, labels.unsqueeze(1)).squeeze(1))

    def rows(self, index: slice) -> _Shifted:
        return _Shifted(self.s[index], self.s_true[index])


def nll_derivatives(data: _Shifted, beta: float) -> tuple[float, float, float]:
    """Mean NLL of ``softmax(beta z)`` and its first two derivatives in ``beta``.

    With ``w_ik = exp(beta s_ik)``, ``S_r = sum_k w_ik s_ik^r`` and ``m_i = S_1 / S_0``:

    * ``L(beta) = (1/N) sum_i [log S_0 - beta s_iy]``
    * ``L'(beta) = (1/N) sum_i [m_i - s_iy]`` (= E_p[z] - z_y)
    * ``L''(beta) = (1/N) sum_i [S_2 / S_0 - m_i^2]`` (= Var_p[z] >= 0, so L is convex)
    """
    loss = grad = curv = 0.0
    s_all, n = data.s, data.s.shape[0]
    step = max(1, CHUNK_ELEMENTS // s_all.shape[1])
    for start in range(0, n, step):
        s = s_all[start : start + step]
        w = torch.mul(s, beta).exp_()
        s0 = w.sum(1)
        s1 = w.mul_(s).sum(1)
        s2 = w.mul_(s).sum(1)
        m = s1 / s0
        s_true = data.s_true[start : start + step]
        loss += float((s0.log() - beta * s_true).sum())
        grad += float((m - s_true).sum())
        curv += float((s2 / s0 - m * m).sum())
    return loss / n, grad / n, curv / n


def _newton(data: _Shifted, beta: float, rtol: float, max_iter: int = 200) -> float:
    """Safeguarded Newton on the convex ``L(beta)``.

    Keeps a bracket ``[lo, hi]`` of the root of ``L'``; takes the Newton step when it lands
    inside the bracket, otherwise bisects the bracket geometrically. When two successive
    steps move the same way without shrinking (an exponential tail, e.g. separable data where
    the infimum is at ``T -> 0``), the bound ahead is probed once: if ``L'`` has the same sign
    there, the minimum over :data:`LOG_BETA_BOUNDS` is that bound. Stops once a Newton step is
    below ``rtol * beta`` (quadratic convergence leaves an error of order ``step^2``).
    """
    bound_lo, bound_hi = (math.exp(b) for b in LOG_BETA_BOUNDS)
    lo, hi = bound_lo, bound_hi
    beta = min(max(beta, lo), hi)
    prev_step, probed = 0.0, set()
    for _ in range(max_iter):
        _, g, h = nll_derivatives(data, beta)
        if g == 0.0:
            return beta
        lo, hi = (beta, hi) if g < 0 else (lo, beta)
        new = beta - g / h if h > 0 else math.nan
        if lo <= new <= hi and abs(new - beta) <= rtol * beta:
            return new
        if not lo < new < hi:
            new = math.sqrt(lo * hi)
        step = new - beta
        if step * prev_step > 0 and abs(step) > 0.5 * abs(prev_step):
            bound = bound_hi if step > 0 else bound_lo
            if bound not in probed:
                probed.add(bound)
                g_bound = nll_derivatives(data, bound)[1]
                if g_bound == 0.0 or (g_bound < 0) == (g < 0):
                    return bound
        if hi - lo <= rtol * lo:
            return new
        beta, prev_step = new, step
    return beta


def fit_inverse_temperature(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """``argmin_{beta > 0}`` of the mean NLL of ``softmax(beta z)``, in float64.

    The NLL is convex in ``beta`` (its second derivative is the mean predictive variance of
    the logits), so a safeguarded Newton iteration with the analytic derivatives of
    :func:`nll_derivatives` converges quadratically. A Newton solve on a strided subsample
    (cheap) supplies the starting point; the full data then needs 2-3 vectorised passes.
    Constant rows (zero variance) leave ``beta = 1``.
    """
    data = _Shifted.build(logits, labels)
    beta = 1.0
    n = data.s.shape[0]
    if n > 2 * WARM_START_ROWS:
        beta = _newton(data.rows(slice(None, None, n // WARM_START_ROWS)), beta, 1e-4)
    return _newton(data, beta, 1e-8)


def grid_temperatures() -> list[float]:
    """``0.1, 0.2, ..., 10.0`` built as the reference code does (``T += 0.1`` 100 times, so
    the values carry the float drift of repeated addition)."""
    out, t = [], 0.1
    for _ in range(100):
        out.append(t)
        t += 0.1
    return out


def grid_search_temperature(z: torch.Tensor, labels: torch.Tensor, criterion: str) -> float:
    """The reference code's loop: the first ``T`` (strict ``<``) with the lowest criterion
    (15-bin ECE or NLL of ``softmax(z / T)``); starts from ``T = 1`` with best ``1e7``."""
    metric = ece.core if criterion == "ece" else nll.core
    best, best_t = 10.0**7, 1.0
    for t in grid_temperatures():
        value = float(metric(Predictions.from_logits(z / t, labels)))
        if value < best:
            best, best_t = value, t
    return best_t


class TemperatureScaling(Calibrator):
    """Temperature scaling: ``p_k = exp(z_k / T) / sum_j exp(z_j / T)``, one ``T > 0``.

    **Never changes the predicted class**: dividing by ``T > 0`` preserves the order of the
    logits.

    Parameters
    ----------
    method : ``"nll"`` (default) minimises the validation NLL exactly (Newton on
        ``beta = 1/T``, ``T`` searched in ``[e^-10, e^10]``); ``"grid"`` reproduces the
        reference code's grid search over ``T = 0.1, ..., 10.0``.
    criterion : for ``method="grid"`` only: ``"ece"`` (default, 15 equal-width bins) or
        ``"nll"``.

    Given ``probs=``, the scores are ``z = log(p)`` (so ``T = 1`` returns ``p``).

    Attributes
    ----------
    temperature_ : float
    """

    _hyperparameters = ("method", "criterion")
    _fitted_attributes = ("temperature_",)

    def __init__(self, method: str = "nll", criterion: str = "ece") -> None:
        self.method = method
        self.criterion = criterion

    def _validate_hyperparameters(self) -> None:
        check_choice("method", self.method, ("nll", "grid"))
        check_choice("criterion", self.criterion, ("ece", "nll"))

    def _fit(self, pred: Predictions) -> None:
        z = scores_as_logits(pred)
        y = pred.require_labels()
        if self.method == "grid":
            self.temperature_ = grid_search_temperature(z, y, self.criterion)
        else:
            self.temperature_ = 1.0 / fit_inverse_temperature(z, y)

    def _predict(self, pred: Predictions) -> torch.Tensor:
        return torch.softmax(scores_as_logits(pred) / self.temperature_, dim=1)
