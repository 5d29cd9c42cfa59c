"""Shifted test sets (:mod:`selfcal.data.shift`): which corruptions apply, severity 0 is the
clean split, every set is fixed by seed, and each corruption grows with its severity."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from selfcal.data import load_dataset
from selfcal.data import shift as S


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits-images", seed=0)


@pytest.fixture(scope="module")
def blobs():
    return load_dataset("blobs-1.7", seed=0)


def test_the_corruptions_follow_the_inputs(digits, blobs):
    assert S.corruptions(digits) == ("noise", "blur", "rotation", "contrast")
    assert S.corruptions(blobs) == ("noise", "covariate")
    sets = S.shifted_test_sets(blobs)
    assert sorted(sets) == sorted((c, s) for c in ("noise", "covariate") for s in range(1, 6))


def test_severity_zero_is_the_clean_split_and_every_set_is_fixed_by_seed(digits, blobs):
    for data in (digits, blobs):
        for corruption in S.corruptions(data):
            assert S.shifted(data, corruption, 0) is data.test
            a, b = S.shifted(data, corruption, 3), S.shifted(data, corruption, 3)
            assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
            assert a.x.shape == data.test.x.shape and a.x.dtype == torch.float32
            assert not torch.equal(a.x, data.test.x)
    other = load_dataset("blobs-1.7", seed=1)
    assert not torch.equal(
        S.shifted(other, "noise", 3).x - other.test.x, S.shifted(blobs, "noise", 3).x - blobs.test.x
    )


def test_image_corruptions_grow_with_severity(digits):
    raw = digits.raw("test").double()
    clean_std = float(raw.std(dim=(1, 2, 3)).mean())
    stds, diffs = [], {c: [] for c in S.IMAGE_CORRUPTIONS}
    for severity in S.SEVERITIES:
        for corruption in S.IMAGE_CORRUPTIONS:
            x = S.shifted(digits, corruption, severity).x.double() * digits.std + digits.mean
            diffs[corruption].append(float((x - raw).abs().mean()))
            assert float(x.min()) >= -1e-6 and float(x.max()) <= 1 + 1e-6  # pixels in [0, 1]
        contrast = S.shifted(digits, "contrast", severity).x.double() * digits.std + digits.mean
        stds.append(float(contrast.std(dim=(1, 2, 3)).mean()))
    for corruption, values in diffs.items():
        assert values == sorted(values), corruption  # farther from the clean pixels
    assert stds == sorted(stds, reverse=True)
    np.testing.assert_allclose(stds[0], S.CONTRAST[0] * clean_std, rtol=1e-6)
    # the labels never move for image corruptions
    assert torch.equal(S.shifted(digits, "rotation", 5).y, digits.test.y)


def test_feature_noise_and_covariate_shift_grow_with_severity(blobs):
    x = blobs.test.x.double()
    noise = [float((S.shifted(blobs, "noise", s).x.double() - x).std()) for s in S.SEVERITIES]
    np.testing.assert_allclose(noise, [0.25 * s for s in S.SEVERITIES], rtol=0.1)
    direction = np.random.default_rng([blobs.seed, 7]).normal(size=x.shape[1])
    direction = torch.from_numpy(direction / np.linalg.norm(direction))
    means = [
        float((S.shifted(blobs, "covariate", s).x.double() @ direction).mean())
        for s in S.SEVERITIES
    ]
    assert means == sorted(means) and means[0] > float((x @ direction).mean())
    shifted = S.shifted(blobs, "covariate", 4)
    rows = [int(torch.nonzero((x.float() == r).all(1))[0]) for r in shifted.x[:20]]
    assert torch.equal(shifted.y[:20], blobs.test.y[rows])  # resampled rows keep their labels


def test_mnist1d_draws_from_its_generator_with_raised_corruption(monkeypatch):
    monkeypatch.setattr(S, "MNIST1D_ROWS", 200)
    S._mnist1d_signals.cache_clear()
    data = load_dataset("mnist1d", seed=0, sizes=(400, 200, 400))
    assert S.corruptions(data) == ("generator",)
    mild, severe = S.shifted(data, "generator", 1), S.shifted(data, "generator", 5)
    assert mild.x.shape == (200, 1, 40) and sorted(mild.y.unique().tolist()) == list(range(10))
    # rougher signals: the mean absolute step between neighbouring positions grows
    roughness = [float(s.x.diff(dim=2).abs().mean()) for s in (data.test, mild, severe)]
    assert roughness == sorted(roughness)
    S._mnist1d_signals.cache_clear()


def test_unknown_corruptions_and_severities_are_one_line_errors(blobs):
    with pytest.raises(ValueError, match="unknown corruption 'blur' for blobs"):
        S.shifted(blobs, "blur", 1)
    with pytest.raises(ValueError, match="severity must be 0-5"):
        S.shifted(blobs, "noise", 6)
