"""Groups for the tests of the calibrators that use them (``uses_groups``)."""

from __future__ import annotations

from selfcal.posthoc import build_calibrator, calibrator_names


def group_names() -> tuple[str, ...]:
    """Every registered calibrator that needs ``groups=`` (``uses_groups``): the generic
    contract tests leave them out (:func:`helpers.calibrators.groupless_names`) and
    ``tests/posthoc/test_group_contract.py`` fits them with groups."""
    return tuple(n for n in calibrator_names() if build_calibrator(n).uses_groups)
