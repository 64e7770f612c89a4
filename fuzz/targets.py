"""The fuzz targets by name: harness, whether it mutates structurally, input size cap.

Importing this imports :mod:`dataplane`; :mod:`fuzz.target` does so under
atheris's import instrumentation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fuzz import envelopes, frames, known, managers

__all__ = ["TARGETS", "Target"]


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    test_one_input: Callable[[bytes], None]
    structured: bool  # use fuzz.structured's mutator and crossover
    max_len: int  # libFuzzer's -max_len: bytes per input


def _guarded(test_one_input: Callable[[bytes], None]) -> Callable[[bytes], None]:
    """``test_one_input``, but passing where it hits only findings listed in fuzz.known."""

    def run(data: bytes) -> None:
        try:
            test_one_input(data)
        except Exception as exc:
            if not known.suppressed(exc):
                raise

    return run


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("frames", _guarded(frames.test_one_input), structured=False, max_len=8192),
        Target("envelopes", _guarded(envelopes.test_one_input), structured=True, max_len=16384),
        Target("managers", _guarded(managers.test_one_input), structured=True, max_len=16384),
    )
}
