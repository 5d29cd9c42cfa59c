"""MNIST-1D, digits-images, and the core pieces image loaders share (extra splits, stats)."""

from __future__ import annotations

import functools
import random
import socket
import urllib.request

import numpy as np
import pytest
import requests
import torch
from helpers.data import cached

from selfcal.data import DataSplits, load_dataset
from selfcal.data.core import channel_standardization_stats, splits_from_parts


@functools.cache
def mnist1d_small(seed: int = 0) -> DataSplits:
    return load_dataset("mnist1d", seed, num_samples=500)


def package_mnist1d(seed: int, num_samples: int) -> dict:
    """The mnist1d package called directly (independent of our loader)."""
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.seed, args.num_samples = seed, num_samples
    state = np.random.get_state()
    try:
        return make_dataset(args)
    finally:
        np.random.set_state(state)


def _sorted_rows(x: np.ndarray) -> np.ndarray:
    return x[np.lexsort(x.T[::-1])]


def test_mnist1d_default_shapes_and_classes():
    data = cached("mnist1d")
    assert (len(data.train), len(data.val), len(data.test)) == (3600, 400, 1000)
    assert data.train.x.shape == (3600, 1, 40) and data.train.x.dtype == torch.float32
    assert data.n_classes == 10 and data.mean.shape == data.std.shape == (1, 1)
    for s in ("train", "val", "test"):
        assert set(data.split(s).y.tolist()) == set(range(10))
    assert abs(float(data.train.x.double().mean())) < 1e-6
    assert abs(float(data.train.x.double().std(unbiased=False)) - 1) < 1e-5


def test_mnist1d_is_the_packages_generator_with_our_seed():
    data, package = mnist1d_small(0), package_mnist1d(0, 500)
    np.testing.assert_array_equal(data.raw("test")[:, 0].numpy(), package["x_test"])
    np.testing.assert_array_equal(data.test.y.numpy(), package["y_test"])
    ours = torch.cat([data.raw("train"), data.raw("val")])[:, 0].numpy()
    ours_y = torch.cat([data.train.y, data.val.y]).numpy()
    np.testing.assert_array_equal(
        _sorted_rows(np.column_stack([ours, ours_y])),
        _sorted_rows(np.column_stack([package["x"], package["y"]])),
    )
    assert torch.equal(data.standardize(data.raw("val")), data.val.x)


def test_mnist1d_validation_is_a_stratified_10_percent():
    data = mnist1d_small(0)
    assert (len(data.train), len(data.val)) == (360, 40)
    pool = torch.cat([data.train.y, data.val.y])
    expected = np.bincount(pool.numpy(), minlength=10) * 0.1
    assert np.all(np.abs(np.bincount(data.val.y.numpy(), minlength=10) - expected) < 1)
    wider = load_dataset("mnist1d", 0, num_samples=500, valid_fraction=0.25)
    assert (len(wider.train), len(wider.val)) == (300, 100)


def test_mnist1d_sizes_pool_the_whole_draw_and_split_it_exactly():
    data, package = load_dataset("mnist1d", 2, sizes=(300, 120, 580)), package_mnist1d(2, 1000)
    assert (len(data.train), len(data.val), len(data.test)) == (300, 120, 580)
    for split in ("train", "val", "test"):  # stratified: 10 classes, equal counts within one
        counts = np.bincount(data.split(split).y.numpy(), minlength=10)
        assert counts.max() - counts.min() <= 1
    ours = torch.cat([data.raw(s) for s in ("train", "val", "test")])[:, 0].numpy()
    ours_y = torch.cat([data.split(s).y for s in ("train", "val", "test")]).numpy()
    theirs = np.concatenate([package["x"], package["x_test"]])
    theirs_y = np.concatenate([package["y"], package["y_test"]])
    np.testing.assert_array_equal(
        _sorted_rows(np.column_stack([ours, ours_y])),
        _sorted_rows(np.column_stack([theirs, theirs_y])),
    )
    again = load_dataset("mnist1d", 2, sizes=(300, 120, 580))
    assert torch.equal(again.test.x, data.test.x) and torch.equal(again.train.y, data.train.y)
    mean = float(data.raw("train").double().mean())
    assert float(data.mean.reshape(())) == pytest.approx(mean, rel=1e-12)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"sizes": (300, 120, 581)}, "multiple of 10"),
        ({"sizes": (300, 120)}, "three positive integers"),
        ({"sizes": (0, 120, 580)}, "three positive integers"),
        ({"sizes": (300, 120, 580), "num_samples": 1000}, "not both"),
    ],
)
def test_mnist1d_sizes_errors(options, match):
    with pytest.raises(ValueError, match=match):
        load_dataset("mnist1d", 0, **options)


def test_mnist1d_deterministic_and_leaves_global_rngs_alone():
    np.random.seed(123)
    random.seed(123)
    numpy_before, python_before = np.random.get_state()[1].copy(), random.getstate()
    again = load_dataset("mnist1d", 0, num_samples=500)
    assert np.array_equal(np.random.get_state()[1], numpy_before)
    assert random.getstate() == python_before
    first = mnist1d_small(0)
    for s in ("train", "val", "test"):
        assert torch.equal(first.split(s).x, again.split(s).x)
    assert not torch.equal(first.test.x, mnist1d_small(1).test.x)


def test_mnist1d_needs_no_network_and_writes_no_file(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("network access")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.setattr(requests, "get", refuse)
    monkeypatch.chdir(tmp_path)
    data = load_dataset("mnist1d", 2, num_samples=200)
    assert len(data.test) == 40 and list(tmp_path.iterdir()) == []


def test_mnist1d_bad_options():
    with pytest.raises(ValueError, match="valid_fraction"):
        load_dataset("mnist1d", 0, valid_fraction=1.0)
    with pytest.raises(ValueError, match="num_samples"):
        load_dataset("mnist1d", 0, num_samples=10)


def test_digits_images_are_the_flat_digits_with_the_same_split():
    images, flat = load_dataset("digits-images", 4), load_dataset("digits", 4)
    for s in ("train", "val", "test"):
        pixels = images.raw(s)
        assert pixels.shape == (len(flat.split(s)), 1, 8, 8)
        assert torch.equal((pixels * 16).reshape(len(pixels), 64), flat.raw(s))
        assert torch.equal(images.split(s).y, flat.split(s).y)
        assert torch.equal(images.standardize(pixels), images.split(s).x)
    train = images.raw("train").numpy()
    assert float(images.mean) == pytest.approx(train.mean())
    assert float(images.std) == pytest.approx(train.std())
    other = load_dataset("digits-images", 4, fractions=(0.5, 0.25, 0.25))
    assert len(other.train) == len(load_dataset("digits", 4, fractions=(0.5, 0.25, 0.25)).train)


def test_channel_statistics_pool_samples_and_positions():
    x = np.random.default_rng(0).normal(size=(50, 3, 4, 5)) * [[[1.0]], [[2.0]], [[3.0]]]
    x[:, 2] = 7.0  # a constant channel is only centred
    mean, std = channel_standardization_stats(x)
    assert mean.shape == std.shape == (3, 1, 1)
    per_channel = x.transpose(1, 0, 2, 3).reshape(3, -1)
    np.testing.assert_allclose(mean[:, 0, 0], per_channel.mean(1))
    np.testing.assert_allclose(std[:, 0, 0], [*per_channel[:2].std(1), 1.0])
    with pytest.raises(ValueError, match=r"\[n >= 1, C, ...\]"):
        channel_standardization_stats(np.zeros((5, 3)))


def _parts(n: dict[str, int]) -> tuple[dict, dict]:
    raw = {s: torch.arange(k * 4, dtype=torch.float64).reshape(k, 1, 4) for s, k in n.items()}
    return raw, {s: np.zeros(k, dtype=np.int64) + 1 for s, k in n.items()}


def test_extra_splits_are_validated_and_addressable():
    raw, labels = _parts({"train": 4, "val": 2, "test": 3, "meta_val": 2})
    kw = dict(name="t", n_classes=2, description="", seed=0)
    stats = dict(mean=np.zeros((1, 1)), std=np.ones((1, 1)))
    data = splits_from_parts(raw=raw, labels=labels, **stats, **kw)
    assert data.split_names[-1] == "meta_val" and len(data.split("meta_val")) == 2
    assert torch.equal(data.raw("meta_val"), raw["meta_val"])
    with pytest.raises(ValueError, match="unknown split"):
        data.split("meta")
    with pytest.raises(ValueError, match="raw_features needs"):
        three = {k: raw[k] for k in ("train", "val", "test")}
        DataSplits(**{**_fields(data), "raw_features": three})
    with pytest.raises(ValueError, match="extra must map"):
        DataSplits(**{**_fields(data), "extra": {"val": data.val}})


def _fields(data: DataSplits) -> dict:
    names = (
        "name",
        "train",
        "val",
        "test",
        "n_classes",
        "feature_names",
        "description",
        "mean",
        "std",
        "seed",
        "raw_features",
        "options",
        "extra",
    )
    return {k: getattr(data, k) for k in names}
