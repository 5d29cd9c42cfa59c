"""CIFAR-10/100 from a local folder: a tiny fake copy in the exact pickle format."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import torch
from helpers.image_fakes import CIFAR10_FOLDER, cifar_pickle_bytes, write_cifar10, write_cifar100

from selfcal.data import load_dataset
from selfcal.data.augment import black_fill
from selfcal.data.cifar import CIFAR_MEAN, CIFAR_STD, read_cifar_file
from selfcal.data.core import DATA_ENV_VAR
from selfcal.exceptions import DatasetNotFoundError

MEAN = torch.tensor(CIFAR_MEAN, dtype=torch.float64).reshape(3, 1, 1)
STD = torch.tensor(CIFAR_STD, dtype=torch.float64).reshape(3, 1, 1)


def reference_indices(n: int, seed: int = 1) -> list[int]:
    """The [FLC] code, literally: a Python list shuffled by NumPy's global RNG."""
    saved = np.random.get_state()
    try:
        indices = list(range(n))
        np.random.seed(seed)
        np.random.shuffle(indices)
    finally:
        np.random.set_state(saved)
    return indices


@pytest.fixture
def cifar10_root(tmp_path):
    return tmp_path, write_cifar10(tmp_path)


def test_standard_split_replicates_the_reference_index_logic(cifar10_root):
    root, fake = cifar10_root
    data = load_dataset("cifar10", 0, root=root)
    indices = reference_indices(100)
    val_idx, train_idx = indices[:10], indices[10:]  # floor(0.1 * 100) = 10
    assert (len(data.train), len(data.val), len(data.test)) == (90, 10, 30)
    np.testing.assert_array_equal(data.raw("val").numpy(), fake["train_x"][val_idx])
    np.testing.assert_array_equal(data.raw("train").numpy(), fake["train_x"][train_idx])
    np.testing.assert_array_equal(data.val.y.numpy(), fake["train_y"][val_idx])
    np.testing.assert_array_equal(data.train.y.numpy(), fake["train_y"][train_idx])
    np.testing.assert_array_equal(data.raw("test").numpy(), fake["test_x"])
    np.testing.assert_array_equal(data.test.y.numpy(), fake["test_y"])


def test_meta_split_is_8_1_1_with_meta_val_in_extra(cifar10_root):
    root, fake = cifar10_root
    data = load_dataset("cifar10", 0, root=root, split="meta")
    indices = reference_indices(100)
    assert data.split_names == ("train", "val", "test", "meta_val")
    assert (len(data.train), len(data.val), len(data.split("meta_val"))) == (80, 10, 10)
    np.testing.assert_array_equal(data.raw("val").numpy(), fake["train_x"][indices[:10]])
    np.testing.assert_array_equal(data.raw("meta_val").numpy(), fake["train_x"][indices[10:20]])
    meta_y = data.split("meta_val").y.numpy()
    np.testing.assert_array_equal(meta_y, fake["train_y"][indices[10:20]])
    np.testing.assert_array_equal(data.raw("train").numpy(), fake["train_x"][indices[20:]])
    assert len(data.test) == 30
    assert "meta_val=10" in repr(data)


def test_shapes_dtypes_and_fixed_normalisation(cifar10_root):
    root, _ = cifar10_root
    data = load_dataset("cifar10", 0, root=root)
    assert data.train.x.shape == (90, 3, 32, 32) and data.train.x.dtype == torch.float32
    assert data.train.y.dtype == torch.int64 and data.raw("train").dtype == torch.uint8
    assert data.n_classes == 10 and data.n_features == 3
    for s in ("train", "val", "test"):
        expected = (data.raw(s).double() / 255 - MEAN) / STD
        torch.testing.assert_close(data.split(s).x.double(), expected, rtol=0, atol=1e-6)
        assert torch.equal(data.standardize(data.raw(s)), data.split(s).x)
    black = (-MEAN / STD).flatten()
    torch.testing.assert_close(black_fill(data).double(), black, atol=1e-6, rtol=0)


def test_cifar100_uses_fine_labels_and_100_classes(tmp_path):
    fake = write_cifar100(tmp_path)
    data = load_dataset("cifar100", 3, root=tmp_path)
    indices = reference_indices(100)
    assert data.n_classes == 100
    assert (len(data.train), len(data.val), len(data.test)) == (90, 10, 20)
    np.testing.assert_array_equal(data.train.y.numpy(), fake["train_y"][indices[10:]])
    np.testing.assert_array_equal(data.raw("test").numpy(), fake["test_x"])


def test_split_is_fixed_across_seeds_unless_split_seed_is_none(cifar10_root):
    root, _ = cifar10_root
    first, again = load_dataset("cifar10", 0, root=root), load_dataset("cifar10", 5, root=root)
    for s in ("train", "val", "test"):
        assert torch.equal(first.split(s).x, again.split(s).x)
    by_seed_0 = load_dataset("cifar10", 0, root=root, split_seed=None)
    by_seed_1 = load_dataset("cifar10", 1, root=root, split_seed=None)
    assert torch.equal(by_seed_1.raw("val"), first.raw("val"))  # seed 1 is the reference seed
    assert not torch.equal(by_seed_0.raw("val"), first.raw("val"))


def test_lookup_order_root_then_environment(tmp_path, monkeypatch):
    fake_dir, empty = tmp_path / "data", tmp_path / "empty"
    empty.mkdir()
    write_cifar10(fake_dir)
    monkeypatch.setenv(DATA_ENV_VAR, str(fake_dir))
    assert len(load_dataset("cifar10", 0).train) == 90
    with pytest.raises(DatasetNotFoundError):
        load_dataset("cifar10", 0, root=empty)  # root wins over the environment
    assert len(load_dataset("cifar10", 0, root=fake_dir / CIFAR10_FOLDER).val) == 10


def test_missing_folder_error_names_the_layout(tmp_path, monkeypatch):
    monkeypatch.delenv(DATA_ENV_VAR, raising=False)
    with pytest.raises(ValueError, match=DATA_ENV_VAR) as no_dir:
        load_dataset("cifar10", 0)
    assert isinstance(no_dir.value, FileNotFoundError)
    with pytest.raises(FileNotFoundError) as missing:
        load_dataset("cifar10", 0, root=tmp_path)
    message = str(missing.value)
    assert all(part in message for part in ("cifar-10-batches-py/", "data_batch_1", "test_batch"))
    assert "cs.toronto.edu/~kriz/cifar.html" in message
    with pytest.raises(ValueError, match="cifar-100-python/ with train, test"):
        load_dataset("cifar100", 0, root=tmp_path)


def test_bad_options_are_value_errors(cifar10_root):
    root, _ = cifar10_root
    with pytest.raises(ValueError, match="split must be one of"):
        load_dataset("cifar10", 0, root=root, split="8:1:1")
    with pytest.raises(ValueError, match="valid_fraction"):
        load_dataset("cifar10", 0, root=root, valid_fraction=0.0)
    with pytest.raises(ValueError, match="split_seed"):
        load_dataset("cifar10", 0, root=root, split_seed=-1)


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("echo should-never-run",))


def test_pickles_that_reference_other_objects_are_refused(tmp_path):
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({b"data": _RunsCode(), b"labels": []}, protocol=2))
    with pytest.raises(ValueError, match="unexpected object"):
        read_cifar_file(path, "labels")


def test_malformed_batches_are_value_errors(tmp_path):
    path = tmp_path / "batch"
    path.write_bytes(cifar_pickle_bytes({b"data": np.zeros((2, 10), np.uint8), b"labels": [0, 1]}))
    with pytest.raises(ValueError, match="uint8"):
        read_cifar_file(path, "labels")
    path.write_bytes(cifar_pickle_bytes({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}))
    with pytest.raises(ValueError, match="one integer label per image"):
        read_cifar_file(path, "labels")
    path.write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="not a CIFAR"):
        read_cifar_file(path, "labels")
