"""What the main loop tells whoever watches it (metrics, health, ``show``).

The loop calls these hooks at each step; :class:`NullObserver` (the
default) does nothing, so a driver nobody watches pays one method call per
batch and per apply. ``dataplane.ops.observer.Observer`` is the real one.
Hooks run on the main loop and must not block: they only record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ["LoopObserver", "NullObserver"]


class LoopObserver(Protocol):
    def received(self, kinds: Sequence[str], now: float) -> None:
        """A batch arrived: the payload kind of each message, at monotonic ``now``."""

    def rejected(self, kind: str) -> None:
        """A message of ``kind`` was rejected whole for an invalid field."""

    def refused_field(self, path: str, why: str) -> None:
        """A message carried a field the driver does not act on (``kind.field``), first time."""

    def busy(self, what: str) -> None:
        """The loop starts work (``decode``, ``apply``); it is stuck if this lasts."""

    def idle(self) -> None:
        """The loop waits for input again."""

    def in_sync_received(self) -> None: ...

    def applied(self, error: str | None, complete: float, program: float, now: float) -> None:
        """An apply ended (``error`` None: it succeeded); the two phases' seconds."""

    def decoded(self, seconds: float) -> None:
        """Phase 1 of one drained batch took ``seconds``."""

    @property
    def wants_preview(self) -> bool:
        """Whether :meth:`previewed` is worth the loop handing changes down early."""

    def previewed(self, waiting: str) -> None:
        """Not programmable yet (``waiting`` says why, in one line), the managers'
        changes were handed down to the platform without an apply: what was
        received can be shown, pending."""


class NullObserver:
    def received(self, kinds: Sequence[str], now: float) -> None:
        pass

    def rejected(self, kind: str) -> None:
        pass

    def refused_field(self, path: str, why: str) -> None:
        pass

    def busy(self, what: str) -> None:
        pass

    def idle(self) -> None:
        pass

    def in_sync_received(self) -> None:
        pass

    def applied(self, error: str | None, complete: float, program: float, now: float) -> None:
        pass

    def decoded(self, seconds: float) -> None:
        pass

    @property
    def wants_preview(self) -> bool:
        return False  # nobody reads the state: no early hand-down either

    def previewed(self, waiting: str) -> None:
        pass
