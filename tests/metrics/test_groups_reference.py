"""The multicalibration error and its ECCE against Meta's ``mcgrad`` (``mcgrad.metrics``), the
binary metric they extend to ``C`` classes (:mod:`selfcal.metrics.multicalibration`).

Scores are continuous (no ties: ``mcgrad`` sorts with an unstable sort, so tied scores may be
walked in another order), segments are the whole set plus every group (``max_depth=1``,
``min_samples_per_segment=1``, every value of a group column kept), float64 throughout."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from selfcal import Predictions
from selfcal.metrics import bootstrap_ci, multicalibration_error, multicalibration_sigma
from selfcal.metrics.multicalibration import cumulative_calibration_errors

pytestmark = pytest.mark.reference
mc = pytest.importorskip("mcgrad.metrics")
pd = pytest.importorskip("pandas")

NAMES = list("abcdefg")


def binary_case(seed: int, n: int = 3000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positive-class probabilities, labels drawn with a group-dependent shift of the logit
    (miscalibrated per group, roughly calibrated overall), and the groups."""
    rng = np.random.default_rng(seed)
    groups = rng.choice(NAMES, n)
    shift = dict(zip(NAMES, rng.normal(0, 0.6, len(NAMES))))
    z = rng.normal(size=n)
    truth = 1 / (1 + np.exp(-(z + np.array([shift[g] for g in groups]))))
    return 1 / (1 + np.exp(-z)), (rng.random(n) < truth).astype(np.int64), groups


def peer(p, y, columns: dict[str, np.ndarray]) -> mc.MulticalibrationError:
    frame = pd.DataFrame({"p": p, "y": y, **columns})
    return mc.MulticalibrationError(
        frame,
        label_column="y",
        score_column="p",
        categorical_segment_columns=list(columns),
        max_depth=1,
        max_values_per_segment_feature=1000,
        min_samples_per_segment=1,
        precision_dtype="float64",
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_binary_multicalibration_error_is_mcgrads(seed: int) -> None:
    p, y, groups = binary_case(seed)
    reference = peer(p, y, {"group": groups})
    assert multicalibration_sigma(probs=p, labels=y, groups=groups) == pytest.approx(
        reference.mce_sigma, rel=1e-12
    )
    assert multicalibration_error(probs=p, labels=y, groups=groups) == pytest.approx(
        reference.mce, rel=1e-12
    )
    # given as one logit column the same numbers come out
    logit = np.log(p) - np.log1p(-p)
    assert multicalibration_error(logits=logit, labels=y, groups=groups) == pytest.approx(
        reference.mce, rel=1e-9
    )


def test_each_cell_is_mcgrads_ecce_and_sigma() -> None:
    p, y, groups = binary_case(3)
    ecce, sigma = cumulative_calibration_errors(Predictions.from_probs(p, y, groups))
    assert ecce[0, 1] == pytest.approx(mc.ecce(y, p), rel=1e-12)  # the whole set
    assert ecce[0, 1] / sigma[0, 1] == pytest.approx(mc.ecce_sigma(y, p), rel=1e-12)
    for g, name in enumerate(NAMES):
        rows = groups == name
        assert ecce[1 + g, 1] == pytest.approx(mc.ecce(y[rows], p[rows]), rel=1e-12)
        assert ecce[1 + g, 1] / sigma[1 + g, 1] == pytest.approx(
            mc.ecce_sigma(y[rows], p[rows]), rel=1e-12
        )
    # the two classes of a binary problem are mirror images: the same cells
    torch.testing.assert_close(ecce[:, 0], ecce[:, 1], rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(sigma[:, 0], sigma[:, 1], rtol=1e-12, atol=1e-15)
    segments = np.sort(peer(p, y, {"group": groups}).segments_ecce)
    np.testing.assert_allclose(np.sort(ecce[:, 1].numpy()), segments, rtol=1e-12)


def test_overlapping_groups_are_mcgrads_segments_of_two_columns() -> None:
    p, y, region = binary_case(4)
    device = np.random.default_rng(5).choice(["phone", "laptop", "tablet"], p.shape[0])
    membership = {f"region={r}": region == r for r in NAMES}
    membership |= {f"device={d}": device == d for d in ("phone", "laptop", "tablet")}
    reference = peer(p, y, {"region": region, "device": device})
    assert multicalibration_sigma(probs=p, labels=y, groups=membership) == pytest.approx(
        reference.mce_sigma, rel=1e-12
    )
    assert multicalibration_error(probs=p, labels=y, groups=membership) == pytest.approx(
        reference.mce, rel=1e-12
    )


def test_weighted_walk_is_mcgrads_weighted_ecce() -> None:
    """Under resampling weights a cell is ``mcgrad``'s ECCE with those sample weights."""
    p, y, groups = binary_case(6, n=500)
    weights = torch.from_numpy(np.random.default_rng(7).integers(0, 4, (3, 500))).double()
    pred = Predictions.from_probs(p, y, groups)
    ecce, sigma = cumulative_calibration_errors(pred, weights)
    for b in range(3):
        w = weights[b].numpy()
        assert ecce[b, 0, 1] == pytest.approx(mc.ecce(y, p, sample_weight=w / w.sum()), rel=1e-10)
        rows = groups == "c"
        g = NAMES.index("c")
        assert ecce[b, 1 + g, 1] == pytest.approx(
            mc.ecce(y[rows], p[rows], sample_weight=w[rows] / w[rows].sum()), rel=1e-10
        )
        expected = mc._ecce_standard_deviation_per_segment(p, sample_weight=w)[0]
        assert sigma[b, 0, 1] == pytest.approx(expected, rel=1e-10)


def test_multiclass_cells_are_mcgrads_one_vs_rest() -> None:
    """Each class of a multiclass problem is ``mcgrad``'s binary problem "is the label k?";
    the multicalibration error is the worst of them."""
    rng = np.random.default_rng(8)
    n, k = 2000, 4
    logits = rng.normal(size=(n, k)) * 1.5
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    y = np.array([rng.choice(k, p=row) for row in np.roll(p, 1, axis=1)])  # miscalibrated
    groups = rng.choice(NAMES[:4], n)
    expected = [peer(p[:, j], (y == j).astype(np.int64), {"group": groups}) for j in range(k)]
    got = multicalibration_sigma(logits=logits, labels=y, groups=groups)
    assert got == pytest.approx(max(r.mce_sigma for r in expected), rel=1e-10)
    assert multicalibration_error(logits=logits, labels=y, groups=groups) == pytest.approx(
        max(r.mce for r in expected), rel=1e-10
    )


def test_bootstrap_interval_contains_the_estimate() -> None:
    p, y, groups = binary_case(9, n=800)
    interval = bootstrap_ci(
        multicalibration_error, probs=p, labels=y, groups=groups, n_resamples=50
    )
    assert interval.low <= interval.value <= interval.high
    assert interval.value == pytest.approx(multicalibration_error(probs=p, labels=y, groups=groups))
