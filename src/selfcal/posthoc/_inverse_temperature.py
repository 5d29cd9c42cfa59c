"""The exact NLL minimiser of temperature scaling: the inverse temperature ``beta = 1/T``
by a safeguarded Newton iteration on the analytic derivatives of the mean NLL of
``softmax(beta z)`` (:func:`solve_inverse_temperature`), computed in passes over ``z`` chunk
by chunk, in its own dtype (no float64 copy of the matrix). ``method="nll"`` of
:class:`~selfcal.posthoc.TemperatureScaling` (:mod:`selfcal.posthoc.temperature`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

LOG_BETA_BOUNDS = (-10.0, 10.0)
"""Search interval for ``log(1/T)`` (as scikit-learn's ``_TemperatureScaling``):
``T in [e^-10, e^10]``; a minimum outside it is returned at the nearer bound."""

CHUNK_BYTES = 1 << 19
"""Bytes of one chunk buffer in a derivative pass (the chunk's working set stays in L2)."""

MIN_CHUNK_ROWS = 64
"""Fewest rows per chunk (with very many classes, per-call overhead would dominate)."""

WARM_START_ROWS = 8192
"""Rows of the strided subsample that gives the full-data iteration its starting point."""

SUBSAMPLE_RTOL = 1e-3
"""Predicted relative error at which the subsample stage stops (its own optimum is only
within sampling error, ~1%, of the full-data one)."""

COARSE_RTOL = 1e-5
"""Predicted relative error of ``beta`` at which the full-data float32 stage hands over."""

FINE_RTOL = 1e-12
"""Predicted relative error of ``beta`` at which the float64 stage stops."""

Derivatives = Callable[[float], tuple[float, float, float, float]]


@dataclass(frozen=True)
class LogitData:
    """Logits ``z`` as given (float32 or float64; never copied), their row maxima ``top``
    (float64) and the true-class entry of the row-max-shifted logits,
    ``s_y = z_y - max_k z_k`` (float64). For ``beta > 0`` the row maximum of ``beta z`` is
    ``beta max z``, so the shift ``s = z - max z <= 0`` is fixed once for every ``beta``."""

    z: torch.Tensor
    top: torch.Tensor
    s_true: torch.Tensor

    @classmethod
    def build(cls, logits: torch.Tensor, labels: torch.Tensor) -> LogitData:
        top = logits.amax(1).double()
        s_true = logits.gather(1, labels.unsqueeze(1)).squeeze(1).double() - top
        return cls(logits, top, s_true)

    def rows(self, index: slice) -> LogitData:
        return LogitData(self.z[index], self.top[index], self.s_true[index])


def _chunk_buffer(z: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised ``(rows, C)`` buffer of :data:`CHUNK_BYTES` (at least
    :data:`MIN_CHUNK_ROWS` rows, at most all of them)."""
    n, n_classes = z.shape
    rows = min(n, max(MIN_CHUNK_ROWS, CHUNK_BYTES // (n_classes * dtype.itemsize)))
    return torch.empty(rows, n_classes, dtype=dtype, device=z.device)


def _chunks(n: int, rows: int) -> list[slice]:
    return [slice(start, min(start + rows, n)) for start in range(0, n, rows)]


def _shifted_chunk(z: torch.Tensor, top: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out = z - max z`` in ``out``'s dtype (float32 ``z`` is widened exactly for float64).
    Narrowed from float64 to float32, entries below the float32 range are clamped to
    ``-max`` (``exp`` is 0 there for every ``beta`` in the bounds; ``-inf`` would turn
    ``0 * s`` into NaN)."""
    if out.dtype == z.dtype:
        return torch.sub(z, top.to(z.dtype).unsqueeze(1), out=out)
    out.copy_(z)
    out.sub_(top.to(out.dtype).unsqueeze(1))
    if out.dtype == torch.float32:
        out.clamp_min_(-torch.finfo(torch.float32).max)
    return out


def _power_sums(s: torch.Tensor, beta: float, w: torch.Tensor, out: torch.Tensor) -> None:
    """``out[r] = S_r = sum_k w_k s_k^r`` per row for ``r = 0..4``, ``w = exp(beta s)``: one
    exponential per entry, then in-place products (``w s^r`` is never formed as ``s^r``, so
    an entry with ``w = 0`` stays 0 however large ``|s|`` is)."""
    torch.sum(torch.mul(s, beta, out=w).exp_(), 1, out=out[0])
    for r in range(1, out.shape[0]):
        torch.sum(w.mul_(s), 1, out=out[r])


def _cumulants(sums: torch.Tensor) -> torch.Tensor:
    """Per-row cumulants ``k_1..k_4`` of ``s`` under ``p = w / S_0`` (float64) from the power
    sums: with ``m_r = S_r / S_0``, ``k_1 = m_1``, ``k_2 = m_2 - m_1^2``,
    ``k_3 = m_3 - 3 m_1 m_2 + 2 m_1^3``, ``k_4 = mu_4 - 3 k_2^2`` where
    ``mu_4 = m_4 - 4 m_1 m_3 + 6 m_1^2 m_2 - 3 m_1^4``."""
    sums = sums.double()
    m1, m2, m3, m4 = sums[1:] / sums[0]
    a = m1 * m1
    k2 = m2 - a
    k3 = m3 - m1 * (3.0 * m2 - 2.0 * a)
    mu4 = m4 - m1 * (4.0 * m3 - 6.0 * m1 * m2 + 3.0 * a * m1)
    return torch.stack((m1, k2, k3, mu4 - 3.0 * k2 * k2))


def nll_derivatives(
    data: LogitData, beta: float, dtype: torch.dtype = torch.float64
) -> tuple[float, float, float, float]:
    """First four derivatives in ``beta`` of the mean NLL ``L`` of ``softmax(beta z)``.

    With ``w_ik = exp(beta s_ik)``, ``S_r = sum_k w_ik s_ik^r`` and ``p_ik = w_ik / S_0``,
    ``L(beta) = (1/N) sum_i [log S_0 - beta s_iy]``; ``log S_0`` is the cumulant generating
    function of ``s_i`` under the uniform weights, so its ``r``-th derivative is the
    ``r``-th cumulant ``k_r`` of ``s_i`` under ``p``:

    * ``L'(beta) = (1/N) sum_i [E_p[s_i] - s_iy]`` (= E_p[z] - z_y)
    * ``L''(beta) = (1/N) sum_i Var_p[s_i]`` (>= 0, so ``L`` is convex)
    * ``L'''(beta) = (1/N) sum_i k_3(s_i)``, ``L''''(beta) = (1/N) sum_i k_4(s_i)``

    One pass over ``z`` in chunks of :data:`CHUNK_BYTES` per buffer: exponentials and
    per-row power sums in ``dtype`` (float32 for the coarse stages, float64 for the exact
    one); the cumulants and every sum over rows in float64.
    """
    n = data.z.shape[0]
    s_buf = _chunk_buffer(data.z, dtype)
    w_buf = torch.empty_like(s_buf)
    sums = torch.empty(5, n, dtype=dtype, device=data.z.device)
    for span in _chunks(n, s_buf.shape[0]):
        s = _shifted_chunk(data.z[span], data.top[span], s_buf[: span.stop - span.start])
        _power_sums(s, beta, w_buf[: s.shape[0]], sums[:, span])
    cumulants = _cumulants(sums)
    cumulants[0] -= data.s_true
    g, h, t, q = cumulants.sum(1).div_(n).tolist()
    return g, h, t, q


def _step(beta: float, g: float, h: float, t: float, q: float) -> tuple[float, float]:
    """Next iterate and its predicted error, from ``g, h, t, q`` = the derivatives 1 to 4
    of ``L`` at ``beta``.

    Newton ``d = -g/h`` leaves ``L'(beta + d) ~ t d^2 / 2``: an error ``|t| d^2 / (2h)``. Once
    that is below ``|d| / 10`` (the asymptotic regime), the third-order (Chebyshev) step
    ``d - t d^2 / (2h)`` is taken instead; expanding ``L'`` to third order, it leaves
    ``L' ~ d^3 (q/6 - t^2 / (2h))``, an error ``|d|^3 |q / (6h) - t^2 / (2h^2)|``.
    """
    if not h > 0:
        return math.nan, math.inf
    d = -g / h
    err = abs(t) * d * d / (2.0 * h)
    if err > 0.1 * abs(d):
        return beta + d, err
    err = abs(d) ** 3 * abs(q / (6.0 * h) - t * t / (2.0 * h * h))
    return beta + d - t * d * d / (2.0 * h), err


def _bound_passed(new: float, lo: float, hi: float) -> float | None:
    """The search bound a step to ``new`` overshoots, if that bound still ends the bracket
    ``[lo, hi]`` (the minimum may then lie at it); else ``None``."""
    bound_lo, bound_hi = (math.exp(b) for b in LOG_BETA_BOUNDS)
    if new <= lo == bound_lo:
        return bound_lo
    if new >= hi == bound_hi:
        return bound_hi
    return None


def _newton(
    derivs: Derivatives, beta: float, rtol: float, max_iter: int = 200
) -> tuple[float, bool]:
    """Safeguarded Newton on the convex ``L(beta)``; ``derivs(beta)`` gives its derivatives
    1 to 4.

    Keeps a bracket ``[lo, hi]`` of the root of ``L'``; takes the step of :func:`_step` when
    it lands inside the bracket, otherwise bisects the bracket geometrically. When the step
    overshoots a search bound that still ends the bracket, or two successive steps move the
    same way without shrinking (an exponential tail, e.g. separable data where the infimum
    is at ``T -> 0``), the bound ahead is probed once: if ``L'`` has the same sign there,
    the minimum over :data:`LOG_BETA_BOUNDS` is that bound.
    Stops once the predicted error is below ``rtol * beta``. Returns ``(beta, converged)``;
    ``beta`` is NaN if a derivative is not finite (only possible in a float32 pass), and
    ``converged`` is false when ``max_iter`` iterations did not meet ``rtol``.
    """
    bound_lo, bound_hi = (math.exp(b) for b in LOG_BETA_BOUNDS)
    lo, hi = bound_lo, bound_hi
    beta = min(max(beta, lo), hi)
    prev_step, probed = 0.0, set()
    for _ in range(max_iter):
        g, h, t, q = derivs(beta)
        if not math.isfinite(g + h + t + q):
            return math.nan, False
        if g == 0.0:
            return beta, True
        lo, hi = (beta, hi) if g < 0 else (lo, beta)
        new, err = _step(beta, g, h, t, q)
        if lo <= new <= hi and err <= rtol * beta:
            return new, True
        ahead = _bound_passed(new, lo, hi)
        if not lo < new < hi:
            new = math.sqrt(lo * hi)
        step = new - beta
        if ahead is None and step * prev_step > 0 and abs(step) > 0.5 * abs(prev_step):
            ahead = bound_hi if step > 0 else bound_lo
        if ahead is not None and ahead not in probed:
            probed.add(ahead)
            g_bound = g if ahead == beta else derivs(ahead)[0]
            if g_bound == 0.0 or (g_bound < 0) == (g < 0):
                return ahead, True
        if hi - lo <= rtol * lo:
            return new, True
        beta, prev_step = new, step
    return beta, False


def _solve(
    data: LogitData, beta: float, dtype: torch.dtype, rtol: float, max_iter: int
) -> tuple[float, bool]:
    """:func:`_newton` with :func:`nll_derivatives` in ``dtype``."""
    return _newton(lambda b: nll_derivatives(data, b, dtype), beta, rtol, max_iter)


def _coarse(data: LogitData, beta: float, rtol: float) -> float:
    """A float32 stage: its result, or ``beta`` unchanged if it failed (non-finite)."""
    new, _ = _solve(data, beta, torch.float32, rtol, 20)
    return new if math.isfinite(new) else beta


def moment_start(data: LogitData) -> float:
    """One Newton step from ``beta = 0``, where the softmax is uniform (no exponentials):
    ``L'(0) = mean_i (zbar_i - z_iy)`` and ``L''(0) = mean_i Var_k(z_ik)``, so
    ``beta_0 = mean_i (z_iy - zbar_i) / mean_i Var_k(z_ik)``. Returns 1 when every row is
    constant or the estimate is not positive and finite (the iteration's bracket then
    decides)."""
    n = data.z.shape[0]
    buf = _chunk_buffer(data.z, data.z.dtype)
    mean, var = torch.empty(2, n, dtype=data.z.dtype, device=data.z.device)
    for span in _chunks(n, buf.shape[0]):  # (torch.var_mean is ~10x slower on CPU)
        s = _shifted_chunk(data.z[span], data.top[span], buf[: span.stop - span.start])
        torch.mean(s, 1, out=mean[span])
        s.sub_(mean[span].unsqueeze(1))
        torch.mean(s.mul_(s), 1, out=var[span])
    num = float((data.s_true - mean.double()).sum())
    den = float(var.double().sum())
    beta = num / den if den > 0 else math.nan
    return beta if math.isfinite(beta) and beta > 0 else 1.0


def fit_inverse_temperature(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """:func:`solve_inverse_temperature`'s ``beta`` (whether or not it converged)."""
    return solve_inverse_temperature(LogitData.build(logits, labels))[0]


def solve_inverse_temperature(data: LogitData) -> tuple[float, bool]:
    """``argmin_{beta > 0}`` of the mean NLL of ``softmax(beta z)``, exact in float64.

    The NLL is convex in ``beta`` (its second derivative is the mean predictive variance of
    the logits), so a safeguarded Newton iteration with the analytic derivatives of
    :func:`nll_derivatives` converges (with the third-order correction, cubically). Stages,
    each starting where the previous one stopped:

    1. :func:`moment_start`, then float32 passes on a strided subsample of
       :data:`WARM_START_ROWS` rows (all rows if there are at most twice as many);
    2. float32 passes on the full data until the predicted error is below
       :data:`COARSE_RTOL` (usually one pass);
    3. float64 passes on the full data until it is below :data:`FINE_RTOL` (usually one),
       with the full bracket ``[e^-10, e^10]`` -- the float32 stages only choose the start.

    ``z`` is read in its own dtype chunk by chunk (no float64 copy of the matrix). Constant
    rows (zero variance) leave ``beta = 1``. Returns ``(beta, converged)``.
    """
    n = data.z.shape[0]
    sub = data.rows(slice(None, None, n // WARM_START_ROWS)) if n > 2 * WARM_START_ROWS else data
    beta = _coarse(sub, moment_start(sub), SUBSAMPLE_RTOL)
    if sub is not data:
        beta = _coarse(data, beta, COARSE_RTOL)
    return _solve(data, beta, torch.float64, FINE_RTOL, 200)


def uniform_slopes(data: LogitData) -> torch.Tensor:
    """``(N,)`` float64 ``mean_k z_ik - z_iy``: each row's share of ``N L'(0)``, the NLL's
    slope in ``beta`` at the uniform prediction ``beta = 0``."""
    n = data.z.shape[0]
    buf = _chunk_buffer(data.z, torch.float64)
    out = torch.empty(n, dtype=torch.float64, device=data.z.device)
    for span in _chunks(n, buf.shape[0]):
        s = _shifted_chunk(data.z[span], data.top[span], buf[: span.stop - span.start])
        torch.mean(s, 1, out=out[span])
    return out - data.s_true
