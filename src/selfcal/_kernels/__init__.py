"""Fused CPU kernels for large inputs, and the gate that decides when they run.

Why hand-written: a top-label metric needs, for every row, the maximum, its index, the row sum
and the row minimum (validation), then a bin per confidence and three per-bin sums. Torch
computes each of these as a separate pass over the array -- ``torch.max`` with indices alone
costs as much as the whole fused pass -- and has no exact selection of a few order statistics
(AdaECE's equal-mass edges) short of a full sort. No maintained library fuses them, so
:mod:`selfcal._kernels.cpu` writes them as serial `numba <https://numba.pydata.org>`_ loops
run on row blocks by a thread pool.

They run only when numba is installed (it comes with the ``full`` extra), the data are on the
CPU, the input has at least :data:`MIN_ELEMENTS` elements (below that, numba's import and
first-call compilation would cost more than they save), and ``SELFCAL_KERNELS`` is not ``0``.
Otherwise the torch path runs. Both paths give the same predicted classes, the same
confidences from probabilities, and, for the same confidences, the same bin counts and order
statistics, with float64 sums equal up to summation order. Confidences from logits agree to
an ulp or two: the exponentials and row sums round differently, as they do on a GPU, and a
metric whose bin edges fall exactly on tied confidences (debiased ECE's midpoints) can then
place a tied sample differently (``tests/metrics/test_kernels.py``). Nothing outside this
package imports numba.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from types import ModuleType

import torch

MIN_ELEMENTS = 1 << 19
"""Inputs with fewer elements than this take the torch path."""


def kernels_for(n_elements: int, device: torch.device) -> ModuleType | None:
    """The kernel module when it should handle an input of ``n_elements`` on ``device``,
    else ``None``."""
    if device.type != "cpu" or n_elements < MIN_ELEMENTS or not _enabled():
        return None
    from selfcal._kernels import cpu

    return cpu


def _enabled() -> bool:
    return os.environ.get("SELFCAL_KERNELS", "1") != "0" and _numba_installed()


@functools.cache
def _numba_installed() -> bool:
    return importlib.util.find_spec("numba") is not None
