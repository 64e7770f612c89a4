"""Keeping the collector's full passes off a loaded driver's loop.

A node's desired state is hundreds of thousands of small objects that live
as long as the process. CPython's full (generation 2) collection walks
every tracked object and runs in whichever thread happens to allocate,
the loop's included: at 5,000 endpoints each took 60-70 ms and was most
of what a refresh held the loop for (``benchmarks/bench_refresh_lag.py``).
Objects ``gc.freeze`` has moved to the permanent generation are never
walked again. So after an apply the driver collects (only what is not
frozen yet: short once the bulk is) and freezes what survives -- after
the first apply, then at most once per ``every`` seconds.

Before the first apply there is nothing to keep the loop responsive for,
and everything is being built at once: at 10,000 services from the
Kubernetes API (20,000 list objects, 100,000 endpoints) the automatic full
passes, each walking the whole growing heap again, were 2.4 s of the 7 s
the start-up spent computing. :meth:`HeapFreezer.hold` turns automatic
collection off from the start until the first apply's collect-and-freeze,
or ``limit`` seconds, whichever comes first: the limit bounds what cyclic
garbage (a failed request's traceback, say) piles up while a driver
waits, unsynced, for a source that does not answer.

The price: a frozen object that later becomes garbage *in a cycle* is
never reclaimed. The driver's state is acyclic values (freed by reference
counting when replaced); what is cyclic (tracebacks, trio's internals) is
collected first, so only the cycles alive at a freeze and dropped later
stay -- a few per failed apply at most.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable

import trio

__all__ = ["HeapFreezer"]


class HeapFreezer:
    """Collect and freeze after an apply, at most once per ``every`` seconds."""

    def __init__(self, clock: Callable[[], float], every: float = 60.0) -> None:
        self._clock = clock
        self._every = every
        self._next = -math.inf
        self.freezes = 0
        self._held = False

    async def hold(self, limit: float = 120.0) -> None:
        """No automatic collection from now until the first apply, or ``limit`` seconds."""
        if self.freezes or not gc.isenabled():
            return  # already past start-up, or collection is someone else's choice
        gc.disable()
        self._held = True
        try:
            await trio.sleep(limit)
        finally:
            self._release()

    def _release(self) -> None:
        if self._held:
            self._held = False
            gc.enable()

    def after_apply(self) -> None:
        now = self._clock()
        if now < self._next:
            return
        gc.collect()
        gc.freeze()
        self._release()
        self.freezes += 1
        self._next = now + self._every
