"""Ensemble temperature scaling (Zhang, Kailkhura & Han, 2020, "Mix-n-Match"): a convex mix of
the temperature-scaled, the uncalibrated and the uniform prediction."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch

from selfcal._validation import check_choice
from selfcal.estimator import Check
from selfcal.estimator.loading import FLOATS, POSITIVE, UNIT, Fitted
from selfcal.posthoc._base import Calibrator
from selfcal.posthoc._degenerate import Coverage, label_on_top
from selfcal.posthoc._inverse_temperature import fit_inverse_temperature
from selfcal.posthoc._modules import score_logits
from selfcal.posthoc._scores import scores_as_logits
from selfcal.posthoc.registry import register_calibrator
from selfcal.predictions import Predictions

TEMPERATURE_BOUNDS = (0.05, 5.0)
"""The temperature's search interval in the authors' code (``bnds = ((0.05, 5.0),)``)."""

BOUND_MARGIN = 1.1
"""A fitted temperature within this factor of an end of :data:`TEMPERATURE_BOUNDS` is at
that end (the bounded search stops short of it): the fit warns."""

GRID_POINTS = 64
"""Log-spaced temperatures scanned before the bounded Brent refinement of the MSE fit."""

FaceObjective = Callable[[torch.Tensor], tuple[float, torch.Tensor, torch.Tensor]]


def ets_components(z: torch.Tensor, temperature: float) -> torch.Tensor:
    """``(3, N, C)``: ``softmax(z / T)``, ``softmax(z)`` and the uniform ``1/C``."""
    return torch.stack(
        [
            torch.softmax(z / temperature, dim=1),
            torch.softmax(z, dim=1),
            torch.full_like(z, 1.0 / z.shape[1]),
        ]
    )


def ets_log_probs(
    z: torch.Tensor, temperature: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """``log(w_0 softmax(z / T) + w_1 softmax(z) + w_2 / C)``."""
    mixed = (
        weights[0] * torch.softmax(z / temperature, dim=1)
        + weights[1] * torch.softmax(z, dim=1)
        + weights[2] / z.shape[1]
    )
    return mixed.log()


def mse_of_temperature(z: torch.Tensor, y: torch.Tensor) -> Callable[[float], float]:
    """``T -> `` the authors' ``mse_t``, ``mean over N x C of (softmax(z / T) - onehot)^2``,
    as ``mean_i (sum_k p_ik^2 - 2 p_iy + 1) / C`` with ``p_i = e_i / sum_k e_ik`` and
    ``e = exp((z - max z) / T)``: one ``exp`` and two row sums per temperature (half the
    passes over ``(N, C)`` of the softmax, the difference and its square)."""
    s = z - z.amax(dim=1, keepdim=True)
    s_y = s.gather(1, y.unsqueeze(1)).squeeze(1)
    c = z.shape[1]

    def mse(temperature: float) -> float:
        e = torch.exp(s * (1.0 / temperature))
        total = e.sum(dim=1)
        squares = e.square_().sum(dim=1)
        p_y = torch.exp(s_y * (1.0 / temperature)) / total
        return float((squares / total.square() - 2.0 * p_y).mean()) / c + 1.0 / c

    return mse


def fit_temperature(z: torch.Tensor, y: torch.Tensor, loss: str) -> float:
    """The temperature minimising ``loss`` over :data:`TEMPERATURE_BOUNDS`.

    * ``"ce"``: the NLL is convex in ``1/T``, hence unimodal in ``T``: the exact unbounded
      minimiser (:func:`~selfcal.posthoc._inverse_temperature.fit_inverse_temperature`) clipped to
      the bounds.
    * ``"mse"``: the mean squared error (Brier score / C) need not be unimodal in ``T``: a
      scan of :data:`GRID_POINTS` log-spaced temperatures, then bounded Brent on ``log T``
      between the best one's neighbours (``xatol = 1e-10``) -- the global minimum over the
      bounds, where the authors' L-BFGS-B from ``T = 1`` finds a local one (the same whenever
      the loss is unimodal)."""
    lo, hi = TEMPERATURE_BOUNDS
    if loss == "ce":
        return min(max(1.0 / fit_inverse_temperature(z, y), lo), hi)
    from scipy.optimize import minimize_scalar

    mse = mse_of_temperature(z, y)
    grid = np.linspace(math.log(lo), math.log(hi), GRID_POINTS)
    values = [mse(math.exp(u)) for u in grid]
    k = int(np.argmin(values))
    left, right = grid[max(k - 1, 0)], grid[min(k + 1, GRID_POINTS - 1)]
    res = minimize_scalar(
        lambda u: mse(math.exp(u)),
        bounds=(left, right),
        method="bounded",
        options={"xatol": 1e-10},
    )
    best = float(res.x) if res.fun <= values[k] else float(grid[k])
    return math.exp(best)


def _solve_small(h: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """``h^-1 g`` for a symmetric positive semi-definite ``1 x 1`` or ``2 x 2`` ``h`` by
    explicit formulas (bit-for-bit reproducible, unlike LAPACK's least squares), with a ridge
    of ``1e-12`` times the trace where ``h`` is singular (the loss is then flat along a
    direction and any minimiser will do)."""
    ridge = 1e-12 * float(h.trace()) + 1e-300
    if h.shape[0] == 1:
        return g / (h[0, 0] + (ridge if float(h[0, 0]) <= ridge else 0.0))
    a, b, d = float(h[0, 0]), float(h[0, 1]), float(h[1, 1])
    det = a * d - b * b
    if det <= ridge * (a + d):
        a, d = a + ridge, d + ridge
        det = a * d - b * b
    return torch.tensor([d * g[0] - b * g[1], a * g[1] - b * g[0]], dtype=h.dtype) / det


def _face_minimum(
    objective: FaceObjective, face: tuple[int, ...], max_iter: int = 100
) -> torch.Tensor | None:
    """The minimiser of a convex ``objective(w) -> (value, gradient, Hessian)`` over the
    relative interior of one face of the 3-simplex (the weights outside ``face`` are 0), by
    Newton's method in coordinates of the face's affine hull (``w = w_0 + V v`` with columns
    ``e_j - e_last``, so ``sum w = 1`` holds), from the face's barycentre, with a line search
    that stays inside the face; ``None`` if the minimum over the face lies on its boundary (a
    smaller face then holds it)."""
    w = torch.zeros(3, dtype=torch.float64)
    w[list(face)] = 1.0 / len(face)
    if len(face) == 1:
        return w
    basis = torch.zeros(3, len(face) - 1, dtype=torch.float64)
    for j, k in enumerate(face[:-1]):
        basis[k, j], basis[face[-1], j] = 1.0, -1.0
    inside = list(face)
    for _ in range(max_iter):
        value, grad, hess = objective(w)
        g = basis.T @ grad
        step = basis @ -_solve_small(basis.T @ hess @ basis, g)
        decrease = float(-(grad @ step))
        if decrease <= 1e-24 + 1e-15 * abs(value):
            return w
        start, direction = [float(w[j]) for j in inside], [float(step[j]) for j in inside]
        rate = _feasible_rate(start, direction, 1.0)
        while rate is not None:
            trial = w + rate * step
            if objective(trial)[0] <= value - 0.25 * rate * decrease:
                break
            rate *= 0.5
            rate = None if rate < SMALLEST_RATE else _feasible_rate(start, direction, rate)
        if rate is None:
            return None
        w = trial
    return w


SMALLEST_RATE = 1e-12
"""The line search of :func:`_face_minimum` gives up below this step size."""


def _feasible_rate(start: list[float], direction: list[float], rate: float) -> float | None:
    """The first of ``rate, rate / 2, ...`` (``None`` below :data:`SMALLEST_RATE`) at which
    ``start + rate * direction`` is positive in every coordinate -- in Python floats, the
    same IEEE operations as the tensor expression, so the same rate, without a tensor per
    halving (the search halves up to 40 times when the face's minimum is on its boundary)."""
    while not all(a + rate * d > 0 for a, d in zip(start, direction)):
        rate *= 0.5
        if rate < SMALLEST_RATE:
            return None
    return rate


def fit_weights(components: torch.Tensor, y: torch.Tensor, loss: str) -> np.ndarray:
    """Weights ``w`` on the simplex minimising ``loss`` of ``sum_k w_k P_k``.

    * ``"mse"`` -- the authors' ``mse_w``, ``mean over N x C of (p - onehot)^2`` (their
      renormalisation by ``sum_k w_k`` is 1 on the simplex): a quadratic
      ``w^T G w - 2 h^T w + const``, ``G_kl = mean P_k P_l``, ``h_k = mean P_k onehot``;
    * ``"ce"`` -- their ``ll_w``, the mean NLL ``-mean_i log(sum_k w_k P_k[i, y_i])``.

    Both are convex, so the minimum over the simplex is the best of the minima over the
    relative interiors of its 7 faces that exist (:func:`_face_minimum`); the authors
    minimise the same function with SLSQP from ``(1, 0, 0)`` (``tol=1e-12``)."""
    n, c = components.shape[1:]
    if loss == "mse":
        onehot = torch.nn.functional.one_hot(y, c).to(components.dtype)
        flat = components.reshape(3, -1)
        gram = flat @ flat.T / (n * c)
        lin = flat @ onehot.reshape(-1) / (n * c)
        const = float(onehot.square().mean())

        def objective(w: torch.Tensor) -> tuple[float, torch.Tensor, torch.Tensor]:
            return float(w @ gram @ w - 2 * lin @ w) + const, 2 * (gram @ w - lin), 2 * gram

    else:
        q = components.gather(2, y.view(1, -1, 1).expand(3, -1, 1)).squeeze(2).T  # (N, 3)

        def objective(w: torch.Tensor) -> tuple[float, torch.Tensor, torch.Tensor]:
            mix = q @ w
            value = float(-mix.log().mean()) if bool((mix > 0).all()) else math.inf
            r = q / mix.unsqueeze(1)
            return value, -r.mean(0), r.T @ r / n

    best_w, best_value = None, math.inf
    for size in (3, 2, 1):
        for face in itertools.combinations(range(3), size):
            w = _face_minimum(objective, face)
            if w is not None and objective(w)[0] < best_value:
                best_w, best_value = w, objective(w)[0]
    assert best_w is not None  # every vertex is a candidate
    return best_w.numpy().copy()


class EnsembleTemperatureModule(torch.nn.Module):
    """:func:`ets_log_probs` of the logits (``log(max(p, tiny))`` for probabilities)."""

    if TYPE_CHECKING:  # buffers (TorchScript cannot read string annotations)
        temperature: torch.Tensor
        weights: torch.Tensor
    __constants__ = ("from_probs",)

    def __init__(self, temperature: float, weights: np.ndarray, from_probs: bool) -> None:
        super().__init__()
        self.register_buffer("temperature", torch.tensor(float(temperature), dtype=torch.float64))
        self.register_buffer("weights", torch.as_tensor(np.asarray(weights, dtype=np.float64)))
        self.from_probs = from_probs

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        z = score_logits(scores.to(self.weights.dtype), self.from_probs)
        return ets_log_probs(z, self.temperature, self.weights)


@register_calibrator("ets")
class EnsembleTemperatureScaling(Calibrator):
    """Ensemble temperature scaling: ``w_0 softmax(z / T) + w_1 softmax(z) + w_2 / C``.

    Zhang, Kailkhura & Han (2020, "Mix-n-Match") mix the temperature-scaled prediction, the
    uncalibrated one and the uniform distribution with weights on the simplex
    (``w_k >= 0``, ``sum w_k = 1``), which keeps temperature scaling's accuracy and adds two
    degrees of freedom. Fitted in two stages as in their code (``ets_calibrate`` of
    ``util_calibration.py``): first ``T`` alone, over ``[0.05, 5]`` (their bounds), then the
    weights with ``T`` fixed. Their code fits both stages by the **mean squared error**
    ``mean over N x C of (p - onehot)^2`` (the Brier score divided by ``C``; ``loss="mse"``,
    the default); ``loss="ce"`` uses the NLL in both stages (their alternative). Each stage is
    solved to float64 precision (methods §2.6): the temperature by a scan and bounded Brent
    (``"mse"``) or the exact temperature-scaling solver clipped to the bounds (``"ce"``), the
    weights exactly over the simplex's faces, where the authors use L-BFGS-B and SLSQP.

    **Never changes the predicted class** when ``w_0 + w_1 > 0``: each component ranks the
    classes as ``z`` does (argmax ties aside). Given ``probs=``, ``z = log(p)``.

    Parameters
    ----------
    loss : ``"mse"`` (default, the authors' choice) or ``"ce"``.
    kind : ``"logits"``, ``"probs"`` or ``None`` (default): what a positional score array holds.

    Attributes
    ----------
    temperature_ : float
    weights_ : (3,) float64 array, ``(w_0, w_1, w_2)``
    """

    _parameters: ClassVar[dict[str, Check]] = {
        "loss": functools.partial(check_choice, choices=("mse", "ce"))
    }
    _likelihood_fit = True
    _fitted_attributes = ("temperature_", "weights_")
    _fitted_schema: ClassVar[dict[str, Fitted]] = {
        "temperature_": Fitted(range=POSITIVE),
        "weights_": Fitted(FLOATS, UNIT),
    }

    @classmethod
    def prepare_fit(cls) -> None:
        import scipy.optimize  # noqa: F401

    def __init__(self, loss: str = "mse", kind: str | None = None) -> None:
        self.loss = loss
        self.kind = kind

    def _fit(self, pred: Predictions) -> None:
        z, y = scores_as_logits(pred), pred.require_labels()
        if bool(label_on_top(z, y).all()):  # nothing is identified: the scores unchanged
            self.temperature_, self.weights_ = 1.0, np.array([0.0, 1.0, 0.0])
            flat = bool((z.amax(dim=1) == z.amin(dim=1)).all())  # constant rows: no map acts
            if not (bool(pred.correct.all()) or flat):  # (all correct: the base class warns)
                self.warn_degenerate(
                    "every validation error is an exact tie (its label shares the top score), "
                    "so the data cannot say how confident to be; returned T = 1 and weights "
                    "(0, 1, 0): the scores unchanged"
                )
            return
        temperature = fit_temperature(z, y, self.loss)
        low, high = TEMPERATURE_BOUNDS
        if temperature <= low * BOUND_MARGIN or temperature >= high / BOUND_MARGIN:
            self.warn_degenerate(
                f"the validation {self.loss.upper()} is lowest at T = {temperature:g}, at an end "
                f"of the authors' interval [{low:g}, {high:g}], "
                "so its minimum may lie beyond; returned that T"
            )
        self.temperature_ = temperature
        # the weights' solver works on the CPU (3 x 3 systems): bring its (3, N, C) input there
        components = ets_components(z, temperature).cpu()
        self.weights_ = fit_weights(components, y.cpu(), self.loss)

    def _fit_warns_tied_errors(self) -> bool:
        return True  # _fit returns the scores unchanged and says why

    def _all_correct_outcome(self, coverage: Coverage) -> str:
        return (
            "the MSE falls as T -> 0 and the weights follow; returned T = 1 and weights "
            "(0, 1, 0): the scores unchanged"
        )

    def _predict(self, pred: Predictions) -> torch.Tensor:
        z = scores_as_logits(pred)
        weights = torch.as_tensor(self.weights_, device=z.device)
        temperature = torch.tensor(self.temperature_, dtype=z.dtype, device=z.device)
        return torch.softmax(ets_log_probs(z, temperature, weights), dim=1)

    def _module(self, from_probs: bool) -> torch.nn.Module:
        return EnsembleTemperatureModule(self.temperature_, self.weights_, from_probs)
