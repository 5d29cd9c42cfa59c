"""The torchmetrics faces (:mod:`selfcal.integrations.torchmetrics`).

* ``compute()`` after many batches equals the one-shot selfcal metric on the concatenated data
  (bin counts exactly, sums up to float64 summation order), on the 200 cases of the ``case``
  fixture;
* the AdaECE sketch equals its definition (equal-mass edges rounded up to the grid), written
  here independently from the sorted confidences, and stays within its certified bound of the
  exact AdaECE;
* torchmetrics' calling convention -- ``metric(preds, target)`` with the ``kind`` given at
  construction, a positional ``MetricCollection`` mixing these classes with torchmetrics' own
  -- gives the one-shot values, and each misuse is a one-line ``ValueError``;
* torchmetrics' own ``MulticlassCalibrationError`` agrees where the definitions coincide, and
  the differences (bin convention and the extra bin at 1.0, float32 sums, a state that grows
  with N, the positive class of the binary task) are pinned.
"""

from __future__ import annotations

import doctest
import itertools
import math
import warnings

import numpy as np
import pytest
import torch
from helpers.cases import N_CASES, case_probs, make_case

import selfcal.metrics as M
import selfcal.recalibration as R
from selfcal import Predictions
from selfcal.exceptions import LikelyProbabilities
from selfcal.metrics.binning import classwise_bins, top_label_bins

pytest.importorskip("torchmetrics")
import selfcal.integrations.torchmetrics as tm
from selfcal.integrations.torchmetrics import (
    ECE,
    MCE,
    NLL,
    SKETCH_GRID,
    AdaECE,
    Brier,
    ClasswiseECE,
    adaece_from_sketch,
)

BINS = 15


def prediction(case: dict) -> Predictions:
    if "logits" in case:
        return Predictions.from_logits(case["logits"], case["labels"])
    return Predictions.from_probs(case["probs"], case["labels"])


def batches(n: int, seed: int) -> list[slice]:
    """1 to 5 contiguous batches at random cut points (single rows included)."""
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.integers(0, n + 1, size=int(rng.integers(0, 5))))
    bounds = [0, *cuts.tolist(), n]
    return [slice(a, b) for a, b in itertools.pairwise(bounds) if b > a]


def feed(metric, case: dict, seed: int = 0):
    kind = "logits" if "logits" in case else "probs"
    scores, labels = torch.as_tensor(case[kind]), torch.as_tensor(case["labels"])
    for part in batches(len(labels), seed):
        metric.update(**{kind: scores[part]}, labels=labels[part])
    return metric


# ----------------------------------------------------------------------- batches = one shot
def test_batches_equal_the_one_shot_metrics(case):
    """Values to 1e-12; the states are the one-shot bin statistics (counts equal, sums to
    float64 rounding)."""
    pred = prediction(case)
    c = pred.n_classes
    pairs = {
        "ece": (ECE(BINS), M.ece(pred, n_bins=BINS)),
        "rmsce": (ECE(BINS, norm="l2"), M.ece(pred, n_bins=BINS, norm="l2")),
        "mce": (MCE(BINS), M.mce(pred, n_bins=BINS)),
        "adaece": (AdaECE(BINS), M.adaece(pred, n_bins=BINS)),
        "adaece-l2": (AdaECE(BINS, norm="l2"), M.adaece(pred, n_bins=BINS, norm="l2")),
        "classwise": (ClasswiseECE(c, BINS), M.classwise_ece(pred, n_bins=BINS)),
        "brier": (Brier(), M.brier(pred)),
        "nll": (NLL(), M.nll(pred)),
    }
    for seed, (name, (metric, expected)) in enumerate(pairs.items()):
        got = feed(metric, case, seed).compute()
        assert got.dtype == torch.float64
        assert float(got) == pytest.approx(float(expected), abs=1e-12, rel=1e-12), name
    for name, one_shot in (
        ("ece", top_label_bins(pred, BINS)),
        ("classwise", classwise_bins(pred, BINS)),
    ):
        state = pairs[name][0]
        assert torch.equal(state.count, one_shot.count)
        for field in ("confidence_sum", "accuracy_sum"):
            torch.testing.assert_close(
                getattr(state, field), getattr(one_shot, field), rtol=0, atol=1e-9
            )


def test_the_state_has_a_fixed_size():
    """ECE's state is 3 M numbers however many samples it has seen."""
    metric = ECE(BINS)
    rng = np.random.default_rng(0)
    for n in (10, 1000, 5000):
        metric.update(logits=torch.from_numpy(rng.normal(size=(n, 4))), labels=torch.zeros(n))
        assert sum(v.numel() for v in metric.metric_state.values()) == 3 * BINS
    assert float(metric.count.sum()) == 6010


def test_forward_gives_the_batch_value_and_accumulates():
    rng = np.random.default_rng(1)
    z, y = (
        torch.from_numpy(3 * rng.normal(size=(600, 5))),
        torch.from_numpy(rng.integers(0, 5, 600)),
    )
    metric = ECE(BINS)
    first = metric(logits=z[:250], labels=y[:250])
    second = metric(logits=z[250:], labels=y[250:])
    assert float(first) == pytest.approx(M.ece(logits=z[:250], labels=y[:250]).item(), abs=1e-12)
    assert float(second) == pytest.approx(M.ece(logits=z[250:], labels=y[250:]).item(), abs=1e-12)
    assert float(metric.compute()) == pytest.approx(M.ece(logits=z, labels=y).item(), abs=1e-12)
    metric.reset()
    with pytest.raises(ValueError, match="no sample has been added"):
        metric.compute()


def test_a_metric_collection_shares_states_and_gives_the_same_values():
    """In a torchmetrics MetricCollection, ECE and MCE (the same bin statistics) form one
    compute group; every value is still the one-shot metric."""
    from torchmetrics import MetricCollection

    rng = np.random.default_rng(2)
    z, y = (
        torch.from_numpy(3 * rng.normal(size=(500, 4))),
        torch.from_numpy(rng.integers(0, 4, 500)),
    )
    collection = MetricCollection(
        {"ece": ECE(), "mce": MCE(), "adaece": AdaECE(), "classwise": ClasswiseECE(4), "nll": NLL()}
    )
    for part in np.array_split(np.arange(500), 5):
        collection.update(logits=z[part], labels=y[part])
    values = {name: float(v) for name, v in collection.compute().items()}
    assert ["ece", "mce"] in list(collection.compute_groups.values())
    expected = {
        "ece": M.ece(logits=z, labels=y),
        "mce": M.mce(logits=z, labels=y),
        "adaece": M.adaece(logits=z, labels=y),
        "classwise": M.classwise_ece(logits=z, labels=y),
        "nll": M.nll(logits=z, labels=y),
    }
    for name, value in expected.items():
        assert values[name] == pytest.approx(float(value), abs=1e-12), name


# ----------------------------------------------------------------------- the input contract
def test_scores_are_named_and_validated():
    metric = ECE()
    z = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    y = torch.tensor([0, 1])
    with pytest.raises(ValueError, match="got scores without a kind"):
        metric.update(z, labels=y)  # without kind, a bare tensor is never read as scores
    with pytest.raises(ValueError, match="exactly one of"):
        metric.update(logits=z, probs=z, labels=y)
    with pytest.raises(ValueError, match="labels are required"):
        metric.update(logits=z)
    with pytest.raises(ValueError, match="probs rows must sum to 1"):
        metric.update(probs=torch.tensor([[0.5, 0.6], [0.2, 0.8]]), labels=y)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 2\); row 1"):
        metric.update(logits=z, labels=torch.tensor([0, 2]))
    with pytest.raises(ValueError, match="NaN or infinity; first at row 0"):
        metric.update(logits=torch.tensor([[math.nan, 0.0]]), labels=torch.tensor([0]))
    metric.update(Predictions.from_logits(z, y))  # a validated Predictions is accepted
    assert float(metric.count.sum()) == 2


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="n_bins must be an integer >= 1, got 0"):
        ECE(n_bins=0)
    with pytest.raises(ValueError, match="norm must be one of"):
        ECE(norm="l3")
    with pytest.raises(ValueError, match="mode must be one of"):
        AdaECE(mode="approx")
    with pytest.raises(ValueError, match="mode='sketch' needs norm='l1'"):
        AdaECE(mode="sketch", norm="l2")
    with pytest.raises(ValueError, match="grid_size must be an integer >= 1"):
        AdaECE(mode="sketch", grid_size=0)
    with pytest.raises(ValueError, match="num_classes must be an integer >= 2"):
        ClasswiseECE(num_classes=1)
    metric = ClasswiseECE(num_classes=3)
    with pytest.raises(ValueError, match="the scores have 2 classes but n_classes=3"):
        metric.update(logits=torch.zeros(4, 2), labels=torch.zeros(4))
    for empty in (ECE(), MCE(), AdaECE(), AdaECE(mode="sketch"), ClasswiseECE(3), Brier(), NLL()):
        with pytest.raises(ValueError, match="no sample has been added"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torchmetrics warns of compute before update
            empty.compute()


# ----------------------------------------------------------------------- torchmetrics' calls
def logits_and_labels(n: int, c: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    z = torch.from_numpy(3 * rng.normal(size=(n, c)))
    return z, torch.from_numpy(rng.integers(0, c, n))


def one_line_error(call, match: str) -> None:
    """``call()`` raises a one-line ``ValueError`` matching ``match``."""
    with pytest.raises(ValueError, match=match) as error:
        call()
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("kind", ["logits", "probs"])
def test_every_class_reads_positional_scores_as_its_kind(kind):
    """``metric(preds, target)``, ``update(preds, target)`` and ``update(preds=, target=)``
    read ``preds`` as the constructed ``kind``: the one-shot value, and forward's batch value."""
    z, y = logits_and_labels(400, 3, 10)
    scores = z if kind == "logits" else torch.softmax(z, 1)
    pairs = [
        (lambda: ECE(BINS, kind=kind), M.ece),
        (lambda: MCE(BINS, kind=kind), M.mce),
        (lambda: AdaECE(BINS, kind=kind), M.adaece),
        (lambda: ClasswiseECE(3, BINS, kind=kind), M.classwise_ece),
        (lambda: Brier(kind=kind), M.brier),
        (lambda: NLL(kind=kind), M.nll),
    ]
    for make, one_shot in pairs:
        expected = float(one_shot(**{kind: scores}, labels=y))
        forward, update, keywords = make(), make(), make()
        batch = forward(scores[:150], y[:150])
        assert float(batch) == pytest.approx(
            float(one_shot(**{kind: scores[:150]}, labels=y[:150])), abs=1e-12
        )
        forward(scores[150:], y[150:])
        update.update(scores[:150], y[:150])
        update.update(scores[150:], y[150:])
        keywords.update(preds=scores[:150], target=y[:150])
        keywords.update(preds=scores[150:], target=y[150:])
        for metric in (forward, update, keywords):
            assert float(metric.compute()) == pytest.approx(expected, abs=1e-12), metric


def test_an_explicit_kind_is_taken_as_stated():
    """Probabilities given to ``kind="logits"`` are read as logits (never re-guessed), and a
    ``Predictions`` says what it holds whatever the kind; the named forms ignore ``kind``."""
    z, y = logits_and_labels(200, 4, 11)
    p = torch.softmax(z, 1)
    as_logits = ECE(kind="logits")
    as_logits.update(p, y)
    with pytest.warns(LikelyProbabilities):  # read as asked, with the evidence said
        as_named = float(M.ece(logits=p, labels=y))
    assert float(as_logits.compute()) == pytest.approx(as_named, abs=1e-12)
    assert abs(float(as_logits.compute()) - float(M.ece(probs=p, labels=y))) > 1e-3
    named = ECE(kind="logits")
    named.update(Predictions.from_probs(p, y))
    named.update(probs=p, labels=y)
    assert float(named.compute()) == pytest.approx(float(M.ece(probs=p, labels=y)), abs=1e-12)


@pytest.mark.parametrize("call", ["forward", "update", "keywords"])
def test_a_positional_metric_collection_mixes_ours_with_torchmetrics(call):
    """A real MetricCollection of ours and torchmetrics' MulticlassAccuracy and
    MulticlassCalibrationError, fed ``(preds, target)`` over several batches: ours equal the
    one-shot selfcal values, the accuracy the hand-computed one, torchmetrics' calibration
    error its own one-shot value."""
    from torchmetrics import MetricCollection
    from torchmetrics.classification import MulticlassAccuracy, MulticlassCalibrationError

    c = 4
    z, y = logits_and_labels(700, c, 12)
    collection = MetricCollection(
        {
            "ece": ECE(BINS, kind="logits"),
            "mce": MCE(BINS, kind="logits"),
            "adaece": AdaECE(BINS, kind="logits"),
            "nll": NLL(kind="logits"),
            "brier": Brier(kind="logits"),
            "classwise": ClasswiseECE(c, BINS, kind="logits"),
            "accuracy": MulticlassAccuracy(num_classes=c, average="micro"),
            "tm_ece": MulticlassCalibrationError(num_classes=c, n_bins=BINS),
        }
    )
    for part in np.array_split(np.arange(700), 4):
        if call == "forward":
            collection(z[part], y[part])
        elif call == "update":
            collection.update(z[part], y[part])
        else:
            collection.update(preds=z[part], target=y[part])
    values = {name: float(value) for name, value in collection.compute().items()}
    expected = {
        "ece": M.ece(logits=z, labels=y, n_bins=BINS),
        "mce": M.mce(logits=z, labels=y, n_bins=BINS),
        "adaece": M.adaece(logits=z, labels=y, n_bins=BINS),
        "nll": M.nll(logits=z, labels=y),
        "brier": M.brier(logits=z, labels=y),
        "classwise": M.classwise_ece(logits=z, labels=y, n_bins=BINS),
    }
    for name, value in expected.items():
        assert values[name] == pytest.approx(float(value), abs=1e-12), name
    assert values["accuracy"] == pytest.approx(float((z.argmax(1) == y).double().mean()), abs=1e-7)
    peer = MulticlassCalibrationError(num_classes=c, n_bins=BINS)
    assert values["tm_ece"] == pytest.approx(float(peer(z, y)), abs=1e-6)


def test_calling_mistakes_are_one_line_value_errors():
    z, y = logits_and_labels(10, 3, 13)
    bare = ECE()
    for call in (
        lambda: bare(z, y),
        lambda: bare.update(z, y),
        lambda: bare.update(preds=z, target=y),
    ):
        one_line_error(call, r"ECE got scores without a kind: construct it with kind='logits'")
    one_line_error(lambda: NLL().update(z, y), "NLL got scores without a kind")
    metric = ECE(kind="logits")
    one_line_error(lambda: metric.update(z, y, logits=z), "pass the scores once")
    one_line_error(lambda: metric.update(preds=z, probs=z, labels=y), "pass the scores once")
    one_line_error(lambda: metric.update(z, y, labels=y), "pass the labels once")
    one_line_error(lambda: metric.update(logits=z, target=y, labels=y), "pass the labels once")
    one_line_error(lambda: ECE(kind="odds"), "kind must be one of logits, probs")
    one_line_error(lambda: Brier(kind="logit"), "kind must be one of")
    assert float(metric.count.sum()) == 0  # nothing was added by a refused call


def test_classwise_ece_takes_n_classes_or_num_classes():
    """``n_classes`` (selfcal's name) or ``num_classes`` (torchmetrics'); it is required, as
    the (C, M) state must exist before the first batch to be summed across processes."""
    for metric in (ClasswiseECE(3), ClasswiseECE(num_classes=3), ClasswiseECE(3, num_classes=3)):
        assert metric.n_classes == 3
        assert tuple(metric.count.shape) == (3, 15)
    one_line_error(ClasswiseECE, r"ClasswiseECE needs n_classes=C")
    one_line_error(lambda: ClasswiseECE(kind="logits"), r"ClasswiseECE needs n_classes=C")
    one_line_error(lambda: ClasswiseECE(3, num_classes=4), "n_classes=3 and num_classes=4 disagree")
    one_line_error(lambda: ClasswiseECE(n_classes=1), "n_classes must be an integer >= 2")
    metric = ClasswiseECE(n_classes=3, kind="logits")
    one_line_error(
        lambda: metric.update(torch.zeros(4, 4), torch.zeros(4)), "4 classes but n_classes=3"
    )


def test_the_module_docstring_example_runs():
    """The module docstring's ``ECE(kind="logits")(logits, labels)`` and positional
    ``MetricCollection`` example prints what it says."""
    import selfcal.integrations.torchmetrics as module

    parsed = doctest.DocTestParser().get_doctest(module.__doc__ or "", {}, "module", None, 0)
    result = doctest.DocTestRunner().run(parsed, out=lambda text: None)
    assert result.attempted >= 5
    assert result.failed == 0


# ----------------------------------------------------------------------- the AdaECE sketch
def grid_cell(value: float, grid: int) -> int:
    """Cell ``k`` with ``k/G < value <= (k+1)/G`` (cell 0 closed); exact for G a power of 2."""
    return max(math.ceil(value * grid) - 1, 0)


def sketch_transcription(conf: np.ndarray, correct: np.ndarray, grid: int, n_bins: int = BINS):
    """The sketch's definition from the sorted confidences: the reference code's equal-mass
    positions ``linspace(0, N, M + 1)``; inner edge ``j`` moved up to the upper boundary of
    the grid cell that holds the order statistic of rank ``floor(min(pos_j, N - 1))``; the ECE
    of those bins, ``(e_m, e_{m+1}]``; and the bound ``(2/N) sum over the cells holding ranks
    lo_j and lo_j + 1 of A_k (1 - k/G) + (n_k - A_k)(k+1)/G``."""
    n = len(conf)
    s = np.sort(conf)
    lo = np.floor(np.minimum(np.linspace(0, n, n_bins + 1), n - 1)).astype(int)[1:-1]
    hi = np.minimum(lo + 1, n - 1)
    inner = np.array([(grid_cell(s[r], grid) + 1) / grid for r in lo])
    which = np.searchsorted(inner, conf, side="left")  # number of inner edges below c
    gaps = [math.fsum(correct[which == m]) - math.fsum(conf[which == m]) for m in range(n_bins)]
    value = math.fsum(abs(g) for g in gaps) / n
    cells = np.maximum(np.ceil(conf * grid).astype(int) - 1, 0)  # grid_cell, vectorised
    bound = 0.0
    for k in sorted({grid_cell(s[r], grid) for r in (*lo, *hi)}):
        inside = cells == k
        a_k, n_k = correct[inside].sum(), inside.sum()
        bound += a_k * (1 - k / grid) + (n_k - a_k) * (k + 1) / grid
    return value, 2 * bound / n


@pytest.mark.parametrize("grid", [64, SKETCH_GRID])
def test_sketch_is_its_definition_and_within_its_bound(case, grid):
    pred = prediction(case)
    metric = feed(AdaECE(BINS, mode="sketch", grid_size=grid), case, 2)
    value, bound = float(metric.compute()), float(metric.error_bound())
    conf, correct = pred.confidence.numpy(), pred.correct.numpy()
    expected_value, expected_bound = sketch_transcription(conf, correct, grid)
    assert value == pytest.approx(expected_value, abs=1e-12)
    assert bound == pytest.approx(expected_bound, abs=1e-12)
    exact = float(M.adaece(pred, n_bins=BINS))
    assert abs(value - exact) <= bound + 1e-12


def test_sketch_differs_from_exact_only_within_its_bound():
    """Hand-made: confidences 0.6, 0.7, 0.8, 0.9 with correctness 0, 0, 1, 1, two bins, a
    grid of two cells. The exact edge is 0.8 (bins {0.6, 0.7, 0.8} and {0.9}: gaps -1.1 and
    +0.1, AdaECE 1.2 / 4 = 0.3); the sketch rounds it up to 1.0 (one bin, gap -1.0, 0.25).
    Bound: cell 1 holds all four, two correct: 2 (2 (1 - 1/2) + 2 (2/2)) / 4 = 1.5."""
    conf = np.array([0.6, 0.7, 0.8, 0.9])
    correct = np.array([0, 0, 1, 1])
    probs = np.stack([conf, *(np.tile((1 - conf) / 3, (3, 1)))], 1)
    labels = np.where(correct == 1, 0, 1)
    exact = M.adaece(probs=probs, labels=labels, n_bins=2)
    metric = AdaECE(n_bins=2, mode="sketch", grid_size=2)
    metric.update(probs=torch.from_numpy(probs), labels=torch.from_numpy(labels))
    assert exact == pytest.approx(0.3, abs=1e-12)
    assert float(metric.compute()) == pytest.approx(0.25, abs=1e-12)
    assert float(metric.error_bound()) == pytest.approx(1.5, abs=1e-12)
    assert float(AdaECE(n_bins=2).error_bound()) == 0.0  # the exact mode is exact


def test_sketch_bound_is_small_on_spread_out_confidences():
    """On 2·10⁵ predictions whose confidences spread over (0.2, 1) the certified bound at the
    default grid is below 10⁻³ (the module docstring's ``4 (M - 1) f / G``), and the actual
    error is within it."""
    rng = np.random.default_rng(5)
    n, c = 200_000, 5
    z = rng.normal(size=(n, c)) * rng.uniform(0.2, 3, size=(n, 1))
    y = rng.integers(0, c, n)
    metric = AdaECE(mode="sketch")
    for part in np.array_split(np.arange(n), 3):
        metric.update(logits=torch.from_numpy(z[part]), labels=torch.from_numpy(y[part]))
    value, bound = float(metric.compute()), float(metric.error_bound())
    exact = M.adaece(logits=z, labels=y)
    assert bound < 1e-3
    assert abs(value - exact) <= bound


def test_adaece_from_sketch_needs_samples():
    metric = AdaECE(mode="sketch", grid_size=8)
    with pytest.raises(ValueError, match="no sample has been added"):
        adaece_from_sketch(metric.sketch)
    with pytest.raises(ValueError, match="only mode='sketch'"):
        _ = AdaECE().sketch


# ----------------------------------------------------------------------- torchmetrics
def on_edge(values: np.ndarray, n_bins: int = BINS, tol: float = 1e-6) -> np.ndarray:
    k = np.round(values * n_bins)
    return np.abs(values - k / n_bins) <= tol


def float32_exact(p: np.ndarray) -> np.ndarray:
    p32 = p.astype(np.float32).astype(np.float64)
    return (p32 / p32.sum(1, keepdims=True)).astype(np.float32)


def definitions_coincide(p32: np.ndarray) -> bool:
    """No float32 confidence on an equal-width edge or at 1.0."""
    conf32 = p32.max(1).astype(np.float64)
    return not (on_edge(conf32).any() or (conf32 >= 1 - 1e-6).any())


def test_many_cases_are_really_compared_with_torchmetrics():
    """Guard against the skips hollowing out the comparison."""
    compared = sum(
        definitions_coincide(float32_exact(case_probs(make_case(s)))) for s in range(N_CASES)
    )
    assert compared >= 80


def torchmetrics_multiclass(p32: np.ndarray, y: np.ndarray, norm: str, seed: int) -> float:
    from torchmetrics.classification import MulticlassCalibrationError

    peer = MulticlassCalibrationError(num_classes=p32.shape[1], n_bins=BINS, norm=norm)
    for part in batches(len(y), seed):
        peer.update(torch.from_numpy(p32[part]), torch.from_numpy(y[part]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(peer.compute())


@pytest.mark.reference
def test_torchmetrics_where_definitions_coincide(case):
    """Same batches into both: equal to 1e-6 when no confidence sits on an edge or at 1.0 and
    the inputs are float32-exact (1e-5 beyond a few hundred samples: its float32 sums)."""
    p32 = float32_exact(case_probs(case))
    if not definitions_coincide(p32):
        pytest.skip("definitions differ (edge / 1.0): pinned in the next test")
    y = case["labels"]
    tol = 1e-6 if len(y) <= 300 else 1e-5
    for norm in ("l1", "l2", "max"):
        ours = feed(ECE(BINS, norm=norm), {"probs": p32.astype(np.float64), "labels": y}, 3)
        theirs = torchmetrics_multiclass(p32, y, norm, 4)
        assert float(ours.compute()) == pytest.approx(theirs, abs=tol)


@pytest.mark.reference
def test_torchmetrics_differs_on_edges_and_at_one():
    """Pinned: a confidence of exactly 9/15 lands in bin (8/15, 9/15] for us and in
    [9/15, 10/15) for torchmetrics; a confidence of 1.0 gets torchmetrics' extra bin. Its
    value is its own convention written out; ours is selfcal's one-shot ECE."""
    conf = np.array([9 / 15, 9 / 15, 0.62, 1.0, 0.99])
    correct = np.array([1, 1, 0, 0, 1])
    probs = np.stack([conf, 1 - conf], 1)
    labels = np.where(correct == 1, 0, 1)
    ours = ECE(BINS)
    for part in (slice(0, 2), slice(2, 5)):
        ours.update(probs=torch.from_numpy(probs[part]), labels=torch.from_numpy(labels[part]))
    assert float(ours.compute()) == pytest.approx(M.ece(probs=probs, labels=labels), abs=1e-15)
    # torchmetrics' convention: [lower, upper) with an extra bin at 1.0
    edges = np.append(np.arange(BINS + 1) / BINS, np.inf)
    which = np.searchsorted(edges, conf, side="right") - 1
    gaps = [abs(correct[which == m].sum() - conf[which == m].sum()) for m in range(BINS + 1)]
    theirs = torchmetrics_multiclass(probs.astype(np.float32), labels, "l1", 0)
    assert theirs == pytest.approx(sum(gaps) / len(conf), abs=1e-6)
    assert abs(theirs - float(ours.compute())) > 1e-3


@pytest.mark.reference
def test_torchmetrics_sums_in_float32_and_keeps_every_confidence():
    """Pinned: on 2·10⁶ samples in 4 batches torchmetrics' float32 sums drift from the exact
    ECE by more than 1e-6 (ours: float64 bin sums, within 1e-12 of the one-shot value, which
    tests/metrics/test_reference_binned.py ties to math.fsum); its state holds every
    confidence, ours 3 M numbers."""
    from torchmetrics.classification import MulticlassCalibrationError

    rng = np.random.default_rng(7)
    n = 2_000_000
    conf = rng.uniform(0.5, 1.0, n).astype(np.float32).astype(np.float64)
    correct = rng.uniform(size=n) < conf**2
    probs = np.stack([conf, 1 - conf], 1)
    labels = np.where(correct, 0, 1)
    ours, peer = ECE(BINS), MulticlassCalibrationError(num_classes=2, n_bins=BINS)
    for part in np.array_split(np.arange(n), 4):
        ours.update(probs=torch.from_numpy(probs[part]), labels=torch.from_numpy(labels[part]))
        peer.update(
            torch.from_numpy(probs[part].astype(np.float32)), torch.from_numpy(labels[part])
        )
    exact = M.ece(probs=probs, labels=labels)
    assert float(ours.compute()) == pytest.approx(exact, abs=1e-12)
    assert abs(float(peer.compute()) - exact) > 1e-6
    assert sum(v.numel() for v in ours.metric_state.values()) == 3 * BINS
    peer_state = sum(sum(t.numel() for t in v) for v in peer.metric_state.values())
    assert peer_state >= n


@pytest.mark.reference
def test_torchmetrics_binary_task_is_our_classwise_ece(case):
    """torchmetrics' BinaryCalibrationError scores the positive class: it equals our
    ClasswiseECE on two classes (away from edges), not our top-label ECE."""
    from torchmetrics.classification import BinaryCalibrationError

    if "probs" in case or case_probs(case).shape[1] != 2:
        pytest.skip("binary logits cases only")
    p = case_probs(case)
    p1 = p[:, 1].astype(np.float32)
    if on_edge(p1.astype(np.float64)).any() or (p1 >= 1 - 1e-6).any() or (p1 <= 1e-6).any():
        pytest.skip("edges")
    y = case["labels"]
    peer = BinaryCalibrationError(n_bins=BINS)
    for part in batches(len(y), 5):
        peer.update(torch.from_numpy(p1[part]), torch.from_numpy(y[part]))
    ours = feed(ClasswiseECE(2, BINS), case, 6)
    assert float(ours.compute()) == pytest.approx(float(peer.compute()), abs=1e-6)


@pytest.mark.parametrize("part", ["refinement", "calibration"])
@pytest.mark.parametrize("kind", ["logits", "probs"])
def test_the_refinement_decomposition_over_batches_equals_the_function(part, kind):
    """Batches accumulated, then one recalibrator fitted on them all: the selfcal function on
    the concatenation (same rows and cross-fitted)."""
    cls = tm.RefinementLoss if part == "refinement" else tm.CalibrationLoss
    fn = R.refinement_loss if part == "refinement" else R.calibration_loss
    rng = np.random.default_rng(0)
    z = torch.from_numpy(rng.normal(size=(300, 4)) * 3)
    y = torch.from_numpy(rng.integers(0, 4, 300))
    scores = z if kind == "logits" else torch.softmax(z, 1)
    for options in ({}, {"loss": "brier", "recalibrator": "ts-mix", "folds": 3}):
        metric = cls(kind=kind, **options)
        for rows in torch.arange(300).split(70):
            metric.update(scores[rows], y[rows])
        expected = fn(labels=y, **{kind: scores}, **options)
        torch.testing.assert_close(metric.compute(), expected, rtol=0, atol=1e-12)


def test_the_refinement_metric_takes_one_kind_until_reset():
    metric = tm.RefinementLoss()
    z = torch.randn(50, 3, dtype=torch.float64)
    y = torch.arange(50) % 3
    metric.update(logits=z, labels=y)
    with pytest.raises(ValueError, match="one kind of scores"):
        metric.update(probs=torch.softmax(z, 1), labels=y)
    metric.reset()
    metric.update(probs=torch.softmax(z, 1), labels=y)
    torch.testing.assert_close(
        metric.compute(), R.refinement_loss(probs=torch.softmax(z, 1), labels=y)
    )
    with pytest.raises(ValueError, match="loss"):
        tm.RefinementLoss(loss="ece")
