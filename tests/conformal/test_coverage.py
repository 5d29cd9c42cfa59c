"""The split-conformal guarantee, checked statistically.

A fixed synthetic pool of ``N_POOL`` rows (scores of a deliberately miscalibrated model, so
sets are far from trivial) is split at random ``N_SPLITS`` times into ``N_CAL`` calibration
rows and the rest as test rows. Conditional on the pool, the rows of each split are
exchangeable, so the mean test coverage over splits estimates a number that lies in
``[1 - alpha, 1 - alpha + 1 / (n + 1)]`` (the upper bound needs scores without ties, which the
randomised scores have almost surely; for the deterministic ones only the lower bound is
guaranteed, so only it is asserted). Mondrian (per-class) coverage obeys the same bounds per
class with ``n`` the class's calibration rows in each split. Every check allows
``TOLERANCE_SE`` Monte-Carlo standard errors (the spread of the per-split coverage over
splits / sqrt(N_SPLITS)); the worst deviation from a bound, in standard errors, is printed
(``pytest -s``) and recorded in ``WORST``.

The thresholds are computed for all splits at once (one sort), with the rank
``ceil((n + 1)(1 - alpha))`` written out here; a few splits check that
:class:`~selfcal.conformal.SplitConformal` fits the same thresholds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from selfcal.conformal import SplitConformal, conformity_scores
from selfcal.metrics import set_coverage

N_POOL, N_CAL, C = 2000, 500, 8
N_SPLITS = 1000
ALPHA = 0.1
TOLERANCE_SE = 4.0
RANDOMISED = [("aps", True), ("raps", True), ("saps", True)]
DETERMINISTIC = [("lac", False), ("aps", False), ("raps", False), ("saps", False)]
WORST: dict[str, float] = {}
"""Worst deviation beyond a bound, in Monte-Carlo standard errors (<= 0: inside), per case."""


@pytest.fixture(scope="module")
def pool() -> tuple[torch.Tensor, torch.Tensor]:
    """Probabilities of an overconfident model (logits x 2.5) and labels drawn from the true,
    less peaked distribution; classes of unequal frequency."""
    g = torch.Generator().manual_seed(2026)
    prior = torch.linspace(0.5, 1.5, C, dtype=torch.float64)
    truth = torch.softmax(torch.randn(N_POOL, C, generator=g, dtype=torch.float64), 1) * prior
    labels = torch.multinomial(truth / truth.sum(1, keepdim=True), 1, generator=g).squeeze(1)
    probs = torch.softmax(2.5 * torch.log(truth), dim=1)
    return probs, labels


@pytest.fixture(scope="module")
def splits() -> tuple[torch.Tensor, torch.Tensor]:
    """``(N_SPLITS, N_CAL)`` calibration and ``(N_SPLITS, N_POOL - N_CAL)`` test indices."""
    g = torch.Generator().manual_seed(7)
    perm = torch.rand(N_SPLITS, N_POOL, generator=g).argsort(1)
    return perm[:, :N_CAL], perm[:, N_CAL:]


def rank(n: torch.Tensor | int) -> torch.Tensor:
    """``ceil((n + 1)(1 - alpha))``, in exact rational arithmetic (alpha = 1/10)."""
    return (torch.as_tensor(n) + 1) * 9 // 10 + (((torch.as_tensor(n) + 1) * 9) % 10 > 0).long()


def marginal_thresholds(true_scores: torch.Tensor, cal: torch.Tensor) -> torch.Tensor:
    k = int(rank(N_CAL))
    return torch.sort(true_scores[cal], dim=1).values[:, k - 1]


def mondrian_thresholds(
    true_scores: torch.Tensor, labels: torch.Tensor, cal: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(N_SPLITS, C)`` per-class thresholds (+inf when too few rows) and class counts."""
    out = torch.empty(N_SPLITS, C, dtype=torch.float64)
    counts = torch.empty(N_SPLITS, C, dtype=torch.long)
    for c in range(C):
        mine = labels[cal] == c
        ordered = torch.sort(true_scores[cal].masked_fill(~mine, math.inf), dim=1).values
        n_c = mine.sum(1)
        k = rank(n_c)
        found = k <= n_c
        value = ordered.gather(1, (k - 1).clamp(0, N_CAL - 1).unsqueeze(1)).squeeze(1)
        out[:, c] = torch.where(found, value, math.inf)
        counts[:, c] = n_c
    return out, counts


def check(name: str, coverage: torch.Tensor, upper: torch.Tensor | float | None) -> None:
    """Assert the mean of per-split ``coverage`` lies within the bounds up to the MC error."""
    mean = float(coverage.mean())
    se = float(coverage.std()) / math.sqrt(coverage.numel())
    below = (1 - ALPHA - mean) / se
    above = -math.inf if upper is None else (mean - float(torch.as_tensor(upper).mean())) / se
    WORST[name] = max(below, above)
    print(f"{name}: mean coverage {mean:.5f} (SE {se:.2g}); worst excess {WORST[name]:+.2f} SE")
    assert below <= TOLERANCE_SE, f"{name}: {mean} is {below:.1f} SE below {1 - ALPHA}"
    assert above <= TOLERANCE_SE, f"{name}: {mean} is {above:.1f} SE above the upper bound"


@pytest.mark.parametrize(("score", "randomized"), RANDOMISED + DETERMINISTIC)
def test_marginal_coverage_lies_within_the_finite_sample_bounds(pool, splits, score, randomized):
    probs, labels = pool
    cal, test = splits
    gen = torch.Generator().manual_seed(1)
    s = conformity_scores(probs, labels, score=score, randomized=randomized, generator=gen)
    q = marginal_thresholds(s, cal)
    coverage = (s[test] <= q.unsqueeze(1)).double().mean(1)
    upper = 1 - ALPHA + 1 / (N_CAL + 1) if randomized else None
    check(f"marginal {score} randomized={randomized}", coverage, upper)


@pytest.mark.parametrize(("score", "randomized"), RANDOMISED + DETERMINISTIC)
def test_mondrian_coverage_of_every_class_lies_within_its_bounds(pool, splits, score, randomized):
    probs, labels = pool
    cal, test = splits
    gen = torch.Generator().manual_seed(2)
    s = conformity_scores(probs, labels, score=score, randomized=randomized, generator=gen)
    q, counts = mondrian_thresholds(s, labels, cal)
    assert bool(torch.isfinite(q).all()), "every class must have enough rows in every split"
    for c in range(C):
        in_class = labels[test] == c
        hits = ((s[test] <= q[:, c : c + 1]) & in_class).sum(1)
        coverage = hits.double() / in_class.sum(1).double()
        upper = 1 - ALPHA + 1 / (counts[:, c].double() + 1) if randomized else None
        check(f"mondrian class {c} {score} randomized={randomized}", coverage, upper)


@pytest.mark.parametrize("mondrian", [False, True])
@pytest.mark.parametrize("score", ["lac", "aps", "raps", "saps"])
def test_split_conformal_fits_the_thresholds_of_the_order_statistic(pool, splits, score, mondrian):
    probs, labels = pool
    cal, _ = splits
    s = conformity_scores(probs, labels, score=score, randomized=False)
    for i in range(5):
        model = SplitConformal(
            alpha=ALPHA, nonconformity=score, randomized=False, mondrian=mondrian
        )
        model.fit(probs=probs[cal[i]].numpy(), labels=labels[cal[i]].numpy())
        if mondrian:
            expected = mondrian_thresholds(s, labels, cal[i : i + 1].expand(N_SPLITS, -1))[0][0]
            np.testing.assert_array_equal(model.threshold_, expected.numpy())
        else:
            assert model.threshold_ == float(marginal_thresholds(s, cal[i : i + 1])[0])


def test_split_conformal_randomised_sets_cover_within_the_bounds(pool, splits):
    """The estimator end to end (its own seeded draws for calibration and test rows), over
    fewer splits: the randomised APS sets' coverage lies within both bounds."""
    probs, labels = pool
    cal, test = splits
    coverage = []
    for i in range(200):
        model = SplitConformal(alpha=ALPHA, nonconformity="aps", seed=i)
        model.fit(probs=probs[cal[i]], labels=labels[cal[i]])
        coverage.append(set_coverage(model.predict_set(probs=probs[test[i]]), labels[test[i]]))
    check("SplitConformal aps randomized", torch.stack(coverage), 1 - ALPHA + 1 / (N_CAL + 1))
