"""The large structured fits: selfcal's L-BFGS (:mod:`selfcal.posthoc._lbfgs`), the chunked,
mixed-precision objectives and their preconditioner (:mod:`selfcal.posthoc._likelihoods`), and
what the calibrators fitted with them give against Newton's float64 optimum."""

from __future__ import annotations

import hashlib
import warnings

import numpy as np
import pytest
import torch
from helpers.posthoc import make_logits

from selfcal.exceptions import CalibrationNotConverged
from selfcal.posthoc import _lbfgs, _likelihoods, build_calibrator
from selfcal.posthoc import _structured_scaling as structured_fits
from selfcal.posthoc._solvers import ClassFeatures, SharedFeatures
from selfcal.posthoc._structured_scaling import structured_penalty

LARGE = ("matrix", "dirichlet", "sms", "vector", "svs")


def force_lbfgs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(structured_fits, "NEWTON_BUDGET", 0)
    monkeypatch.setattr(structured_fits, "VECTOR_NEWTON_BUDGET", 0)


def quadratic(seed: int, size: int, spread: float) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.normal(size=(size, size)))[0]
    curvature = basis @ np.diag(np.logspace(-spread, 0, size)) @ basis.T
    return torch.from_numpy(curvature), torch.from_numpy(rng.normal(size=size))


def test_lbfgs_stops_at_the_first_point_whose_gradient_meets_the_tolerance():
    """Converged at the first evaluated point (line-search trials included) whose largest
    gradient entry is at most the tolerance; nothing is evaluated after it."""
    curvature, target = quadratic(3, 5, 1.0)
    seen: list[tuple[torch.Tensor, float]] = []

    class Quadratic:
        def value_and_gradient(self, theta: torch.Tensor) -> tuple[float, torch.Tensor]:
            grad = curvature @ (theta - target)
            seen.append((theta.clone(), float(grad.abs().max())))
            return float((theta - target) @ grad / 2), grad

    start = torch.zeros(5, dtype=torch.float64)
    solution = _lbfgs.lbfgs(Quadratic(), start, 1000)
    first = next(i for i, (_, g) in enumerate(seen) if g <= _lbfgs.LBFGS_GTOL)
    assert solution.converged
    assert len(seen) == first + 1
    torch.testing.assert_close(solution.theta, seen[first][0], rtol=0, atol=0)
    torch.testing.assert_close(solution.theta, target, rtol=0, atol=1e-8)


def test_the_line_search_trusts_gradients_where_loss_values_are_rounding():
    """A convex quadratic whose loss values carry a deterministic error of ``1e-7`` (as
    float32 products leave), its gradient exact: selfcal's L-BFGS reaches a gradient of
    ``1e-9``; scipy's L-BFGS-B, deciding its line search on loss values, stops far short."""
    from scipy.optimize import minimize

    curvature, target = quadratic(4, 40, 3.0)

    def rounded(theta: torch.Tensor) -> tuple[float, torch.Tensor]:
        grad = curvature @ (theta - target)
        noise = int(hashlib.sha256(theta.numpy().tobytes()).hexdigest()[:8], 16) / 16**8 - 0.5
        return float((theta - target) @ grad / 2) + 1e-7 * noise, grad

    class Rounded:
        def value_and_gradient(self, theta: torch.Tensor) -> tuple[float, torch.Tensor]:
            return rounded(theta)

    start = torch.zeros(40, dtype=torch.float64)
    solution = _lbfgs.lbfgs(Rounded(), start, 5000)
    assert solution.converged
    assert float((curvature @ (solution.theta - target)).abs().max()) <= _lbfgs.LBFGS_GTOL

    def scipy_objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        loss, grad = rounded(torch.from_numpy(theta))
        return loss, grad.numpy()

    result = minimize(
        scipy_objective,
        start.numpy(),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 5000, "gtol": 1e-9, "ftol": 1e-15},
    )
    assert np.abs(curvature.numpy() @ (result.x - target.numpy())).max() > 1e-6


def test_lbfgs_gives_up_where_rounding_keeps_the_gradient_above_the_tolerance():
    """A gradient that never falls below ``1e-6`` (its own rounding): L-BFGS stops, not
    converged, long before its iteration cap."""
    curvature, target = quadratic(5, 10, 1.0)
    calls = [0]

    class Floor:
        def value_and_gradient(self, theta: torch.Tensor) -> tuple[float, torch.Tensor]:
            calls[0] += 1
            grad = curvature @ (theta - target)
            bump = torch.full_like(grad, 1e-6) * (-1) ** calls[0]
            return float((theta - target) @ (curvature @ (theta - target)) / 2), grad + bump

    solution = _lbfgs.lbfgs(Floor(), torch.zeros(10, dtype=torch.float64), 10_000)
    assert not solution.converged
    assert solution.iterations < 200


def test_the_preconditioner_maps_are_each_others_inverse_and_transpose():
    """``to_theta(to_u(theta)) = theta``, and the gradient in ``u`` is ``L^-1`` of the
    gradient in ``theta`` (the chain rule through ``theta = L^-T u``): ``<grad_u, du> =
    <grad_theta, dtheta>``."""
    rng = np.random.default_rng(0)
    groups, size = 7, 4
    first = torch.from_numpy(rng.normal(size=(groups, size)))
    second = first.square() + torch.from_numpy(rng.uniform(0.1, 1.0, size=(groups, size)))
    total = torch.from_numpy(rng.uniform(0.5, 2.0, size=groups))
    ridge = torch.full((groups, size), 1e-3, dtype=torch.float64)
    order = torch.from_numpy(rng.permutation(groups * size))
    pre = _lbfgs.Preconditioner.from_moments(first, second, total, ridge, order)
    theta = torch.from_numpy(rng.normal(size=groups * size))
    torch.testing.assert_close(pre.to_theta(pre.to_u(theta)), theta, rtol=1e-12, atol=1e-12)
    grad, du = torch.from_numpy(rng.normal(size=(2, groups * size)))
    dtheta = pre.to_theta(du)
    torch.testing.assert_close(pre.gradient(grad) @ du, grad @ dtheta, rtol=1e-12, atol=1e-12)


def objectives(dtype: torch.dtype, vector: bool):
    z, y = make_logits(7, 300, 4)
    x = torch.from_numpy(z) / 2
    labels = torch.from_numpy(y)
    if vector:
        penalty = torch.full((8,), 300.0**-1, dtype=torch.float64)
        return ClassFeatures(x, labels, penalty), _likelihoods.VectorLikelihood(
            x.to(dtype), labels, penalty
        )
    penalty = structured_penalty(300, 4, 1.0, 1.0, 1.0, like=x)
    features = torch.cat([x, torch.ones(300, 1, dtype=x.dtype)], 1)
    exact = SharedFeatures(features, labels, penalty, offset=x)
    return exact, _likelihoods.AffineLikelihood(x.to(dtype), labels, penalty)


@pytest.mark.parametrize("vector", [False, True])
def test_the_chunked_objectives_equal_newtons(monkeypatch, vector):
    """The L-BFGS objectives, in float64 and in chunks of any size, equal the Newton
    objectives' loss and gradient (to rounding); with float32 products, within ``1e-6``."""
    monkeypatch.setattr(_likelihoods, "CHUNK_ELEMENTS", 7 * 4)  # 7 rows a chunk
    theta = torch.from_numpy(np.random.default_rng(1).normal(size=8 if vector else 20) * 0.1)
    exact, large = objectives(torch.float64, vector)
    loss, grad = exact.value_and_gradient(theta)
    chunked_loss, chunked_grad = large.value_and_gradient(theta)
    assert chunked_loss == pytest.approx(loss, rel=1e-13)
    torch.testing.assert_close(chunked_grad, grad, rtol=1e-12, atol=1e-13)
    _, single = objectives(torch.float32, vector)
    single_loss, single_grad = single.value_and_gradient(theta)
    assert single_loss == pytest.approx(loss, abs=1e-6)
    torch.testing.assert_close(single_grad, grad, rtol=0, atol=1e-6)


@pytest.mark.parametrize("vector", [False, True])
def test_the_preconditioner_holds_the_exact_hessian_diagonal(vector):
    """Each group's ``diag(d) + v v^T`` has the exact diagonal of its block of the Hessian
    (penalty included); for vector scaling's ``(v_k, b_k)`` pairs it is the exact block."""
    exact, large = objectives(torch.float64, vector)
    theta = torch.from_numpy(np.random.default_rng(2).normal(size=8 if vector else 20) * 0.1)
    hess = exact.derivatives(theta)[2]
    pre = large.preconditioner(theta)
    d = pre.root.square()
    norm2 = pre.stretch.square() - 1
    v = pre.direction * (norm2.sqrt() * pre.root)
    blocks = torch.diag_embed(d) + v.unsqueeze(2) * v.unsqueeze(1)
    if vector:
        c = 4
        for k in range(c):
            index = torch.tensor([k, c + k])
            torch.testing.assert_close(blocks[k], hess[index][:, index], rtol=1e-12, atol=1e-14)
    else:
        diagonal = torch.stack([hess.view(4, 5, 4, 5)[k, :, k, :].diagonal() for k in range(4)])
        torch.testing.assert_close(blocks.diagonal(dim1=1, dim2=2), diagonal, rtol=1e-12, atol=0)


@pytest.mark.parametrize("name", LARGE)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_large_fits_equal_newtons_optimum(monkeypatch, name, dtype):
    """Every structured calibrator fitted by L-BFGS predicts what Newton's float64 optimum
    predicts: to ``2e-7`` from float64 scores, to ``2e-6`` from float32 scores (whose
    products run in float32)."""
    z, y = make_logits(6, 400, 5)
    newton = build_calibrator(name).fit(logits=z, labels=y)
    force_lbfgs(monkeypatch)
    large = build_calibrator(name).fit(logits=z.astype(dtype), labels=y)
    atol = 2e-7 if dtype == np.float64 else 2e-6
    np.testing.assert_allclose(
        large.predict_proba(logits=z), newton.predict_proba(logits=z), rtol=0, atol=atol
    )


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sms_at_scale_converges_in_few_gradients(monkeypatch, dtype):
    """Structured matrix scaling on 10^4 x 100 logits (the L-BFGS path) converges, in at
    most 18 gradients (13 to 16 on seeds 0-3; scipy's L-BFGS-B with the exact per-class
    blocks of 1,024 rows took 17, alone 24)."""
    gradients = []
    evaluate = _likelihoods.AffineLikelihood.value_and_gradient

    def counted(self, theta):
        gradients.append(1)
        return evaluate(self, theta)

    monkeypatch.setattr(_likelihoods.AffineLikelihood, "value_and_gradient", counted)
    z, y = make_logits(0, 10_000, 100)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationNotConverged)
        build_calibrator("sms").fit(logits=z.astype(dtype), labels=y)
    assert len(gradients) <= 18


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", [*LARGE, "auto"])
def test_the_large_fits_on_cuda_equal_the_cpus(monkeypatch, name):
    """The L-BFGS path on a CUDA device (float32 scores, float32 products there too): the
    probabilities the CPU's fit predicts, to the solvers' tolerance."""
    force_lbfgs(monkeypatch)
    z, y = make_logits(6, 400, 5)
    z32 = torch.from_numpy(z.astype(np.float32))
    labels = torch.from_numpy(y)
    cpu = build_calibrator(name).fit(logits=z32, labels=labels).predict_proba(logits=z32)
    gpu = build_calibrator(name).fit(logits=z32.cuda(), labels=labels.cuda())
    found = gpu.predict_proba(logits=z32.cuda())
    assert found.device.type == "cuda"
    torch.testing.assert_close(found.cpu(), cpu, rtol=0, atol=2e-6)
