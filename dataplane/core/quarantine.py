"""Quarantine: objects the dataplane refused, each retried alone with backoff.

A programmer that cannot write one object (a chain the kernel refuses, an
IP set it cannot fill, a route to a vanished interface) quarantines that
object and writes everything else. Keeping bad objects apart is what stops
one of them from stalling the node: the apply that found it still lands,
and later applies skip it until its retry is due.

Invariants:

* An object is in quarantine until its desired value changes (the caller
  calls :meth:`Quarantine.release`: the new value gets a fresh chance in the
  next apply), it is removed, or a retry succeeds.
* Retries of one object back off exponentially (1 s doubling to 5 min by
  default) from its own first failure; other objects are unaffected.
* Pure bookkeeping: no I/O, the clock is injected.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from dataplane.core.backoff import Backoff

__all__ = ["QUARANTINE_BACKOFF", "Quarantine", "Rejection", "Unsaid"]

K = TypeVar("K")

QUARANTINE_BACKOFF = Backoff(initial=1.0, maximum=300.0)


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why an object is quarantined, and when it is tried again."""

    reason: str
    failures: int
    retry_at: float


class Quarantine(Generic[K]):
    """Refused objects by key, with per-object retry times."""

    def __init__(self, clock: Callable[[], float], backoff: Backoff = QUARANTINE_BACKOFF) -> None:
        self._clock = clock
        self._backoff = backoff
        self._held: dict[K, Rejection] = {}

    def reject(self, key: K, reason: str) -> bool:
        """Quarantine ``key`` (again); True if it was not quarantined before."""
        previous = self._held.get(key)
        failures = previous.failures + 1 if previous else 1
        retry_at = self._clock() + self._backoff.delay(failures)
        self._held[key] = Rejection(reason, failures, retry_at)
        return previous is None

    def release(self, key: K) -> bool:
        """Take ``key`` out of quarantine; True if it was in."""
        return self._held.pop(key, None) is not None

    def due(self) -> list[K]:
        """Quarantined keys whose retry time has come."""
        now = self._clock()
        return [k for k, r in self._held.items() if r.retry_at <= now]

    def next_retry(self) -> float:
        return min((r.retry_at for r in self._held.values()), default=math.inf)

    def get(self, key: K) -> Rejection | None:
        return self._held.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._held

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._held))

    def __len__(self) -> int:
        return len(self._held)

    def items(self) -> list[tuple[K, Rejection]]:
        return list(self._held.items())

    def reasons(self) -> dict[K, str]:
        """Each held object and why it is held."""
        return {key: rejection.reason for key, rejection in self._held.items()}


class Unsaid(Generic[K]):
    """For a programmer whose failures are a state it recomputes (sysctls,
    VXLAN devices) rather than a quarantine: which of them are news.

    A failure is news when it was not failing at the last call, or fails
    now for another reason; one that stops and starts again is news again.
    """

    def __init__(self) -> None:
        self._said: dict[K, str] = {}

    def news(self, failing: Mapping[K, str]) -> list[tuple[K, str]]:
        new = [(key, why) for key, why in failing.items() if self._said.get(key) != why]
        self._said = dict(failing)
        return new
