"""Make the shared helpers (``bilevel_helpers``) importable under ``--import-mode=importlib``,
and run the bilevel tests on one intra-op thread."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def single_thread():
    """Tiny tensors: one intra-op thread is faster and avoids contention on shared CPUs
    (two threads on a loaded 2-core machine made one BO4SC fit 4-10x slower)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
