"""Shared fixtures for the model tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def single_thread():
    """Tiny tensors: one intra-op thread is faster and avoids contention on shared CPUs."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
