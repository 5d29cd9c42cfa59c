"""The binning core: the arithmetic path for equal-width edges equals the binary search; the
edge rules of the debiased ECE."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from selfcal.metrics.binning import (
    CHUNK,
    bin_index,
    bin_statistics,
    discrete_edges,
    kumar_equal_mass_edges,
    uniform_edges,
)


def searched(values: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    """Reference: binary search with the ``(e_m, e_{m+1}]`` convention."""
    return torch.bucketize(values.double(), edges[1:-1], right=False)


def near_edges(edges: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Every edge and its neighbours a few ulps away, in ``dtype``, clipped to [0, 1]."""
    e = edges.to(dtype)
    out = [e]
    lo, hi = e.clone(), e.clone()
    for _ in range(3):
        lo = torch.nextafter(lo, torch.zeros_like(lo))
        hi = torch.nextafter(hi, torch.ones_like(hi))
        out += [lo, hi]
    return torch.cat(out).clamp(0, 1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("n_bins", [1, 2, 3, 7, 10, 15, 20, 49, 50, 100, 333, 1000])
def test_uniform_index_equals_binary_search_at_and_around_every_edge(n_bins, dtype):
    edges = uniform_edges(n_bins)
    gen = torch.Generator().manual_seed(n_bins)
    values = torch.cat([near_edges(edges, dtype), torch.rand(5000, generator=gen, dtype=dtype)])
    assert torch.equal(bin_index(values, edges), searched(values, edges))


def test_uniform_index_on_values_that_are_multiples_of_one_over_m():
    # k / (M * 2^j) style values stress the rounding of M * c
    for n_bins in (3, 10, 15, 1000):
        k = torch.arange(0, 4 * n_bins + 1, dtype=torch.float64)
        values = torch.cat([k / (4 * n_bins), (k / (4 * n_bins)) * (1 - 2**-52)]).clamp(0, 1)
        edges = uniform_edges(n_bins)
        assert torch.equal(bin_index(values, edges), searched(values, edges))


def test_non_uniform_edges_still_use_the_search():
    edges = torch.tensor([0.0, 0.1, 0.5, 0.55, 1.0], dtype=torch.float64)
    values = near_edges(edges, torch.float64)
    assert torch.equal(bin_index(values, edges), searched(values, edges))


def test_chunked_statistics_equal_one_pass():
    gen = torch.Generator().manual_seed(0)
    n = 3 * CHUNK + 123
    values = torch.rand(n, generator=gen, dtype=torch.float64)
    targets = (torch.rand(n, generator=gen) < values).double()
    edges = uniform_edges(15)
    chunked = bin_statistics(values, targets, edges)
    index = searched(values, edges)
    one_pass = bin_statistics(values, targets, edges, index=index)
    assert torch.equal(chunked.count, one_pass.count)
    torch.testing.assert_close(chunked.confidence_sum, one_pass.confidence_sum, rtol=1e-13, atol=0)
    torch.testing.assert_close(chunked.accuracy_sum, one_pass.accuracy_sum, rtol=1e-13, atol=0)


def test_kumar_edges_follow_array_split_midpoints():
    values = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7], dtype=torch.float64)
    edges = kumar_equal_mass_edges(values, 3)  # groups [.1 .2 .3] [.4 .5] [.6 .7]
    np.testing.assert_allclose(edges.numpy(), [0.0, 0.35, 0.55, 1.0], atol=1e-15)


def test_discrete_edges_give_each_distinct_value_its_own_bin():
    values = torch.tensor([0.7, 0.2, 0.7, 0.5, 0.2], dtype=torch.float64)
    edges = discrete_edges(values)
    np.testing.assert_allclose(edges.numpy(), [0.0, 0.35, 0.6, 1.0], atol=1e-15)
    assert bin_index(values, edges).tolist() == [2, 0, 2, 1, 0]
