"""Tiny-ImageNet from a local folder: a tiny fake ``tiny-imagenet-200/`` with real JPEGs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.image_fakes import WNIDS, write_tiny_imagenet
from PIL import Image

from selfcal.data import load_dataset
from selfcal.data.tiny_imagenet import IMAGENET_MEAN, IMAGENET_STD

SORTED = sorted(WNIDS)


def decoded(path) -> np.ndarray:
    """PIL's own decoding, channel first (the independent reading)."""
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB")).transpose(2, 0, 1)


def train_pool(folder):
    paths = [p for w in SORTED for p in sorted((folder / "train" / w / "images").glob("*.JPEG"))]
    return np.stack([decoded(p) for p in paths]), np.repeat(np.arange(len(SORTED)), 4)


def official_val(folder):
    paths = sorted((folder / "val" / "images").glob("*.JPEG"))
    wnid_of = dict(
        line.split("\t")[:2]
        for line in (folder / "val" / "val_annotations.txt").read_text().splitlines()
    )
    labels = np.array([SORTED.index(wnid_of[p.name]) for p in paths])
    return np.stack([decoded(p) for p in paths]), labels


def shuffled(n: int) -> np.ndarray:
    indices = np.arange(n)
    np.random.RandomState(1).shuffle(indices)
    return indices


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_tiny_imagenet(tmp_path_factory.mktemp("tin"))


def test_clean_protocol_holds_validation_out_of_train(folder):
    data = load_dataset("tiny-imagenet", 0, root=folder.parent, valid_fraction=0.25)
    x_pool, y_pool = train_pool(folder)
    x_val, y_val = official_val(folder)
    order = shuffled(12)  # floor(0.25 * 12) = 3 validation images
    assert (len(data.train), len(data.val), len(data.test)) == (9, 3, 4)
    np.testing.assert_array_equal(data.raw("val").numpy(), x_pool[order[:3]])
    np.testing.assert_array_equal(data.raw("train").numpy(), x_pool[order[3:]])
    np.testing.assert_array_equal(data.train.y.numpy(), y_pool[order[3:]])
    np.testing.assert_array_equal(data.raw("test").numpy(), x_val)
    np.testing.assert_array_equal(data.test.y.numpy(), y_val)
    assert data.n_classes == 3 and data.train.x.shape[1:] == (3, 64, 64)


def test_grayscale_images_become_rgb(folder):
    data = load_dataset("tiny-imagenet", 0, root=folder)
    gray = data.raw("test")[3]  # val_3.JPEG was saved in mode L
    assert torch.equal(gray[0], gray[1]) and torch.equal(gray[1], gray[2])


def test_reference_protocol_uses_official_val_as_val_and_test(folder):
    data = load_dataset("tiny-imagenet", 0, root=folder, reference_protocol=True)
    x_pool, _ = train_pool(folder)
    assert data.val is data.test and len(data.train) == 12
    np.testing.assert_array_equal(data.raw("train").numpy(), x_pool)
    with pytest.raises(ValueError, match="no 'meta' split"):
        load_dataset("tiny-imagenet", 0, root=folder, reference_protocol=True, split="meta")


def test_meta_split_and_normalisation(folder):
    data = load_dataset("tiny-imagenet", 0, root=folder, split="meta", valid_fraction=0.25)
    assert (len(data.train), len(data.val), len(data.split("meta_val"))) == (6, 3, 3)
    mean = torch.tensor(IMAGENET_MEAN, dtype=torch.float64).reshape(3, 1, 1)
    std = torch.tensor(IMAGENET_STD, dtype=torch.float64).reshape(3, 1, 1)
    expected = (data.raw("train").double() / 255 - mean) / std
    torch.testing.assert_close(data.train.x.double(), expected, atol=1e-6, rtol=0)


def test_missing_folder_and_broken_annotations(tmp_path, folder):
    with pytest.raises(FileNotFoundError, match="tiny-imagenet-200/ with wnids.txt") as err:
        load_dataset("tiny-imagenet", 0, root=tmp_path)
    assert isinstance(err.value, ValueError) and "tiny-imagenet-200.zip" in str(err.value)
    broken = write_tiny_imagenet(tmp_path / "broken", n_per_class=1)
    (broken / "val" / "val_annotations.txt").write_text("val_0.JPEG\tn01000000\t0\t0\t1\t1\n")
    with pytest.raises(ValueError, match="without annotation"):
        load_dataset("tiny-imagenet", 0, root=broken)


def test_wrong_image_size_is_a_value_error(tmp_path):
    folder = write_tiny_imagenet(tmp_path, n_per_class=1)
    Image.new("RGB", (32, 32)).save(folder / "train" / WNIDS[0] / "images" / "x.JPEG")
    with pytest.raises(ValueError, match="expected a 64x64 image"):
        load_dataset("tiny-imagenet", 0, root=tmp_path)
