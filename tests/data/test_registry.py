"""Registry behaviour and the contract every registered dataset keeps."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from helpers.data import ALL_DATASETS, SKLEARN, SYNTHETIC, all_labels, all_raw, cached

from selfcal.data import DataSplits, dataset_names, load_dataset, register_dataset
from selfcal.data.registry import _DATASETS


def test_all_datasets_registered():
    assert set(ALL_DATASETS) <= set(dataset_names())
    assert list(dataset_names()) == sorted(dataset_names())


def test_unknown_name_lists_known_ones():
    with pytest.raises(ValueError, match="unknown dataset 'blobs-9'.*blobs-1.3.*spiral-3.5"):
        load_dataset("blobs-9", 0)


def test_register_twice_is_an_error_and_new_loader_is_usable():
    @register_dataset("test-only-copy")
    def copy(seed: int, *, sizes=(70, 30, 100)) -> DataSplits:
        return load_dataset("blobs-1.3", seed, sizes=sizes)

    try:
        assert "test-only-copy" in dataset_names()
        assert len(load_dataset("test-only-copy", 3).train) == 70
        with pytest.raises(ValueError, match="already registered"):
            register_dataset("test-only-copy")(copy)
    finally:
        del _DATASETS._entries["test-only-copy"]


@pytest.mark.parametrize("seed", [-1, 1.5, True, "0", None])
def test_bad_seed(seed):
    with pytest.raises(ValueError, match="seed"):
        load_dataset("wine", seed)


def test_unknown_option_names_the_known_ones():
    with pytest.raises(ValueError, match=r"no option\(s\) \['sigma'\].*\['arm_scale', 'sizes'\]"):
        load_dataset("spiral-2.5", 0, sigma=3.0)


@pytest.mark.parametrize("name", ALL_DATASETS)
def test_same_seed_bit_identical_other_seed_different(name):
    first, again, other = cached(name, 0), load_dataset(name, 0), cached(name, 1)
    for split in ("train", "val", "test"):
        assert torch.equal(first.split(split).x, again.split(split).x)
        assert torch.equal(first.split(split).y, again.split(split).y)
        assert torch.equal(first.raw(split), again.raw(split))
    assert not torch.equal(first.train.x, other.train.x)
    assert first.seed == 0 and other.seed == 1


@pytest.mark.parametrize("name", SYNTHETIC)
def test_synthetic_sizes_dtypes_and_labels(name):
    data = cached(name)
    assert (len(data.train), len(data.val), len(data.test)) == (700, 300, 1000)
    for split in ("train", "val", "test"):
        part = data.split(split)
        assert part.x.dtype == torch.float32 and part.y.dtype == torch.int64
        assert part.x.shape == (len(part), data.n_features) == (len(part), len(data.feature_names))
        assert data.raw(split).dtype == torch.float64
    labels = all_labels(data)
    assert int(labels.min()) == 0 and int(labels.max()) == data.n_classes - 1
    assert torch.unique(all_raw(data), dim=0).shape[0] == 2000  # no sample in two splits


@pytest.mark.parametrize("name", SYNTHETIC)
def test_split_is_stratified(name):
    data = cached(name)
    overall = torch.bincount(all_labels(data), minlength=data.n_classes).double() / 2000
    for split in ("train", "val", "test"):
        y = data.split(split).y
        counts = torch.bincount(y, minlength=data.n_classes).double()
        assert torch.all((counts - overall * len(y)).abs() <= 1.0)


def test_sizes_option_changes_split_sizes():
    data = load_dataset("spiral-3.5", 4, sizes=(10, 20, 30))
    assert (len(data.train), len(data.val), len(data.test)) == (10, 20, 30)
    assert data.options["sizes"] == (10, 20, 30)
    with pytest.raises(ValueError, match="sizes"):
        load_dataset("blobs-1.3", 0, sizes=(700, 300))


@pytest.mark.parametrize("name", ALL_DATASETS)
def test_description_names_split_and_standardisation(name):
    text = cached(name).description
    assert "stratified random split" in text.lower() and "train statistics" in text


def test_import_does_not_import_sklearn():
    code = "import sys, selfcal.data; assert 'sklearn' not in sys.modules, 'sklearn imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name, shape", SKLEARN.items())
def test_sklearn_set_shapes_split_and_classes(name, shape):
    n, d, n_classes = shape
    data = cached(name)
    assert data.n_classes == n_classes and data.n_features == d
    sizes = (len(data.train), len(data.val), len(data.test))
    assert sum(sizes) == n and sizes == (round(0.35 * n), round(0.15 * n), n - sum(sizes[:2]))
    assert set(torch.unique(data.train.y).tolist()) == set(range(n_classes))
    assert data.options == {"fractions": (0.35, 0.15, 0.5)}
