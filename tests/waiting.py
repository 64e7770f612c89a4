"""Waiting for a condition another process brings about, with a deadline.

A driver applies asynchronously, in a process of its own: there is no
in-process event to wait on, so the condition is checked again after a
short pause until it holds or the deadline passes.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["eventually"]

_PAUSE = 0.02  # between checks: each one may be an HTTP request or a probe


def eventually(check: Callable[[], bool], deadline: float = 15.0, what: str = "") -> None:
    """Return once ``check()`` is true; AssertionError after ``deadline`` seconds."""
    end = time.monotonic() + deadline
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"not within {deadline}s: {what or check}")
        time.sleep(_PAUSE)
