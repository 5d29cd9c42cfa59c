"""Batched random crop + horizontal flip, checked against zero-padding with F.pad and slicing."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers.image_fakes import write_cifar10

from selfcal.data import load_dataset
from selfcal.data.augment import black_fill, random_crop_flip


def candidates(image: torch.Tensor, padding: int, fill: float = 0.0) -> dict[tuple, torch.Tensor]:
    """Every (top, left, flip) window of the padded image, by F.pad and slicing."""
    _, h, w = image.shape
    padded = F.pad(image, (padding,) * 4, value=fill)
    out = {}
    for top in range(2 * padding + 1):
        for left in range(2 * padding + 1):
            window = padded[:, top : top + h, left : left + w]
            out[(top, left, False)] = window
            out[(top, left, True)] = torch.flip(window, dims=[2])
    return out


def outcome(image: torch.Tensor, result: torch.Tensor, padding: int) -> tuple:
    matches = [k for k, v in candidates(image, padding).items() if torch.equal(v, result)]
    assert len(matches) == 1, "the result must be one padded, shifted, maybe mirrored window"
    return matches[0]


def test_each_image_is_a_shifted_window_of_the_zero_padded_image():
    x = torch.randn(16, 3, 8, 10, generator=torch.Generator().manual_seed(0))
    before = x.clone()
    out = random_crop_flip(x, torch.Generator().manual_seed(1), padding=3)
    assert out.shape == x.shape and out.dtype == x.dtype and torch.equal(x, before)
    for image, result in zip(x, out, strict=True):
        outcome(image, result, 3)


def test_offsets_and_flips_are_uniform():
    x = torch.randn(3000, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    out = random_crop_flip(x, torch.Generator().manual_seed(2), padding=1)
    counts: dict[tuple, int] = {}
    for image, result in zip(x, out, strict=True):
        key = outcome(image, result, 1)
        counts[key] = counts.get(key, 0) + 1
    assert len(counts) == 18  # 3 x 3 offsets x 2 flips
    expected = 3000 / 18
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 40.8  # chi-square, 17 dof, p = 0.001


def test_seeded_and_padding_zero_is_flip_only():
    x = torch.randn(32, 2, 5, 5, generator=torch.Generator().manual_seed(0))
    first = random_crop_flip(x, torch.Generator().manual_seed(7))
    assert torch.equal(first, random_crop_flip(x, torch.Generator().manual_seed(7)))
    assert not torch.equal(first, random_crop_flip(x, torch.Generator().manual_seed(8)))
    flipped = random_crop_flip(x, torch.Generator().manual_seed(7), padding=0)
    is_flip = [torch.equal(r, torch.flip(i, dims=[2])) for i, r in zip(x, flipped, strict=True)]
    is_same = [torch.equal(r, i) for i, r in zip(x, flipped, strict=True)]
    assert all(a or b for a, b in zip(is_flip, is_same, strict=True)) and any(is_flip)
    assert any(is_same)


def test_per_channel_fill():
    x = torch.full((64, 2, 3, 3), 9.0)
    out = random_crop_flip(x, torch.Generator().manual_seed(0), padding=2, fill=[-1.0, -2.0])
    padded_0, padded_1 = out[:, 0] != 9.0, out[:, 1] != 9.0
    assert padded_0.any() and torch.equal(padded_0, padded_1)
    assert (out[:, 0][padded_0] == -1.0).all() and (out[:, 1][padded_1] == -2.0).all()


def test_black_fill_reproduces_padding_raw_pixels_before_normalising(tmp_path):
    write_cifar10(tmp_path, n_per_batch=4, n_test=2)
    data = load_dataset("cifar10", 0, root=tmp_path)
    standardized = random_crop_flip(
        data.train.x, torch.Generator().manual_seed(3), fill=black_fill(data)
    )
    raw_first = random_crop_flip(data.raw("train").double(), torch.Generator().manual_seed(3))
    torch.testing.assert_close(standardized, data.standardize(raw_first), atol=1e-6, rtol=0)


def test_bad_input_is_a_value_error():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match=r"\[n, C, H, W\]"):
        random_crop_flip(torch.zeros(2, 3, 4), g)
    with pytest.raises(ValueError, match="floating"):
        random_crop_flip(torch.zeros(2, 3, 4, 4, dtype=torch.uint8), g)
    with pytest.raises(ValueError, match="padding"):
        random_crop_flip(torch.zeros(2, 3, 4, 4), g, padding=-1)
    with pytest.raises(ValueError, match="one value per channel"):
        random_crop_flip(torch.zeros(2, 3, 4, 4), g, fill=[0.0, 1.0])
    with pytest.raises(ValueError, match="torch.Generator"):
        random_crop_flip(torch.zeros(2, 3, 4, 4), 0)  # type: ignore[arg-type]
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="one device"):
            random_crop_flip(torch.zeros(2, 3, 4, 4, device="cuda"), g)
