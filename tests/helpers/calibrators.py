"""The calibrators the generic contract tests fit on scores and labels alone."""

from __future__ import annotations

from selfcal.posthoc import build_calibrator, calibrator_names


def groupless_names() -> tuple[str, ...]:
    """Every registered calibrator's name but those that need ``groups=`` (``uses_groups``:
    their fit without groups is a ``ValueError``; their own test files fit them with groups)."""
    return tuple(n for n in calibrator_names() if not build_calibrator(n).uses_groups)
