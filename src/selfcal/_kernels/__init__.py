"""Fused CPU kernels for large inputs, and the gate that decides when they run.

Why hand-written: a top-label metric needs, for every row, the maximum, its index, the row sum
and the row minimum (validation), then a bin per confidence and three per-bin sums. Torch
computes each of these as a separate pass over the array -- ``torch.max`` with indices alone
costs about twice the whole fused pass -- and has no exact selection of a few order statistics
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

:mod:`selfcal._kernels.venn_abers` holds the stack scans of the Venn-Abers tables
(:func:`venn_abers_kernels`), whose torch path is a lockstep over the maps and much slower at
every size, so no size gate applies to them.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import warnings
from types import ModuleType

import torch

MIN_ELEMENTS = 1 << 19
"""Inputs with fewer elements than this take the torch path."""


def kernels_for(n_elements: int, device: torch.device) -> ModuleType | None:
    """The kernel module when it should handle an input of ``n_elements`` on ``device``,
    else ``None``."""
    if device.type != "cpu" or n_elements < MIN_ELEMENTS:
        return None
    if os.environ.get("SELFCAL_KERNELS", "1") == "0":
        return None
    return _load()


def venn_abers_kernels(device: torch.device) -> ModuleType | None:
    """:mod:`selfcal._kernels.venn_abers` when it should compute tables for data on
    ``device`` (the CPU, numba installed, ``SELFCAL_KERNELS`` not ``0``), else ``None``."""
    if device.type != "cpu" or os.environ.get("SELFCAL_KERNELS", "1") == "0":
        return None
    return _load("venn_abers")


@functools.cache
def _load(name: str = "cpu") -> ModuleType | None:
    """The numba kernel module ``name``, or ``None`` (with one warning if numba is installed
    but broken)."""
    if importlib.util.find_spec("numba") is None:
        return None
    try:
        module = importlib.import_module(f"selfcal._kernels.{name}")
    except ImportError as error:  # e.g. a numba too old or too new for this numpy
        warnings.warn(
            f"selfcal: numba kernels unavailable ({error}); using torch",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    return module
