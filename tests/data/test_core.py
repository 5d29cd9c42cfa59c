"""The data model, the stratified split and train-only standardisation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.data import ALL_DATASETS, cached
from sklearn.preprocessing import StandardScaler

from selfcal.data import DataSplits, Split
from selfcal.data.core import (
    build_splits,
    split_sizes_from_fractions,
    standardization_stats,
    stratified_split_indices,
)


def _toy(n: int = 60, d: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(3.0, 2.0, (n, d)), rng.integers(0, 3, n)


def _build(x: np.ndarray, y: np.ndarray, sizes=(20, 10, 30), **kw):
    return build_splits(
        name="toy",
        x_raw=x,
        y=y,
        n_classes=3,
        sizes=sizes,
        rng=np.random.default_rng(1),
        feature_names=[f"f{i}" for i in range(x.shape[1])],
        description="toy",
        seed=1,
        **kw,
    )


@pytest.mark.parametrize("seed", range(5))
def test_stratified_split_exact_sizes_partition_and_proportions(seed):
    rng = np.random.default_rng(seed)
    labels = rng.choice(4, size=997, p=[0.5, 0.3, 0.15, 0.05])
    sizes = (350, 150, 497)
    parts = stratified_split_indices(labels, sizes, np.random.default_rng(seed))
    assert tuple(len(p) for p in parts) == sizes
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(997))
    for part, size in zip(parts, sizes):
        for cls in range(4):
            expected = size * (labels == cls).sum() / labels.size
            assert abs((labels[part] == cls).sum() - expected) <= 1.0


def test_stratified_split_is_random_and_seeded():
    labels = np.repeat([0, 1], 50)
    a = stratified_split_indices(labels, (30, 20, 50), np.random.default_rng(0))
    b = stratified_split_indices(labels, (30, 20, 50), np.random.default_rng(0))
    c = stratified_split_indices(labels, (30, 20, 50), np.random.default_rng(1))
    assert all(np.array_equal(p, q) for p, q in zip(a, b))
    assert not np.array_equal(np.sort(a[0]), np.sort(c[0]))


def test_stratified_split_rejects_wrong_total():
    with pytest.raises(ValueError, match="add up"):
        stratified_split_indices(np.zeros(10, int), (3, 3, 3), np.random.default_rng(0))


def test_split_sizes_from_fractions():
    assert split_sizes_from_fractions(2000, (0.35, 0.15, 0.5)) == (700, 300, 1000)
    assert split_sizes_from_fractions(569, (0.35, 0.15, 0.5)) == (199, 85, 285)
    with pytest.raises(ValueError, match="fractions"):
        split_sizes_from_fractions(100, (0.5, 0.6, -0.1))


def test_standardization_stats_match_sklearn_standard_scaler():
    x, _ = _toy(200, 4)
    x[:, 2] = 7.0  # constant column: sklearn keeps scale 1 and only centres
    mean, std = standardization_stats(x)
    scaler = StandardScaler().fit(x)
    np.testing.assert_allclose(mean, scaler.mean_, rtol=1e-12)
    np.testing.assert_allclose(std, scaler.scale_, rtol=1e-12)
    np.testing.assert_allclose((x - mean) / std, scaler.transform(x), atol=1e-12)


def test_standardization_stats_mask_passes_columns_through():
    x, _ = _toy(50, 3)
    mean, std = standardization_stats(x, np.array([True, False, True]))
    assert mean[1] == 0.0 and std[1] == 1.0
    assert mean[0] == pytest.approx(x[:, 0].mean()) and std[2] == pytest.approx(x[:, 2].std())


def test_build_splits_uses_train_statistics_only():
    x, y = _toy()
    data = _build(x, y)
    raw_train = data.raw("train").numpy()
    np.testing.assert_array_equal(data.mean.numpy(), raw_train.mean(0))
    np.testing.assert_array_equal(data.std.numpy(), raw_train.std(0))
    assert torch.allclose(data.train.x.mean(0), torch.zeros(3), atol=1e-6)
    assert torch.allclose(data.train.x.std(0, unbiased=False), torch.ones(3), atol=1e-6)
    for name in ("val", "test"):  # held-out splits are not standardised by their own stats
        assert not torch.allclose(data.split(name).x.mean(0), torch.zeros(3), atol=1e-3)


@pytest.mark.parametrize("name", ALL_DATASETS)
def test_standardize_of_raw_reproduces_inputs_exactly(name):
    data = cached(name)
    for split in ("train", "val", "test"):
        assert torch.equal(data.standardize(data.raw(split)), data.split(split).x)
        assert torch.equal(data.standardize(data.raw(split).numpy()), data.split(split).x)
    expected = ((data.raw("test") - data.mean) / data.std).float()
    assert torch.allclose(data.test.x, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", ALL_DATASETS)
def test_train_inputs_have_zero_mean_unit_std_and_held_out_not_exactly(name):
    data = cached(name)
    scaled = (data.std != 1) | (data.mean != 0)  # columns that were standardised
    x_train = data.train.x.double()[:, scaled]
    zeros = torch.zeros(x_train.shape[1], dtype=torch.float64)
    assert torch.allclose(x_train.mean(0), zeros, atol=1e-6)
    varying = data.raw("train")[:, scaled].std(0) > 0
    train_std = x_train.std(0, unbiased=False)[varying]
    assert torch.allclose(train_std, torch.ones_like(train_std), atol=1e-5)
    for split in ("val", "test"):
        x = data.split(split).x.double()[:, scaled]
        assert (x.mean(0).abs() > 1e-4).any()
    passthrough = ~scaled
    assert torch.equal(data.train.x[:, passthrough], data.raw("train")[:, passthrough].float())


def test_standardize_validates_input():
    data = cached("blobs-1.3")
    with pytest.raises(ValueError, match="shape"):
        data.standardize(torch.zeros(4, 3))
    with pytest.raises(ValueError, match="shape"):
        data.standardize(torch.zeros(2))
    with pytest.raises(ValueError, match="NaN"):
        data.standardize(np.array([[0.0, np.nan]]))


def test_split_name_validation():
    with pytest.raises(ValueError, match="unknown split"):
        cached("blobs-1.3").raw("validation")


def test_split_validates_dtypes_and_shapes():
    with pytest.raises(ValueError, match="float32"):
        Split(x=torch.zeros(3, 2, dtype=torch.float64), y=torch.zeros(3, dtype=torch.int64))
    with pytest.raises(ValueError, match="int64"):
        Split(x=torch.zeros(3, 2), y=torch.zeros(3, dtype=torch.int32))
    with pytest.raises(ValueError, match="shape"):
        Split(x=torch.zeros(3, 2), y=torch.zeros(4, dtype=torch.int64))
    with pytest.raises(ValueError, match="NaN"):
        Split(x=torch.full((3, 2), float("nan")), y=torch.zeros(3, dtype=torch.int64))


def test_build_splits_validates_input():
    x, y = _toy()
    with pytest.raises(ValueError, match="NaN"):
        _build(np.where(np.arange(60)[:, None] == 5, np.nan, x), y)
    with pytest.raises(ValueError, match="integers"):
        _build(x, y + 0.5)
    with pytest.raises(ValueError, match="sizes"):
        _build(x, y, sizes=(60, 0, 0))
    with pytest.raises(ValueError, match="must lie in"):
        _build(x, y + 1)
    with pytest.raises(ValueError, match="one flag per column"):
        _build(x, y, standardized=[True, False])


def test_repr_is_short():
    text = repr(cached("blobs-1.3"))
    assert text == (
        "DataSplits(name='blobs-1.3', seed=0, train=700, val=300, test=1000, "
        "n_features=2, n_classes=5)"
    )


def _fields(data: DataSplits, **changes) -> dict:
    names = ("name", "train", "val", "test", "n_classes", "feature_names", "description")
    fields = {k: getattr(data, k) for k in names}
    fields.update(mean=data.mean, std=data.std, seed=data.seed)
    fields.update(raw_features=dict(data.raw_features), options=dict(data.options))
    fields.update(changes)
    return fields


def test_datasplits_validates_its_parts():
    data = cached("blobs-1.3")
    DataSplits(**_fields(data))  # a faithful copy is valid
    with pytest.raises(ValueError, match="std must be positive"):
        DataSplits(**_fields(data, std=torch.tensor([1.0, 0.0], dtype=torch.float64)))
    with pytest.raises(ValueError, match="raw_features needs"):
        DataSplits(**_fields(data, raw_features={"train": data.raw("train")}))
    with pytest.raises(ValueError, match="must lie in"):
        DataSplits(**_fields(data, n_classes=4))
    with pytest.raises(ValueError, match="feature names"):
        DataSplits(**_fields(data, feature_names=("a", "b", "c")))
    with pytest.raises(ValueError, match="do not match"):
        DataSplits(**_fields(data, val=data.test))


def test_datasplits_mappings_are_read_only():
    data = cached("blobs-1.3")
    with pytest.raises(TypeError):
        data.raw_features["train"] = torch.zeros(1, 2)  # type: ignore[index]
    with pytest.raises(TypeError):
        data.options["sizes"] = (1, 1, 1)  # type: ignore[index]
