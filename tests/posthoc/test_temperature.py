from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
import torch
from helpers.posthoc import make_logits, softmax
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from selfcal.exceptions import DegenerateCalibration
from selfcal.posthoc import TemperatureScaling
from selfcal.posthoc import _inverse_temperature as solver
from selfcal.posthoc._inverse_temperature import LOG_BETA_BOUNDS
from selfcal.posthoc._scores import LARGEST_FITTABLE
from selfcal.posthoc.temperature import grid_search_temperature, grid_temperatures

CASES = [
    (seed, n, c)
    for seed, (n, c) in enumerate([(50, 2), (80, 3), (120, 10), (300, 4), (500, 7)] * 5)
]


def mean_nll(z: np.ndarray, y: np.ndarray, beta: float) -> float:
    a = beta * z
    m = a.max(1, keepdims=True)
    lse = np.log(np.exp(a - m).sum(1)) + m[:, 0]
    return float(np.mean(lse - a[np.arange(len(y)), y]))


def brute_force_temperature(z: np.ndarray, y: np.ndarray) -> float:
    """Dense grid over log(beta) in [-10, 10], then golden-section refinement in float64."""
    grid = np.linspace(-10, 10, 401)  # NLL is convex in beta: unimodal
    values = [mean_nll(z, y, math.exp(u)) for u in grid]
    k = int(np.argmin(values))
    a, b = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    ratio = (math.sqrt(5) - 1) / 2
    while b - a > 1e-12:
        c, d = b - ratio * (b - a), a + ratio * (b - a)
        if mean_nll(z, y, math.exp(c)) < mean_nll(z, y, math.exp(d)):
            b = d
        else:
            a = c
    return math.exp(-(a + b) / 2)


def at_a_bound(t: float) -> bool:
    """Whether a reference temperature lies at an end of ``[e^-10, e^10]``."""
    return abs(math.log(t)) > max(abs(b) for b in LOG_BETA_BOUNDS) - 1e-6


@pytest.mark.parametrize(("seed", "n", "c"), CASES)
def test_nll_matches_brute_force(seed, n, c):
    """Where the NLL's minimiser is inside the bounds, ``T`` is it (and nothing warns);
    where it lies at a bound (some margins near 0), ``T = 1`` with a warning."""
    rng = np.random.default_rng(1000 + seed)
    scale, margin = float(rng.uniform(0.3, 5)), float(rng.uniform(0, 3))
    z, y = make_logits(seed, n, c, scale=scale, margin=margin)
    ref = brute_force_temperature(z, y)
    if at_a_bound(ref):
        with pytest.warns(DegenerateCalibration, match="keeps falling as T grows"):
            assert TemperatureScaling().fit(logits=z, labels=y).temperature_ == 1.0
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateCalibration)
        t = TemperatureScaling().fit(logits=z, labels=y).temperature_
    assert t == pytest.approx(ref, rel=1e-6)


def test_brute_force_cases_cover_both_branches():
    """The cases above hold minimisers inside the bounds and at the upper bound."""
    at_bound = []
    for seed, n, c in CASES:
        rng = np.random.default_rng(1000 + seed)
        scale, margin = float(rng.uniform(0.3, 5)), float(rng.uniform(0, 3))
        at_bound.append(
            at_a_bound(brute_force_temperature(*make_logits(seed, n, c, scale, margin)))
        )
    assert 0 < sum(at_bound) < len(CASES) - 10


@pytest.mark.reference
@pytest.mark.parametrize(("seed", "n", "c"), CASES)
def test_nll_matches_sklearn_temperature(seed, n, c):
    """Margins of at least 0.5 noise units: every minimiser lies inside the bounds, where
    scikit-learn's bounded search and ours agree."""
    from sklearn.calibration import _TemperatureScaling

    rng = np.random.default_rng(2000 + seed)
    scale, margin = float(rng.uniform(0.3, 5)), float(rng.uniform(0.5, 3))
    z, y = make_logits(seed, n, c, scale=scale, margin=margin)
    t = TemperatureScaling().fit(logits=z, labels=y).temperature_
    ref = _TemperatureScaling().fit(z, y)
    assert not at_a_bound(1.0 / float(ref.beta_))
    assert t == pytest.approx(1.0 / float(ref.beta_), rel=1e-4)
    np.testing.assert_allclose(
        TemperatureScaling().fit(logits=z, labels=y).predict_proba(logits=z),
        ref.predict(z),
        atol=1e-6,
    )


@pytest.mark.reference
def test_matches_calibrated_classifier_cv_temperature():
    from sklearn.base import BaseEstimator, ClassifierMixin
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.frozen import FrozenEstimator

    class Fixed(ClassifierMixin, BaseEstimator):
        def fit(self, x, y):
            self.classes_ = np.unique(y)
            return self

        def decision_function(self, x):
            return x

        def predict(self, x):
            return x.argmax(1)

    z, y = make_logits(7, 600, 6)
    cal = CalibratedClassifierCV(FrozenEstimator(Fixed().fit(z, y)), method="temperature")
    cal.fit(z, y)
    ours = TemperatureScaling().fit(logits=z, labels=y)
    np.testing.assert_allclose(ours.predict_proba(logits=z), cal.predict_proba(z), atol=1e-6)


@pytest.mark.reference
def test_pinned_difference_sklearn_returns_the_bound():
    """Labels against the logits: the NLL falls all the way to ``T = e^10``. scikit-learn
    returns that bound (every probability ~1/C); we return ``T = 1`` with a warning. When
    every prediction is correct scikit-learn returns some ``T < 1`` (wherever its search
    stops on the flat, rounded NLL); we return ``T = 1`` with a warning."""
    from sklearn.calibration import _TemperatureScaling

    z, y = anti_or_separable(anti=True)
    assert -math.log(float(_TemperatureScaling().fit(z, y).beta_)) > 9.98  # at its xatol
    with pytest.warns(DegenerateCalibration, match="keeps falling as T grows to its bound e\\^10"):
        assert TemperatureScaling().fit(logits=z, labels=y).temperature_ == 1.0
    z, y = anti_or_separable(anti=False)
    assert 1.0 / float(_TemperatureScaling().fit(z, y).beta_) < 1.0
    with pytest.warns(DegenerateCalibration, match="all 3000 validation predictions are correct"):
        assert TemperatureScaling().fit(logits=z, labels=y).temperature_ == 1.0


def test_all_correct_returns_the_identity_with_a_warning():
    """Every sample correct with a margin: the NLL decreases for ever as ``T -> 0``; the fit
    returns ``T = 1`` (the scores unchanged) and says so."""
    z = np.array([[5.0, 0.0], [0.0, 5.0], [4.0, 1.0]])
    y = np.array([0, 1, 0])
    with pytest.warns(DegenerateCalibration, match="all 3 validation predictions are correct"):
        cal = TemperatureScaling().fit(logits=z, labels=y)
    assert cal.temperature_ == 1.0
    np.testing.assert_array_equal(cal.predict_proba(logits=z), softmax(z))


def test_minimum_at_the_lower_bound_returns_the_identity_with_a_warning():
    """Correct rows and a wrong prediction whose true class ties the top logit: the NLL keeps
    falling as ``T -> 0`` although not every prediction is correct; ``T = 1`` and a warning."""
    z = np.array([[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    y = np.array([0, 1, 1])  # row 2 predicts class 0 (the first of the tie)
    with pytest.warns(DegenerateCalibration, match="keeps falling as T shrinks to its bound"):
        assert TemperatureScaling().fit(logits=z, labels=y).temperature_ == 1.0


def test_constant_logits_keep_unit_temperature():
    z = np.zeros((10, 3))
    assert TemperatureScaling().fit(logits=z, labels=np.arange(10) % 3).temperature_ == 1.0


def test_large_input_uses_warm_start_and_matches_brute_force():
    z, y = make_logits(3, 20_000, 3)
    t = TemperatureScaling().fit(logits=z, labels=y).temperature_
    assert t == pytest.approx(brute_force_temperature(z, y), rel=1e-6)
    b = 1 / t  # first-order optimality on the full data
    p = softmax(b * z)
    assert abs(np.mean((p * z).sum(1) - z[np.arange(len(y)), y])) < 1e-10


# ------------------------------------------------------------------------ fast solver
def bounded_temperature(z: np.ndarray, y: np.ndarray) -> float:
    """scipy's bounded scalar minimiser of the float64 NLL over log(beta) in [-10, 10]."""
    from scipy.optimize import minimize_scalar

    res = minimize_scalar(
        lambda u: mean_nll(z, y, math.exp(u)),
        bounds=LOG_BETA_BOUNDS,
        method="bounded",
        options={"xatol": 1e-12},
    )
    return math.exp(-res.x)


def solver_problem(kind: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Problems with interior optima far apart: 2 or 100 classes, very peaked logits
    (beta* ~ 0.02), very flat ones (beta* ~ 100), optima within 1 of the log(beta) bounds,
    a large common offset, and -1e140 entries (below the float32 range, within
    ``LARGEST_FITTABLE``)."""
    n, c, scale = {
        "binary": (3000, 2, 3.0),
        "c100": (2000, 100, 3.0),
        "peaked": (2000, 10, 50.0),
        "flat": (2000, 10, 0.01),
        "near_lo": (2000, 10, 1e4),
        "near_hi": (2000, 10, 1e-4),
        "offset": (2000, 10, 3.0),
        "huge_negative": (2000, 10, 3.0),
    }[kind]
    z, y = make_logits(seed, n, c, scale=scale)
    if kind == "offset":
        z += 1000.0
    if kind == "huge_negative":  # a few non-label entries at -1e140: weight 0 for every beta
        rows = np.arange(0, n, 7)
        z[rows, (y[rows] + 1) % c] = -1e140
    return z, y


SOLVER_KINDS = ["binary", "c100", "peaked", "flat", "near_lo", "near_hi", "offset", "huge_negative"]


@pytest.mark.parametrize(
    ("kind", "dtype"),
    [
        (kind, dtype)
        for kind in SOLVER_KINDS
        for dtype in (np.float64, np.float32)
        if not (kind == "huge_negative" and dtype is np.float32)  # -1e140 is not a float32
    ],
)
def test_fast_solver_matches_bounded_minimiser(kind, dtype):
    z, y = solver_problem(kind, SOLVER_KINDS.index(kind))
    z = z.astype(dtype)
    t = TemperatureScaling().fit(logits=z, labels=y).temperature_
    zz = z.astype(np.float64)
    ref = bounded_temperature(zz, y)
    assert -9.5 < math.log(ref) < 9.5  # an interior optimum, not a bound
    assert t == pytest.approx(ref, rel=1e-6)
    if kind in ("near_lo", "near_hi"):
        assert abs(abs(math.log(t)) - 10) < 1  # within 1 of a log-T bound
    # the tighter float64 golden-section reference agrees too
    assert t == pytest.approx(brute_force_temperature(zz, y), rel=1e-6)


def anti_or_separable(anti: bool) -> tuple[np.ndarray, np.ndarray]:
    """Float32 logits with the labels against them (the NLL falls as ``T -> inf``) or every
    prediction correct by a margin of ~20 (it falls as ``T -> 0``)."""
    rng = np.random.default_rng(5)
    z = rng.normal(size=(3000, 10)).astype(np.float32)
    y = rng.integers(0, 10, 3000)
    z[np.arange(3000), y] += -0.5 if anti else 20.0
    return z, y


@pytest.mark.parametrize(("anti", "bound"), [(True, math.exp(10)), (False, math.exp(-10))])
def test_fast_solver_stops_at_the_bounds(anti, bound):
    """The solver returns the bound the NLL falls towards; the calibrator then returns
    ``T = 1`` with a warning."""
    z, y = anti_or_separable(anti)
    data = solver.LogitData.build(torch.from_numpy(z), torch.from_numpy(y))
    beta, converged = solver.solve_inverse_temperature(data)
    assert converged and 1 / beta == pytest.approx(bound, rel=1e-12)
    match = "keeps falling as T grows" if anti else "all 3000 validation predictions are correct"
    with pytest.warns(DegenerateCalibration, match=match):
        assert TemperatureScaling().fit(logits=z, labels=y).temperature_ == 1.0
    zz, beta = z.astype(np.float64), 1 / bound  # the NLL still falls towards that bound:
    p = softmax(beta * zz)  # L'(beta) = mean(E_p z - z_y) > 0 at beta_min, <= 0 at beta_max
    grad = np.mean((p * zz).sum(1) - zz[np.arange(len(y)), y])
    assert grad > 0 if anti else grad <= 0
    assert mean_nll(zz, y, beta) <= mean_nll(zz, y, beta * (1.1 if anti else 0.5))


def count_passes(monkeypatch) -> list[tuple[int, torch.dtype]]:
    calls = []
    inner = solver.nll_derivatives

    def counting(data, beta, dtype=torch.float64):
        calls.append((data.z.shape[0], dtype))
        return inner(data, beta, dtype)

    monkeypatch.setattr(solver, "nll_derivatives", counting)
    return calls


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_fit_takes_one_float64_pass(monkeypatch, dtype):
    z, y = make_logits(11, 40_000, 100)
    calls = count_passes(monkeypatch)
    t = TemperatureScaling().fit(logits=z.astype(dtype), labels=y).temperature_
    full64 = [c for c in calls if c == (40_000, torch.float64)]
    full32 = [c for c in calls if c == (40_000, torch.float32)]
    assert len(full64) == 1 and len(full32) <= 2  # subsample + float32 + one exact pass
    assert all(n == 40_000 or n <= 2 * solver.WARM_START_ROWS for n, _ in calls)
    b = 1 / t  # first-order optimality on the full float64 data
    zz = z.astype(dtype).astype(np.float64)
    p = softmax(b * zz)
    assert abs(np.mean((p * zz).sum(1) - zz[np.arange(len(y)), y])) < 1e-10


def test_derivatives_match_finite_differences():
    z, y = make_logits(12, 500, 6)
    data = solver.LogitData.build(torch.from_numpy(z), torch.from_numpy(y))
    beta, eps = 0.7, 1e-5
    g, h, t, q = solver.nll_derivatives(data, beta)
    assert g == pytest.approx(
        (mean_nll(z, y, beta + eps) - mean_nll(z, y, beta - eps)) / (2 * eps), rel=1e-6
    )
    up, down = (solver.nll_derivatives(data, beta + s) for s in (eps, -eps))
    for k, value in enumerate((h, t, q)):
        assert value == pytest.approx((up[k] - down[k]) / (2 * eps), rel=1e-6)
    single = solver.nll_derivatives(data, beta, torch.float32)
    np.testing.assert_allclose(single, (g, h, t, q), rtol=1e-4)


# ------------------------------------------------------------------------ grid mode
def reference_ece(logits: torch.Tensor, labels: torch.Tensor, n_bins: int = 15) -> float:
    """Transcription of the [FLC] ECELoss (bins (lower, upper])."""
    conf, pred = torch.softmax(logits, 1).max(1)
    acc = pred.eq(labels)
    bounds = torch.linspace(0, 1, n_bins + 1, dtype=torch.float64)
    ece = torch.zeros(1, dtype=torch.float64)
    for lower, upper in itertools.pairwise(bounds):
        in_bin = conf.gt(lower.item()) * conf.le(upper.item())
        prop = in_bin.double().mean()
        if prop.item() > 0:
            ece += torch.abs(conf[in_bin].mean() - acc[in_bin].double().mean()) * prop
    return ece.item()


def reference_grid_search(logits, labels, cross_validate="ece"):
    """Transcription of the [FLC]/[MC] ``set_temperature`` loop."""
    nll_val, ece_val = 10**7, 10**7
    t_opt_nll = t_opt_ece = 1.0
    t = 0.1
    for _ in range(100):
        scaled = logits / t
        after_nll = torch.nn.functional.cross_entropy(scaled, labels).item()
        after_ece = reference_ece(scaled, labels)
        if nll_val > after_nll:
            t_opt_nll, nll_val = t, after_nll
        if ece_val > after_ece:
            t_opt_ece, ece_val = t, after_ece
        t += 0.1
    return t_opt_ece if cross_validate == "ece" else t_opt_nll


def test_grid_values_carry_float_drift():
    grid = grid_temperatures()
    assert len(grid) == 100 and grid[0] == 0.1
    assert grid[2] == 0.1 + 0.1 + 0.1 != 0.3
    assert grid[-1] == pytest.approx(10.0, abs=1e-12)


@pytest.mark.parametrize("criterion", ["ece", "nll"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grid_reproduces_reference_loop(criterion, seed):
    z, y = make_logits(seed, 500, 10, scale=2.0)
    ours = TemperatureScaling(method="grid", criterion=criterion).fit(logits=z, labels=y)
    ref = reference_grid_search(torch.from_numpy(z), torch.from_numpy(y), criterion)
    assert ours.temperature_ == ref  # the same float, drift included


# ------------------------------------------------------------------------ properties
@settings(max_examples=25, deadline=None)
@given(
    arrays(
        np.float64,
        st.tuples(st.integers(2, 30), st.integers(2, 6)),
        elements=st.integers(-80, 80).map(lambda v: v / 8),
    ),
    st.integers(0, 2**31 - 1),
)
def test_temperature_never_changes_argmax(z, seed):
    top2 = np.sort(z, 1)[:, -2:]
    assume(np.all(top2[:, 1] > top2[:, 0]))  # a unique maximum in every row
    y = np.random.default_rng(seed).integers(0, z.shape[1], z.shape[0])
    assume(len(np.unique(y)) >= 2)  # labels of one class are a ValueError
    for method in ("nll", "grid"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateCalibration)  # T = 1 is fine here
            cal = TemperatureScaling(method=method).fit(logits=z, labels=y)
        p = cal.predict_proba(logits=z)
        np.testing.assert_array_equal(p.argmax(1), z.argmax(1))
        assert np.all((p >= 0) & (p <= 1))
        np.testing.assert_allclose(p.sum(1), 1, atol=1e-12)


def test_probs_input_uses_log_probs():
    z, y = make_logits(4, 300, 4)
    p = softmax(z)
    a = TemperatureScaling().fit(logits=np.log(p), labels=y)
    b = TemperatureScaling().fit(probs=p, labels=y)
    assert a.temperature_ == pytest.approx(b.temperature_, rel=1e-12)
    np.testing.assert_allclose(b.predict_proba(probs=p), softmax(z / b.temperature_), atol=1e-12)


def test_bad_hyperparameters_raise_in_fit():
    z, y = make_logits(0, 20, 3)
    est = TemperatureScaling(method="lbfgs")  # stored, not validated, at construction
    with pytest.raises(ValueError, match="method"):
        est.fit(logits=z, labels=y)
    with pytest.raises(ValueError, match="criterion"):
        TemperatureScaling(criterion="brier").fit(logits=z, labels=y)


def test_logits_beyond_the_largest_fittable_raise():
    """A logit of magnitude just below ``LARGEST_FITTABLE`` is fitted (to the bounded
    minimiser's temperature); just above, the fit is a ``ValueError`` naming the row."""
    z, y = make_logits(9, 300, 4)
    z[5, (y[5] + 1) % 4] = -0.99 * LARGEST_FITTABLE
    t = TemperatureScaling().fit(logits=z, labels=y).temperature_
    assert t == pytest.approx(bounded_temperature(z, y), rel=1e-6)
    z[5, (y[5] + 1) % 4] = -1.01 * LARGEST_FITTABLE
    with pytest.raises(ValueError, match="row 5 has a logit of magnitude 6.15e\\+149, beyond"):
        TemperatureScaling().fit(logits=z, labels=y)


def test_grid_edge_warns_and_returns_the_edge():
    """Pure-noise logits want a temperature beyond the grid: ``method="grid"`` returns the
    reference loop's ``T = 10.0`` (its largest) and warns that the minimum may lie beyond."""
    z, y = make_logits(5, 300, 4, scale=10.0, margin=0.0)
    ref = reference_grid_search(torch.from_numpy(z), torch.from_numpy(y), "nll")
    assert ref == grid_temperatures()[-1]
    with pytest.warns(DegenerateCalibration, match="lowest at the grid's largest temperature"):
        cal = TemperatureScaling(method="grid", criterion="nll").fit(logits=z, labels=y)
    assert cal.temperature_ == ref


@pytest.mark.parametrize("criterion", ["ece", "nll"])
def test_grid_all_correct_keeps_the_reference_choice_and_warns(criterion):
    """Every prediction correct: the grid's criterion falls towards its smallest ``T``;
    ``method="grid"`` reproduces the reference loop's choice (the grid reproduces the papers'
    numbers) and warns that the data do not identify it, pointing to ``method="nll"``."""
    z, y = anti_or_separable(anti=False)
    match = r"all 3000 validation predictions are correct.*returned the grid's choice T = 0\.1"
    with pytest.warns(DegenerateCalibration, match=match) as record:
        cal = TemperatureScaling(method="grid", criterion=criterion).fit(logits=z, labels=y)
    assert len(record) == 1
    assert cal.temperature_ == grid_search_temperature(
        torch.as_tensor(z), torch.as_tensor(y), criterion
    )
    assert cal.temperature_ == grid_temperatures()[0]


@pytest.mark.parametrize("kind", ["logits", "probs"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_prediction_in_chunks_of_rows_is_bit_for_bit_the_whole_softmax(monkeypatch, kind, dtype):
    """``predict_proba`` writes ``softmax(z / T)`` chunk by chunk into one float64 output (no
    float64 copy of the scores beside it): the same bits as the whole array at once."""
    import selfcal.predictions as predictions

    z, y = make_logits(3, 1000, 7)
    z = torch.as_tensor(z, dtype=dtype)
    scores = {"logits": z} if kind == "logits" else {"probs": torch.softmax(z.double(), 1)}
    ts = TemperatureScaling().fit(**scores, labels=torch.as_tensor(y))
    whole = ts.predict_proba(**scores)
    monkeypatch.setattr(predictions, "DEVICE_CHUNK_ELEMENTS", 7 * 64)  # 64 rows a chunk
    chunked = ts.predict_proba(**scores)
    expected = torch.softmax(
        (z.double() if kind == "logits" else scores["probs"].log()) / ts.temperature_, 1
    )
    assert torch.equal(chunked, whole) and torch.equal(whole, expected)
    assert ts.temperature_ != 1.0
