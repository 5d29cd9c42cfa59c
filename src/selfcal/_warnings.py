"""One way to warn: attributed to the caller's code, not to selfcal's own frames."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

PACKAGE = str(Path(__file__).resolve().parent)


def outside_stacklevel() -> int:
    """The ``stacklevel`` for :func:`warn_user`'s ``warnings.warn`` that points at the first
    frame outside the selfcal package -- the user's line, whichever public function
    (a metric, ``fit``, ``predict_proba``) the warning passed through. (Python 3.12's
    ``skip_file_prefixes`` does this; selfcal supports 3.11.)"""
    frame: FrameType | None = sys._getframe(2)  # warn_user's caller: stacklevel 2
    level = 2
    while frame is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(PACKAGE):
        frame = frame.f_back
        level += 1
    return level


def warn_user(message: str, category: type[Warning]) -> None:
    """``warnings.warn(message, category)`` attributed to the first frame outside selfcal."""
    warnings.warn(message, category, stacklevel=outside_stacklevel())


def warn_unseen_groups(owner: str, unseen: Sequence[str], consequence: str) -> None:
    """The one warning for rows of groups a fitted object never saw: ``"{owner}: group(s)
    'a', 'b' ... were not seen at fit time; {consequence}"`` (at most ten names shown), a
    ``UserWarning`` attributed to the caller (:func:`warn_user`); nothing when ``unseen`` is
    empty."""
    if not unseen:
        return
    shown = ", ".join(repr(n) for n in unseen[:10])
    more = f" and {len(unseen) - 10} more" if len(unseen) > 10 else ""
    warn_user(
        f"{owner}: group(s) {shown}{more} were not seen at fit time; {consequence}", UserWarning
    )
