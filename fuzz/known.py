"""Findings already reported against dataplane/ and not fixed yet, tolerated by the targets.

A long fuzzing run that stops at the first input hitting a known bug finds
nothing new, and CI would fail on a bug already reported. So an exception
that matches an entry here (its type, and the file and function it was
raised in), or a broken invariant a harness names by its id
(:func:`tolerate`), is *suppressed*: the input counts as passing and the
process says so once on stderr (``fuzz: known finding F2 suppressed:
...``), which :mod:`fuzz.run` reports. ``FUZZ_NO_SUPPRESS=1`` (``fuzz/run.py
--no-suppress``) turns this off, to check a fix: once fixed, delete the
entry. Each entry is described in ``fuzz/README.md`` with its reproducer.
"""

from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass

__all__ = ["KNOWN", "Known", "leaves", "suppressed", "tolerate"]


@dataclass(frozen=True, slots=True)
class Known:
    id: str
    summary: str
    # For an exception: its type, and the raising frame's file (from the
    # repository root) and function. None for a broken invariant.
    exc_type: type[BaseException] | None = None
    file: str = ""
    function: str = ""


# F1-F3 (fuzz/README.md) were fixed where they were found; none is open.
KNOWN: tuple[Known, ...] = ()

_SAID: set[str] = set()


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside ``exc``, exception groups unwrapped."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in leaves(sub)]
    return [exc]


def _match(exc: BaseException) -> Known | None:
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return None
    where = frames[-1]
    for known in KNOWN:
        if (
            known.exc_type is not None
            and isinstance(exc, known.exc_type)
            and where.filename.replace(os.sep, "/").endswith(known.file)
            and where.name == known.function
        ):
            return known
    return None


def _say(known: Known) -> None:
    if known.id not in _SAID:
        _SAID.add(known.id)
        print(f"fuzz: known finding {known.id} suppressed: {known.summary}", file=sys.stderr)


def suppressed(exc: BaseException) -> bool:
    """True if every exception in ``exc`` is a known finding (and suppression is on)."""
    if os.environ.get("FUZZ_NO_SUPPRESS"):
        return False
    found = [_match(leaf) for leaf in leaves(exc)]
    if not found or None in found:
        return False
    for known in found:
        assert known is not None
        _say(known)
    return True


def tolerate(finding: str) -> bool:
    """True if the harness may let known finding ``finding`` pass (suppression is on)."""
    if os.environ.get("FUZZ_NO_SUPPRESS"):
        return False
    _say(next(k for k in KNOWN if k.id == finding))
    return True
