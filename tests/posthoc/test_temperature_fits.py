"""The temperature fits shared by temperature scaling and the structured calibrators
(:mod:`selfcal.posthoc._temperature_fits`)."""

from __future__ import annotations

import pytest
import torch


def test_shared_fits_reuse_only_live_identical_tensors_and_keep_none_alive():
    """Through one ``TemperatureFits`` a fit is reused for the same score and label tensors
    only: a tensor that merely took a freed one's id is solved afresh, and the shared fits hold
    no tensor alive (a float64 copy made for one fit is freed after it)."""
    import gc
    import weakref

    from selfcal.posthoc import _temperature_fits as T

    gen = torch.Generator().manual_seed(4)
    z = torch.randn(300, 5, generator=gen, dtype=torch.float64) * 3
    y = torch.randint(0, 5, (300,), generator=gen)
    alone = T.solve_temperature(z, y, False)
    shared = T.TemperatureFits()
    assert T.solve_temperature(z, y, False, shared) == alone
    assert T.solve_temperature(z, y, False, shared) is T.solve_temperature(z, y, False, shared)
    assert T.solve_temperature(z, y, False) is not T.solve_temperature(z, y, False)  # unshared
    copy = z * 2  # a fresh tensor: its own fit, not kept alive by the shared fits
    doubled = T.solve_temperature(copy, y, False, shared)
    assert doubled.temperature == pytest.approx(2 * alone.temperature, rel=1e-9)
    alive = weakref.ref(copy)
    del copy
    gc.collect()
    assert alive() is None
    # an entry under another tensor's ids (as after a freed tensor's id is reused)
    other = z * 1.5  # its own temperature: 1.5 times z's
    shared.fits[(id(other), id(y))] = (weakref.ref(z), weakref.ref(y), alone)
    got = T.solve_temperature(other, y, False, shared)
    assert got == T._solve_temperature(other, y) and got != alone
