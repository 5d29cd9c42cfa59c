"""Matrix-free solvers against a dense solve."""

from __future__ import annotations

import pytest
import torch
from torch.func import vmap

from selfcal.bilevel import ConjugateGradient, Neumann


def spd_system(dim: int = 6, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=gen, dtype=torch.float64))
    eigenvalues = torch.linspace(0.5, 4.0, dim, dtype=torch.float64)
    matrix = q @ torch.diag(eigenvalues) @ q.T
    b = {
        "u": torch.randn(dim - 2, generator=gen, dtype=torch.float64),
        "v": torch.randn(2, generator=gen, dtype=torch.float64),
    }
    return matrix, b


def as_matvec(matrix):
    def matvec(tree):
        flat = torch.cat([tree["u"], tree["v"]])
        out = matrix @ flat
        return {"u": out[:-2], "v": out[-2:]}

    return matvec


def flat(tree):
    return torch.cat([tree["u"], tree["v"]])


def test_cg_is_exact_after_dim_iterations_and_stays_finite_after():
    matrix, b = spd_system()
    expected = torch.linalg.solve(matrix, flat(b))
    for iterations in (6, 30):  # 30: residual exactly 0 along the way must not give 0/0
        x = ConjugateGradient(iterations=iterations)(as_matvec(matrix), b)
        torch.testing.assert_close(flat(x), expected, atol=1e-10, rtol=0)


def test_cg_after_exact_convergence_keeps_the_solution():
    """H = 2I: CG is exact after one step, then r = 0 and p^T H p = 0 (0/0 unguarded)."""
    b = {"u": torch.tensor([1.0, -2.0]), "v": torch.tensor([0.5, 3.0])}
    x = ConjugateGradient(iterations=5)(lambda t: {k: 2 * v for k, v in t.items()}, b)
    torch.testing.assert_close(flat(x), flat(b) / 2)


def test_cg_damping_solves_the_shifted_system():
    matrix, b = spd_system()
    x = ConjugateGradient(iterations=12, damping=0.3)(as_matvec(matrix), b)
    expected = torch.linalg.solve(matrix + 0.3 * torch.eye(6, dtype=torch.float64), flat(b))
    torch.testing.assert_close(flat(x), expected, atol=1e-10, rtol=0)


def test_neumann_partial_sums_and_convergence():
    matrix, b = spd_system()
    alpha = 0.4  # eigenvalues of alpha * H in [0.2, 1.6]: inside (0, 2)
    series = alpha * flat(b)
    term = alpha * flat(b)
    for _ in range(3):
        term = term - alpha * matrix @ term
        series = series + term
    torch.testing.assert_close(
        flat(Neumann(alpha, iterations=3)(as_matvec(matrix), b)), series, atol=1e-12, rtol=0
    )
    converged = Neumann(alpha, iterations=200)(as_matvec(matrix), b)
    torch.testing.assert_close(
        flat(converged), torch.linalg.solve(matrix, flat(b)), atol=1e-8, rtol=0
    )


def test_solvers_vmap_over_right_hand_sides():
    matrix, _ = spd_system()
    rhs = {"u": torch.randn(3, 4, dtype=torch.float64), "v": torch.randn(3, 2, dtype=torch.float64)}
    for solver in (ConjugateGradient(8), Neumann(0.4, 10)):
        batched = vmap(lambda b, solve=solver: solve(as_matvec(matrix), b))(rhs)
        for i in range(3):
            single = solver(as_matvec(matrix), {"u": rhs["u"][i], "v": rhs["v"][i]})
            torch.testing.assert_close(
                flat({k: v[i] for k, v in batched.items()}), flat(single), atol=1e-12, rtol=0
            )


@pytest.mark.parametrize(
    "make",
    [
        lambda: ConjugateGradient(iterations=0),
        lambda: ConjugateGradient(iterations=2.5),
        lambda: ConjugateGradient(damping=-1.0),
        lambda: Neumann(alpha=0.0),
        lambda: Neumann(alpha=0.1, iterations=-1),
    ],
)
def test_bad_solver_settings_raise(make):
    with pytest.raises(ValueError):
        make()
