"""The fused CPU kernels (numba) against the torch path they replace on large inputs.

Each test forces the kernels on for small inputs (``MIN_ELEMENTS = 0``) and splits work into
many small blocks, so block boundaries and the thread pool are exercised too."""

from __future__ import annotations

import subprocess
import sys
import warnings

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
import torch
from helpers.cases import case_kwargs, make_case
from hypothesis import given, settings
from hypothesis import strategies as st

import selfcal._kernels as gate
from selfcal import Predictions
from selfcal._top_label import check_rows, top_label_pass
from selfcal.metrics import adaece, classwise_ece, debiased_ece, ece, mce
from selfcal.metrics.binning import bin_statistics, order_statistics, uniform_edges

cpu = pytest.importorskip("selfcal._kernels.cpu", reason="numba is not installed")


@pytest.fixture
def kernels_on(monkeypatch):
    monkeypatch.setattr(gate, "MIN_ELEMENTS", 0)
    monkeypatch.setattr(cpu, "BLOCK_ELEMENTS", 97)  # many blocks, ragged last block
    monkeypatch.delenv("SELFCAL_KERNELS", raising=False)


def torch_path(kind, scores):
    stats = top_label_pass(scores, kind)
    check_rows(scores, kind, stats)
    return stats[0], stats[1]


def test_gate():
    big = gate.MIN_ELEMENTS
    assert gate.kernels_for(big, torch.device("cpu")) is cpu
    assert gate.kernels_for(big - 1, torch.device("cpu")) is None
    assert gate.kernels_for(big, torch.device("meta")) is None


def test_small_inputs_never_import_numba():
    code = (
        "import sys, numpy as np, selfcal.metrics as m; "
        "m.adaece(logits=np.eye(3), labels=[0, 1, 2]); print('numba' in sys.modules)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "False"


def test_broken_numba_warns_once_and_falls_back(monkeypatch):
    monkeypatch.delattr(gate, "cpu", raising=False)
    monkeypatch.setitem(sys.modules, "selfcal._kernels.cpu", None)  # import now fails
    gate._load.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="numba kernels unavailable"):
            assert gate.kernels_for(gate.MIN_ELEMENTS, torch.device("cpu")) is None
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a second warning would raise
            assert gate.kernels_for(gate.MIN_ELEMENTS, torch.device("cpu")) is None
    finally:
        gate._load.cache_clear()


def test_gate_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("SELFCAL_KERNELS", "0")
    assert gate.kernels_for(gate.MIN_ELEMENTS, torch.device("cpu")) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", ["probs", "logits"])
@pytest.mark.parametrize("classes", [2, 3, 10, 100])
def test_top_label_equals_torch_path(kernels_on, kind, dtype, classes):
    gen = torch.Generator().manual_seed(classes)
    z = (torch.randn(1000, classes, generator=gen, dtype=torch.float64) * 4).to(dtype)
    z[::7] = z[::7].round()  # tied maxima: the first index wins on both paths
    scores = torch.softmax(z.double(), 1).to(dtype) if kind == "probs" else z
    if kind == "probs":
        scores[::11] = torch.eye(classes, dtype=dtype)[torch.arange(1000)[::11] % classes]
        scores[5] = 1 / classes  # an all-tied row
    conf, pred = cpu.top_label(scores, kind, 1e-4)
    ref_conf, ref_pred = torch_path(kind, scores)
    assert torch.equal(pred, ref_pred)
    assert conf.dtype == torch.float64
    if kind == "probs":
        assert torch.equal(conf, ref_conf)
    else:  # exp and the row sum may round differently by an ulp
        torch.testing.assert_close(conf, ref_conf, rtol=1e-14, atol=0)


def assert_same_error(monkeypatch, kind, scores, message):
    """The kernel flags the input, and both paths raise ``message``."""
    assert cpu.top_label(torch.from_numpy(scores), kind, 1e-4) is None
    build = Predictions.from_probs if kind == "probs" else Predictions.from_logits
    with pytest.raises(ValueError, match=message):
        build(scores)
    monkeypatch.setenv("SELFCAL_KERNELS", "0")
    with pytest.raises(ValueError, match=message):
        build(scores)


BAD_LOGITS = [
    (17, np.nan, "NaN or infinity; first at row 17"),
    (3, np.inf, "NaN or infinity; first at row 3"),
    (4, -np.inf, "NaN or infinity; first at row 4"),
]


@pytest.mark.parametrize("row, value, message", BAD_LOGITS)
def test_bad_logits_same_error_with_and_without_kernels(
    kernels_on, monkeypatch, row, value, message
):
    z = np.random.default_rng(0).normal(size=(300, 5))
    z[row, 2] = value
    z[row + 50, 1] = value  # a later bad row in another block is not the one reported
    assert_same_error(monkeypatch, "logits", z, message)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda p: p.__setitem__((9, 0), p[9, 0] + 3e-4), "sum to 1.*row 9"),
        (lambda p: p.__setitem__((2, slice(None)), -p[2]), r"\[0, 1\]; row 2"),
        (lambda p: p.__setitem__((8, 1), np.nan), "NaN or infinity; first at row 8"),
        (lambda p: p.__setitem__((6, slice(None)), 2 * p[6]), "row 6"),
    ],
)
def test_bad_probs_same_error_with_and_without_kernels(kernels_on, monkeypatch, mutate, message):
    p = np.random.default_rng(1).dirichlet(np.ones(4), size=300)
    mutate(p)
    assert_same_error(monkeypatch, "probs", p, message)


def test_row_sum_tolerance_is_the_same(kernels_on):
    p = np.full((200, 4), 0.25)
    p[0, 0] += 0.9e-4
    assert cpu.top_label(torch.from_numpy(p), "probs", 1e-4) is not None
    p[0, 0] += 0.2e-4
    assert cpu.top_label(torch.from_numpy(p), "probs", 1e-4) is None


EDGE_SETS = {
    "uniform 15": uniform_edges(15),
    "uniform 1": uniform_edges(1),
    "uniform 1000": uniform_edges(1000),
    "one bin, other edges": torch.tensor([0.2, 0.9], dtype=torch.float64),
    "two bins": torch.tensor([0.0, 0.4, 1.0], dtype=torch.float64),
    "repeated inner edges": torch.tensor([0.0, 0.2, 0.5, 0.5, 0.5, 0.9, 1.0], dtype=torch.float64),
    "all inner edges equal": torch.tensor([0.0, 0.5, 0.5, 1.0], dtype=torch.float64),
    "one-ulp span": torch.tensor([0.0, 0.5, np.nextafter(0.5, 1), 1.0], dtype=torch.float64),
    "subnormal span": torch.tensor([0.0, 1e-320, 2e-320, 1.0], dtype=torch.float64),
    "equal mass": None,
}


@pytest.mark.parametrize("name", list(EDGE_SETS))
def test_bin_sums_equal_torch_path(kernels_on, monkeypatch, name):
    rng = np.random.default_rng(3)
    values = np.concatenate(
        [
            rng.uniform(size=3000) ** 0.3,
            np.arange(16) / 15,
            [0.0, 1.0],
            np.full(50, 0.5),
            [1e-320, 1.5e-320, 2e-320, np.nextafter(0.5, 1)],
        ]
    )
    values = torch.from_numpy(values)
    targets = torch.from_numpy(rng.integers(0, 2, values.shape[0]).astype(float))
    edges = EDGE_SETS[name]
    if edges is None:
        edges = torch.quantile(values, torch.linspace(0, 1, 16, dtype=torch.float64))
        edges[5] = values[100]  # an edge equal to a value
    counts, value_sums, target_sums = cpu.bin_sums(
        values, targets, edges, name.startswith("uniform")
    )
    monkeypatch.setenv("SELFCAL_KERNELS", "0")
    ref = bin_statistics(values, targets, edges)
    assert torch.equal(counts, ref.count)
    torch.testing.assert_close(value_sums, ref.confidence_sum, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(target_sums, ref.accuracy_sum, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", ["spread", "ties", "saturated", "constant", "tiny", "narrow"])
def test_order_statistics_are_exact(kernels_on, shape, dtype):
    rng = np.random.default_rng(4)
    n = {"tiny": 3}.get(shape, 5000)
    x = {
        "spread": rng.uniform(size=n) ** 4,
        "ties": rng.integers(0, 5, n) / 4,
        "saturated": np.where(rng.uniform(size=n) < 0.7, 1.0, rng.uniform(size=n)),
        "constant": np.full(n, 0.3),
        "tiny": rng.uniform(size=n),
        "narrow": 0.5 + rng.integers(0, 3, n) * 2.0**-53,  # three adjacent float64 values
    }[shape].astype(dtype)
    ranks = np.unique(np.concatenate([[0, n - 1], rng.integers(0, n, 30)]))
    values = torch.from_numpy(x)
    selected = order_statistics(values, torch.from_numpy(ranks))
    assert selected.dtype == values.dtype
    np.testing.assert_array_equal(selected.numpy(), np.partition(x, ranks)[ranks])


def test_order_statistics_fall_back_when_the_range_is_too_narrow():
    x = torch.tensor([0.0, 5e-324, 5e-324, 0.0], dtype=torch.float64)
    assert cpu.order_statistics(x, torch.tensor([0, 3])) is None  # CELLS / 5e-324 overflows


METRICS = [ece, mce, adaece, classwise_ece, debiased_ece]


@pytest.mark.parametrize("seed", range(0, 200, 3))
def test_metrics_of_the_same_predictions_equal_with_and_without_kernels(
    kernels_on, monkeypatch, seed
):
    case = case_kwargs(make_case(seed))
    pred = (
        Predictions.from_probs(case["probs"], case["labels"])
        if "probs" in case
        else Predictions.from_logits(case["logits"], case["labels"])
    )
    fast = [m(pred) for m in METRICS]
    monkeypatch.setenv("SELFCAL_KERNELS", "0")
    slow = [m(pred) for m in METRICS]
    np.testing.assert_allclose(fast, slow, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("seed", [s for s in range(200) if "probs" in make_case(s)][::4])
def test_metrics_of_probabilities_equal_with_and_without_kernels(kernels_on, monkeypatch, seed):
    case = case_kwargs(make_case(seed))
    fast = [m(**case) for m in METRICS]
    monkeypatch.setenv("SELFCAL_KERNELS", "0")
    slow = [m(**case) for m in METRICS]
    np.testing.assert_allclose(fast, slow, rtol=1e-12, atol=1e-14)


def test_results_do_not_depend_on_the_number_of_threads(kernels_on):
    rng = np.random.default_rng(5)
    p = rng.dirichlet(np.full(10, 0.3), size=20_000).astype(np.float32)
    y = rng.integers(0, 10, 20_000)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = [ece(probs=p, labels=y), adaece(probs=p, labels=y)]
        torch.set_num_threads(2)
        two = [ece(probs=p, labels=y), adaece(probs=p, labels=y)]
    finally:
        torch.set_num_threads(threads)
    assert one == two


def test_correctness_indicator(kernels_on):
    rng = np.random.default_rng(6)
    z = rng.normal(size=(500, 3))
    y = rng.integers(0, 3, 500)
    pred = Predictions.from_logits(z, y)
    assert pred.correct.dtype == torch.float64
    np.testing.assert_array_equal(pred.correct.numpy(), (z.argmax(1) == y).astype(float))


@settings(max_examples=200, deadline=None)
@given(
    values=hnp.arrays(
        np.float64,
        st.integers(1, 400),
        elements=st.sampled_from([0.0, 1e-300, 0.25, 0.5, 1 - 2**-53, 1.0]) | st.floats(0, 1),
    ),
    data=st.data(),
)
def test_order_statistics_property(values, data):
    ranks = np.unique(
        data.draw(
            hnp.arrays(np.int64, st.integers(1, 20), elements=st.integers(0, values.shape[0] - 1))
        )
    )
    selected = cpu.order_statistics(torch.from_numpy(values), torch.from_numpy(ranks))
    if selected is not None:  # None: a range too narrow for cells, the caller partitions
        np.testing.assert_array_equal(selected.numpy(), np.partition(values, ranks)[ranks])
