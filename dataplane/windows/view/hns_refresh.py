"""When the Windows platform reads HNS again to find what changed behind its back.

A real host charges per call (an open, a query and a close to read one
endpoint), so the periodic re-read (``EndpointRefreshInterval``) is not
one burst: each interval is one *cycle*, cut into :data:`TICKS` ticks.
Every tick enumerates (one call per network, one for load balancers:
deletions show there) and reads its share of the endpoints whose ACLs we
keep; the cycle's first tick also lists the networks. So every endpoint
is read once per interval and anything changed behind our back is found
within two. A tick reads at most ``rate`` calls a second's worth, so a
refresh never stalls an apply; a node too big for that rate takes longer
than an interval per cycle, and says so once.

Pure: the platform asks what to read and when, and does the reading.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["CALLS_PER_READ", "DEFAULT_RATE", "TICKS", "RefreshCycle", "Tick"]

log = logging.getLogger(__name__)

TICKS = 10
CALLS_PER_READ = 3  # open, query, close
# HCN calls a second the re-reads may take (--hns-refresh-rate): enough to
# read 1,000 endpoints (3 calls each) within a 30 s EndpointRefreshInterval,
# so what someone removed is back within two. The cost: during a tick, at
# 5 ms a call, half of one HNS worker's time; a host slower than 10 ms a
# call cannot give that much, and its cycle stretches (said once).
DEFAULT_RATE = 100.0


@dataclass(frozen=True, slots=True)
class Tick:
    """One tick's work: list the networks (a cycle's first tick) and read these endpoints."""

    networks: bool
    reads: tuple[str, ...]


@dataclass(slots=True)
class RefreshCycle:
    """The re-read schedule: ``interval`` seconds per cycle (0: never), ``rate`` calls/s."""

    interval: float = 0.0
    rate: float = DEFAULT_RATE
    next_tick: float = math.inf
    _queue: list[str] = field(default_factory=list)
    _share: int = 0
    _tick: int = 0  # ticks into the cycle
    _slow_logged: bool = False

    @property
    def tick_seconds(self) -> float:
        return self.interval / TICKS

    def schedule(self, now: float, interval: float) -> None:
        """Count the next tick from ``now`` (after a listing; the interval may have changed)."""
        if interval != self.interval:
            self.interval = interval
            self._queue, self._tick = [], 0  # a new cycle at the new pace
        self.next_tick = now + self.tick_seconds if interval > 0 else math.inf

    def due(self, now: float) -> bool:
        return now >= self.next_tick

    def take(self, now: float, endpoints: Iterable[str]) -> Tick:
        """This tick's work; ``endpoints`` are the ids whose ACLs we keep, now."""
        start = self._tick == 0
        if start:
            self._queue = sorted(endpoints, reverse=True)  # popped from the end: in order
            self._share = math.ceil(len(self._queue) / TICKS)
        budget = self._share
        if self.rate > 0:
            most = max(1, int(self.rate * self.tick_seconds / CALLS_PER_READ))
            if most < budget and not self._slow_logged:
                self._slow_logged = True
                cycle = math.ceil(len(self._queue) / most) * self.tick_seconds
                log.warning(
                    "re-reading %d HNS endpoints at %.0f calls/s takes %.0f s, over the"
                    " refresh interval of %.0f s (--hns-refresh-rate)",
                    len(self._queue),
                    self.rate,
                    cycle,
                    self.interval,
                )
            budget = min(budget, most)
        reads = tuple(self._queue.pop() for _ in range(min(budget, len(self._queue))))
        self._tick += 1
        if self._tick >= TICKS and not self._queue:
            self._tick = 0  # every endpoint read: the next tick starts a cycle
        self.next_tick = now + self.tick_seconds if self.interval > 0 else math.inf
        return Tick(start, reads)
